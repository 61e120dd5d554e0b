"""The cold index's int8 stage: each archived memory keeps an int8 code
(``cold_codes.code8``) beside its sign code, and a cold search reads the
exact vectors of only the ``exact_count(k)`` candidates those codes rank
best (plus any without one), not of every candidate.

What is checked: the encoding; that the stage keeps the exact top 10 of a
store of a few thousand archived 384-d memories while reading at most
``exact_count(10)`` vectors a search; that the scores stay exact cosines;
that rows without an int8 code (older stores, migrated on open) are read
and found, and get one when a rewrite reads their vectors; verify and
repair; restore by meaning; keyword candidates and the policy's filters.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from tierstore import ManualClock, Policy, TierStore
from tierstore.core import hybrid
from tierstore.errors import InvalidInputError
from tierstore.storage.objectstore import LocalObjectStore
from tierstore.tiers.cold_index import (
    candidate_count,
    code8_size,
    decode_code8,
    encode_code8,
    exact_count,
    insert_codes,
)

T0 = 1_700_000_000.0
HOUR = 3600.0


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    X = rng.normal(size=(n, dim)).astype(np.float32)
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int, clusters: int, seed: int, draw_seed: int) -> np.ndarray:
    """``n`` unit vectors around ``clusters`` centres (fixed by ``seed``), drawn with ``draw_seed``:
    the data and its queries share the centres, as real embeddings and their queries do."""
    centres = unit_rows(np.random.default_rng(seed), clusters, dim)
    rng = np.random.default_rng(draw_seed)
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class CountingStore(LocalObjectStore):
    """A local object store that records its reads: ``(key, range)`` per located vector
    (``read_ranges``: one range each) or whole read (``get``)."""

    reads: list[tuple[str, object]] = []

    def get(self, key, start=None, end=None):  # type: ignore[override]
        CountingStore.reads.append((key, (start, end)))
        return super().get(key, start, end)

    def read_ranges(self, key, ranges):  # type: ignore[override]
        CountingStore.reads.extend((key, r) for r in ranges)
        return super().read_ranges(key, ranges)


def archive_all(store: TierStore, clock: ManualClock, X: np.ndarray, ns: str = "u", **fields) -> list[str]:
    """``X`` as conversations ``m0``, ``m1``, ... of ``ns``, all archived by sweeps."""
    store.add_batch(
        ns,
        [
            {"content": f"note {i}", "embedding": X[i], "id": f"m{i}", "memory_type": "conversation", **fields}
            for i in range(len(X))
        ],
    )
    clock.advance(2 * HOUR)
    while store.sweep().archived:
        pass
    assert store.engine.cold_index.count(ns) == len(X)
    return [f"m{i}" for i in range(len(X))]


def code8_column(store: TierStore) -> dict[int, bytes | None]:
    return dict(store.engine.catalog.query("SELECT rid, code8 FROM cold_codes"))


# ---------------------------------------------------------------------------
# the encoding


def test_code8_round_trip_and_layout():
    X = unit_rows(np.random.default_rng(1), 2000, 384)
    blobs = encode_code8(X)
    assert all(len(b) == code8_size(384) == 388 for b in blobs)
    decoded = np.stack([decode_code8(b, 384) for b in blobs])
    cos = (decoded * X).sum(axis=1) / np.linalg.norm(decoded, axis=1)
    assert cos.min() >= 0.99  # in fact ~0.9999
    # the layout: a little-endian float32 scale, max|v| / 127, then round(v / scale) as int8
    scale = np.frombuffer(blobs[0][:4], "<f4")[0]
    assert scale == np.float32(np.abs(X[0]).max() / 127)
    q = np.frombuffer(blobs[0], np.int8, 384, 4)
    assert np.array_equal(q, np.rint(X[0].astype(np.float64) / np.float64(scale)).astype(np.int8))
    assert np.abs(q).max() == 127
    # an all-zero vector: scale 1, zero components
    zero = encode_code8(np.zeros((1, 384), np.float32))[0]
    assert np.frombuffer(zero[:4], "<f4")[0] == 1.0 and not any(zero[4:])
    # what is not a code of this dimension decodes to nothing
    assert decode_code8(blobs[0][:-1], 384) is None and decode_code8(blobs[0], 383) is None
    assert decode_code8(np.float32(-1).tobytes() + blobs[0][4:], 384) is None
    with pytest.raises(InvalidInputError):
        insert_codes(sqlite3.connect(":memory:"), [(1, "u", bytes(8), None, None, "not bytes")])


# ---------------------------------------------------------------------------
# a store of a few thousand archived memories

N, DIM, QUERIES = 3000, 384, 50


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """3000 clustered 384-d memories, all archived (local directory, reads counted), and 50 queries."""
    tmp = tmp_path_factory.mktemp("int8")
    X = clustered(N, DIM, N // 10, seed=1, draw_seed=1)
    Q = clustered(QUERIES, DIM, N // 10, seed=1, draw_seed=2)
    clock = ManualClock(T0)
    store = TierStore.open(tmp / "s", dim=DIM, clock=clock, cold=CountingStore(tmp / "cold"))
    archive_all(store, clock, X)
    yield store, X, Q
    store.close()


def cold_search(store: TierStore, q: np.ndarray, k: int = 10, **options) -> tuple[list, int]:
    """The hits of a cold search with the vector cache cleared, and the vector reads it made."""
    store.engine.vector_cache.clear()
    CountingStore.reads = []
    hits = store.search("u", q, k=k, include_cold=True, record_access=False, **options)
    return hits, len(CountingStore.reads)


def exact_top(X: np.ndarray, q: np.ndarray, k: int = 10) -> list[str]:
    return [f"m{i}" for i in np.argsort(-(X.astype(np.float64) @ q), kind="stable")[:k]]


@pytest.mark.slow
def test_the_int8_stage_keeps_the_exact_top_10_and_reads_few_vectors(big):
    store, X, Q = big
    found = 0
    for q in Q:
        hits, reads = cold_search(store, q, explain=True)
        assert reads <= exact_count(10) == 20  # of the 100 candidates (fewer: see test_cold_bounds.py)
        found += len({h.id for h in hits} & set(exact_top(X, q)))
        for h in hits:  # the similarity reported is the exact cosine, from the archived vector
            exact = float(X[int(h.id[1:])].astype(np.float64) @ q)
            assert abs(h.explain.raw["similarity"] - exact) < 1e-5
    assert found / (10 * len(Q)) >= 0.95


@pytest.mark.slow
def test_rows_without_an_int8_code_are_read_and_found_and_a_layout_writes_their_codes(big):
    store, X, Q = big
    with_codes = [[h.id for h in cold_search(store, q)[0]] for q in Q[:10]]
    # an older store: no int8 codes (NULL). Every candidate is read, as before the stage; the same hits
    store.engine.catalog.write(lambda c: c.execute("UPDATE cold_codes SET code8 = NULL"))
    for q, before in zip(Q[:10], with_codes):
        hits, reads = cold_search(store, q)
        assert [h.id for h in hits] == before and reads == candidate_count(10)
    # half of them NULL: those among the candidates are read, beside the 20 best of the others
    rng = np.random.default_rng(4)
    rids = [r for (r,) in store.engine.catalog.query("SELECT rid FROM cold_codes ORDER BY rid")]
    half = set(rng.choice(rids, len(rids) // 2, replace=False).tolist())
    blobs = encode_code8(X)
    rid_of = {mid: rid for rid, mid in store.engine.catalog.query("SELECT rid, id FROM memories")}
    store.engine.catalog.write(
        lambda c: c.executemany(
            "UPDATE cold_codes SET code8 = ? WHERE rid = ?",
            [(blobs[i], rid_of[f"m{i}"]) for i in range(N) if rid_of[f"m{i}"] not in half],
        )
    )
    for q, before in zip(Q[:10], with_codes):
        cand, _ = store.engine.cold_index.candidates("u", q, candidate_count(10))
        without = len(set(cand.tolist()) & half)
        hits, reads = cold_search(store, q)
        assert [h.id for h in hits] == before and reads <= without + exact_count(10)
        assert reads < candidate_count(10)
    assert store.verify().ok  # a NULL code8 is not damage
    # a rewrite that reads the vectors anyway (the layout by code) writes the missing codes
    assert store.compact_cold() > 0
    codes = code8_column(store)
    assert None not in codes.values()
    assert all(codes[rid_of[f"m{i}"]] == blobs[i] for i in range(N))


# ---------------------------------------------------------------------------
# a small store

SMALL_DIM = 16


@pytest.fixture
def small(tmp_path):
    """40 archived conversations at 16 dimensions (more than the 20 read exactly for k <= 10)."""
    X = unit_rows(np.random.default_rng(7), 40, SMALL_DIM)
    clock = ManualClock(T0)
    store = TierStore.open(tmp_path / "s", dim=SMALL_DIM, clock=clock, cold=CountingStore(tmp_path / "cold"))
    archive_all(store, clock, X)
    yield store, clock, X
    store.close()


def test_a_store_from_before_int8_codes_gets_the_column_on_open(tmp_path):
    X = unit_rows(np.random.default_rng(3), 40, SMALL_DIM)
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=SMALL_DIM, clock=clock) as store:
        archive_all(store, clock, X)
    with sqlite3.connect(tmp_path / "s" / "catalog.sqlite") as conn:
        conn.execute("ALTER TABLE cold_codes DROP COLUMN code8")
    with TierStore.open(tmp_path / "s", clock=clock) as store:
        assert all(v is None for v in code8_column(store).values())  # migrated: the column, NULL
        for i in (0, 17, 33):
            hits = store.search("u", X[i], k=3, include_cold=True, record_access=False)
            assert hits[0].id == f"m{i}"
        assert store.verify().ok


def test_verify_names_a_damaged_int8_code_and_repair_writes_it_again(small):
    store, _, X = small
    rid = {mid: r for r, mid in store.engine.catalog.query("SELECT rid, id FROM memories")}
    good = code8_column(store)
    flipped = good[rid["m3"]][:4] + (-np.frombuffer(good[rid["m3"]], np.int8, SMALL_DIM, 4)).tobytes()
    store.engine.catalog.write(
        lambda c: c.executemany(
            "UPDATE cold_codes SET code8 = ? WHERE rid = ?",
            [(flipped, rid["m3"]), (good[rid["m5"]][:-1], rid["m5"]), (None, rid["m8"])],
        )
    )
    report = store.verify()
    wrong = {m for p in report.problems if p.kind == "cold_index" for m in p.memories}
    assert wrong == {"u/m3", "u/m5"}  # the NULL one is not damage
    fixed = store.repair()
    assert fixed.ok, fixed.problems
    codes = code8_column(store)
    assert codes[rid["m3"]] == good[rid["m3"]] and codes[rid["m5"]] == good[rid["m5"]]
    assert store.verify().ok
    hits = store.search("u", X[3], k=1, include_cold=True, record_access=False)
    assert hits[0].id == "m3"


def test_restore_by_meaning_reads_few_vectors_and_restores_the_best(small):
    store, _, X = small
    q = X[12] + 0.4 * X[13]
    q = (q / np.linalg.norm(q)).astype(np.float32)
    expected = exact_top(X, q, 3)
    CountingStore.reads = []
    assert store.restore("u", query=q, k=3) == expected
    vectors = [
        r for _, r in CountingStore.reads if r[0] is not None and r[1] - r[0] == 4 * SMALL_DIM
    ]  # (the rest: the restore's records)
    assert len(vectors) == exact_count(3) < 40
    assert all(store.get("u", mid).tier == "hot" for mid in expected)


def test_keyword_candidates_are_always_read_exactly(small, monkeypatch):
    """A memory found by its words is rescored from its vector however far its meaning is."""
    store, clock, X = small
    far = (-X[0]).astype(np.float32)  # the opposite of the query: last by its int8 code
    store.add("u", "the zebra crossing", far, memory_type="conversation", id="zebra")
    clock.advance(2 * HOUR)
    store.sweep()
    assert store.get("u", "zebra").tier == "cold"
    fetched: list[list[str]] = []
    real = hybrid.fetch_row_vectors
    monkeypatch.setattr(
        hybrid, "fetch_row_vectors", lambda *a, **kw: fetched.append([r.id for r in a[4]]) or real(*a, **kw)
    )
    hits = store.search("u", X[0], k=5, text="zebra", include_cold=True, record_access=False)
    assert hits[0].id == "m0"
    # read: the 20 best of the 41 by their int8 codes, and the keyword candidate (by those codes, the worst)
    assert fetched and "zebra" in fetched[0] and len(fetched[0]) == exact_count(5) + 1


def test_the_int8_stage_chooses_among_the_candidates_the_filters_keep(tmp_path):
    """A type filter applies before the stage: the 20 read are all of the type asked for
    (else ~7 of them would be, and fewer than 10 hits come back)."""
    policy = Policy.from_dict({"types": {"note": {"ttl": "1h", "half_life": "20m"}}})
    rng = np.random.default_rng(12)
    X = unit_rows(rng, 90, SMALL_DIM)
    clock = ManualClock(T0)
    cold = CountingStore(tmp_path / "cold")
    with TierStore.open(tmp_path / "s", dim=SMALL_DIM, clock=clock, policy=policy, cold=cold) as store:
        store.add_batch(
            "u",
            [
                {
                    "content": f"note {i}",
                    "embedding": X[i],
                    "id": f"m{i}",
                    "memory_type": "note" if i % 3 == 0 else "conversation",
                }
                for i in range(len(X))
            ],
        )
        clock.advance(2 * HOUR)
        while store.sweep().archived:
            pass
        assert store.engine.cold_index.count("u") == 90
        q = X[9]
        notes = list(range(0, 90, 3))
        expected = [f"m{i}" for i in sorted(notes, key=lambda i: -float(X[i] @ q))[:10]]
        CountingStore.reads = []
        hits = store.search("u", q, k=10, memory_types=["note"], include_cold=True, record_access=False)
        # all 90 are candidates (fewer than 100); of the 20 best of the 30 notes, those whose codes' bounds
        # may reach the best 10 are read (as alike in all but meaning as these, about 10), the best 10 returned
        assert [h.id for h in hits] == expected
        assert 10 <= len(CountingStore.reads) <= exact_count(10)


@pytest.mark.slow
def test_without_a_filter_only_the_chosen_candidates_rows_are_read(big, monkeypatch):
    """With no filter in force the int8 codes choose before the catalog is read:
    the search reads the rows of exact_count(k) candidates, not of all 100; with a
    type filter (which needs the rows to decide) it reads every candidate's row.
    The hits are the same either way."""
    from tierstore.core import row_ranker

    store, X, Q = big
    asked: list[int] = []
    plain = row_ranker._cold_rows

    def counted(catalog, ns, rids, superseded):
        asked.append(len(rids))
        return plain(catalog, ns, rids, superseded)

    monkeypatch.setattr(row_ranker, "_cold_rows", counted)
    for q in Q[:10]:
        asked.clear()
        hits, _ = cold_search(store, q)
        assert asked == [exact_count(10)]
        asked.clear()
        filtered, _ = cold_search(store, q, memory_types=["conversation"])
        assert asked == [candidate_count(10)]
        assert [h.id for h in filtered] == [h.id for h in hits]  # every memory is a conversation

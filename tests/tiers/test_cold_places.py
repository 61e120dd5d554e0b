"""Where an archived vector sits: the cold index keeps, per cold memory, the
offset of its embedding within its record frame and the CRC32 of its bytes
(``cold_codes.vector_at``/``vector_crc``), so a search reads the vector alone
instead of decoding the record. The place is an optimisation only: a wrong
or unknown one costs a whole-record read, never a wrong vector; every path
that writes codes writes places, verify() checks them and repair() fixes them.
"""

from __future__ import annotations

import sqlite3
import zlib

import numpy as np
import pytest

import tierstore.tiers.cold as cold_module
from tierstore import ManualClock, TierStore
from tierstore.core.row_ranker import RowRanker
from tierstore.errors import CorruptDataError, InvalidInputError
from tierstore.kernels import TIER_COLD
from tierstore.storage.objectstore import LocalObjectStore
from tierstore.tiers import cold_index
from tierstore.tiers.archive import encode_batch
from tierstore.tiers.cold import Location
from tierstore.tiers.cold_index import CODES_COMPLETE, exact_count, fetch_vectors, insert_codes

DIM = 16
T0 = 1_700_000_000.0
HOUR = 3600.0


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def _archive(store, clock, vecs, content=lambda i: f"note {i}") -> list[str]:
    """Add ``vecs`` as conversations of ``u`` and sweep them into one archive object: their ids."""
    ids = store.add_batch(
        "u", [{"content": content(i), "embedding": v, "memory_type": "conversation"} for i, v in enumerate(vecs)]
    )
    clock.advance(2 * HOUR)
    assert store.sweep().archived == len(vecs)
    return ids


@pytest.fixture
def archived(tmp_path):
    """A store with 30 archived conversations (one object) and their vectors by id."""
    rng = np.random.default_rng(11)
    clock = ManualClock(T0)
    vecs = [unit(rng.normal(size=DIM)) for _ in range(30)]
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = _archive(store, clock, vecs, lambda i: f"turn {i} " + "x" * (i * 7))
    yield store, dict(zip(ids, vecs))
    store.close()


def _places(store) -> dict[str, tuple]:
    """id -> (cold_key, cold_offset, vector_at, vector_crc) of every cold memory."""
    return {
        mid: (key, off, at, crc)
        for mid, key, off, at, crc in store.engine.catalog.query(
            "SELECT m.id, m.cold_key, m.cold_offset, c.vector_at, c.vector_crc FROM memories m"
            " JOIN cold_codes c ON c.rid = m.rid WHERE m.tier = ?",
            (TIER_COLD,),
        )
    }


def _assert_places_hold(store, vecs: dict) -> None:
    places = _places(store)
    assert set(places) == set(vecs)
    for mid, (key, off, at, crc) in places.items():
        emb = vecs[mid].astype("<f4").tobytes()
        data = store.engine.cold.store.get(key)
        assert at is not None and data[off + at : off + at + len(emb)] == emb, mid
        assert crc == zlib.crc32(emb), mid


class DecodeCounter:
    """Counts whole records decoded by the cold tier's vector reads."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        real = cold_module.decode_vector

        def counting(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(cold_module, "decode_vector", counting)


def test_encoded_and_decoded_entries_say_where_each_embedding_starts():
    rng = np.random.default_rng(1)
    records = []
    for i in range(5):
        emb = unit(rng.normal(size=DIM)).astype("<f4").tobytes()
        records.append({"ns": "u", "id": f"m{i}", "content": "é" * i, "embedding": emb, "tags": []})
    data, entries = encode_batch("k", "u", DIM, T0, records)
    for e, rec in zip(entries, records):
        assert e.vector_at > 8  # after the frame's length and CRC
        assert data[e.offset + e.vector_at : e.offset + e.vector_at + 4 * DIM] == rec["embedding"]


def test_archiving_writes_each_vectors_place_and_a_search_reads_no_record(archived, monkeypatch):
    store, vecs = archived
    _assert_places_hold(store, vecs)
    counter = DecodeCounter(monkeypatch)
    for mid, v in list(vecs.items())[:5]:
        store.engine.vector_cache.clear()
        hits = store.search("u", v, k=3, record_access=False, include_cold=True)
        assert hits[0].id == mid and hits[0].memory.tier == "cold"
    assert counter.n == 0  # every candidate's vector read alone


def test_a_local_search_reads_only_the_candidates_vector_bytes(tmp_path):
    """On a local directory each located vector is its own pread of 4 · dim
    bytes: nothing else of the records, nor of their neighbours, is read; and
    only the candidates the int8 codes keep are read (20 of the 25), and of
    those only the ones whose codes' bounds may reach the best 2."""

    class Counting(LocalObjectStore):
        ranges: list[tuple[int, int]] = []

        def read_ranges(self, key, ranges):  # type: ignore[override]
            Counting.ranges.extend(ranges)
            return super().read_ranges(key, ranges)

    rng = np.random.default_rng(5)
    clock = ManualClock(T0)
    vecs = [unit(rng.normal(size=DIM)) for _ in range(25)]
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, cold=Counting(tmp_path / "cold")) as store:
        _archive(store, clock, vecs)
        Counting.ranges.clear()
        store.search("u", vecs[3], k=2, record_access=False, include_cold=True)
    assert 2 <= len(Counting.ranges) < exact_count(2) == 20
    assert all(end - start == 4 * DIM for start, end in Counting.ranges)


def test_a_wrong_place_costs_a_whole_record_read_not_a_wrong_vector(archived, monkeypatch):
    store, vecs = archived
    ids = list(vecs)
    rid = {mid: store.engine.catalog.get_row("u", mid).rid for mid in ids}
    # one place points elsewhere in the frame, one has another CRC, one is not known
    store.engine.catalog.write(
        lambda c: c.execute("UPDATE cold_codes SET vector_at = vector_at + 4 WHERE rid = ?", (rid[ids[0]],))
    )
    store.engine.catalog.write(
        lambda c: c.execute(
            "UPDATE cold_codes SET vector_crc = (vector_crc + 1) % 4294967296 WHERE rid = ?", (rid[ids[1]],)
        )
    )
    store.engine.catalog.write(
        lambda c: c.execute("UPDATE cold_codes SET vector_at = NULL, vector_crc = NULL WHERE rid = ?", (rid[ids[2]],))
    )
    store.engine.cold_index.invalidate()
    counter = DecodeCounter(monkeypatch)
    # every candidate read exactly: none left out by its int8 code, nor by the bounds those put on its cosine
    monkeypatch.setattr(cold_index, "EXACT_MIN", 100)
    monkeypatch.setattr(RowRanker, "may_rank", lambda self, rows, low, high, **kw: np.ones(len(rows), np.bool_))
    for mid in ids[:3]:
        store.engine.vector_cache.clear()
        hits = store.search("u", vecs[mid], k=1, record_access=False, include_cold=True, explain=True)
        assert hits[0].id == mid and abs(hits[0].explain.raw["similarity"] - 1.0) < 1e-5
    assert store.cold_search_errors == 0
    # each search rescored all 30 (fewer than its candidate count): the three
    # without a good place were read as whole records, once per search
    assert counter.n == 3 * 3
    # verify() names the two wrong places (a missing one is not damage); repair() writes them again
    report = store.verify()
    wrong = {m for p in report.problems if p.kind == "cold_index" for m in p.memories}
    assert wrong == {f"u/{ids[0]}", f"u/{ids[1]}"}
    assert store.repair().ok
    assert store.verify().ok
    _assert_places_hold(store, vecs)


def test_places_that_are_not_numbers_or_out_of_range_are_not_known(archived):
    """Damage to the place columns themselves (SQLite stores any type) does
    not stop the namespace's codes loading: those memories' whole records
    are read, and verify() names them."""
    store, vecs = archived
    ids = list(vecs)
    rid = {mid: store.engine.catalog.get_row("u", mid).rid for mid in ids[:3]}
    for mid, at, crc in ((ids[0], "x", 1), (ids[1], 2**40, 1), (ids[2], 9, b"crc")):
        store.engine.catalog.write(
            lambda c, at=at, crc=crc, r=rid[mid]: c.execute(
                "UPDATE cold_codes SET vector_at = ?, vector_crc = ? WHERE rid = ?", (at, crc, r)
            )
        )
    store.engine.cold_index.invalidate()
    assert (store.engine.cold_index.vector_places("u", list(rid.values())) == -1).all()
    for mid in ids[:3]:
        store.engine.vector_cache.clear()
        hits = store.search("u", vecs[mid], k=1, record_access=False, include_cold=True, explain=True)
        assert hits[0].id == mid and abs(hits[0].explain.raw["similarity"] - 1.0) < 1e-5
    wrong = {m for p in store.verify().problems if p.kind == "cold_index" for m in p.memories}
    assert wrong == {f"u/{m}" for m in ids[:3]}
    assert store.repair().ok
    _assert_places_hold(store, vecs)


def test_damaged_vector_bytes_are_caught_by_the_whole_record_check(archived):
    store, vecs = archived
    mid = next(iter(vecs))
    key, off, at, _ = _places(store)[mid]
    path = store.path / "cold" / key
    data = bytearray(path.read_bytes())
    data[off + at + 5] ^= 0x40
    path.write_bytes(bytes(data))
    store.engine.cold.store.close_open_files()
    store.engine.vector_cache.clear()
    hits = store.search("u", vecs[mid], k=1, record_access=False, include_cold=True)
    assert mid not in [h.id for h in hits]  # its object's candidates are lost, the search is not
    assert store.cold_search_errors == 1
    row = store.engine.catalog.get_row("u", mid)
    locs = [Location(row.cold_key, row.cold_offset, row.cold_length)]
    places = store.engine.cold_index.vector_places("u", [row.rid])
    with pytest.raises(CorruptDataError, match="checksum"):
        fetch_vectors(store.engine.cold, locs, None, places=places)


def test_a_rewritten_object_keeps_its_places_true(archived):
    store, vecs = archived
    gone = next(iter(vecs))
    store.delete("u", gone)
    before = {mid: p[0] for mid, p in _places(store).items()}
    store.compact_cold()
    after = _places(store)
    assert all(after[mid][0] != before[mid] for mid in after)  # moved into a new object
    del vecs[gone]
    _assert_places_hold(store, vecs)
    assert store.verify().ok


def test_rebuild_catalog_restores_the_places(archived, tmp_path):
    store, vecs = archived
    store.close()
    fresh = TierStore.open(
        tmp_path / "rebuilt", dim=DIM, clock=ManualClock(T0 + 3 * HOUR), cold=store.path / "cold", take_over_cold=True
    )
    try:
        assert fresh.rebuild_catalog()["inserted"] == 30
        _assert_places_hold(fresh, vecs)
    finally:
        fresh.close()


def test_codes_written_before_the_places_get_them_from_sweeps(archived):
    """A store whose codes predate the places (meta said "complete") is
    backfilled by the next sweep, then says so."""
    store, vecs = archived
    store.engine.catalog.write(lambda c: c.execute("UPDATE cold_codes SET vector_at = NULL, vector_crc = NULL"))
    store.engine.catalog.set_meta({"cold_codes": "complete"})
    store.engine.cold_index.invalidate()
    assert store.verify().ok  # not known is not damage
    assert store.sweep().errors == []
    assert store.engine.catalog.get_meta("cold_codes") == CODES_COMPLETE
    _assert_places_hold(store, vecs)


def test_an_old_cold_codes_table_gets_the_columns_and_reads_meanwhile(tmp_path):
    """cold_codes as earlier code made it (no place columns): a read-only open
    searches it (no places known), the writable open adds the columns and
    the sweeps fill them."""
    rng = np.random.default_rng(3)
    clock = ManualClock(T0)
    path = tmp_path / "s"
    vecs = [unit(rng.normal(size=DIM)) for _ in range(12)]
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        ids = _archive(store, clock, vecs)
    conn = sqlite3.connect(path / "catalog.sqlite", isolation_level=None)
    conn.execute("PRAGMA legacy_alter_table = ON")  # the triggers name cold_codes while it is swapped
    conn.executescript("""
        BEGIN;
        CREATE TABLE old_codes (rid INTEGER PRIMARY KEY, ns TEXT NOT NULL, code BLOB NOT NULL);
        INSERT INTO old_codes SELECT rid, ns, code FROM cold_codes;
        DROP TABLE cold_codes;
        ALTER TABLE old_codes RENAME TO cold_codes;
        CREATE INDEX cold_codes_ns ON cold_codes (ns, rid);
        UPDATE meta SET value = 'complete' WHERE key = 'cold_codes';
        COMMIT;""")
    assert [r[1] for r in conn.execute("PRAGMA table_info(cold_codes)")] == ["rid", "ns", "code"]
    conn.close()
    with TierStore.open(path, readonly=True, clock=clock) as store:
        assert store.search("u", vecs[4], k=1, include_cold=True)[0].id == ids[4]
        assert store.verify().ok
    with TierStore.open(path, clock=clock) as store:
        assert store.sweep().errors == []
        _assert_places_hold(store, dict(zip(ids, vecs)))
        assert store.search("u", vecs[4], k=1, record_access=False, include_cold=True)[0].id == ids[4]


def test_bad_places_are_refused_and_change_nothing(tmp_path):
    conn = sqlite3.connect(":memory:")
    from tierstore.tiers.cold_index import COLD_CODES_SCHEMA

    conn.executescript(COLD_CODES_SCHEMA)
    code = bytes(8)
    for row in [
        (1, "u", code, -1, 5),
        (1, "u", code, 3, None),
        (1, "u", code, 3, 2**32),
        (1, "u", code, 1.5, 2),
        (1, "u", code, True, 2),
        (1, "u", code, 3),
    ]:
        with pytest.raises(InvalidInputError):
            insert_codes(conn, [(2, "u", code), row])
    assert conn.execute("SELECT count(*) FROM cold_codes").fetchone() == (0,)
    insert_codes(conn, [(2, "u", code), (3, "u", code, 20, 7)])
    assert conn.execute("SELECT rid, vector_at, vector_crc FROM cold_codes ORDER BY rid").fetchall() == [
        (2, None, None),
        (3, 20, 7),
    ]


def test_fetch_vectors_checks_the_shape_of_places(archived):
    store, vecs = archived
    row = store.engine.catalog.get_row("u", next(iter(vecs)))
    locs = [Location(row.cold_key, row.cold_offset, row.cold_length)]
    for bad in ([[1, 2, 3]], [[1, 2], [3, 4]], "xy", [[None, 1]]):
        with pytest.raises(InvalidInputError, match="places"):
            fetch_vectors(store.engine.cold, locs, None, places=bad)
    got = fetch_vectors(store.engine.cold, locs, None, places=[[-1, -1]])
    assert np.array_equal(got[0], vecs[row.id])


@pytest.mark.slow
def test_searches_racing_compaction_never_score_a_wrong_vector(tmp_path):
    """Compaction moves records into new objects and rewrites their places
    while searches read rows, places and vectors at different moments: a
    search may lose candidates to an object collected under it (counted as
    cold-search errors), but every similarity it reports is the exact cosine
    of that memory's own vector."""
    import threading

    rng = np.random.default_rng(9)
    clock = ManualClock(T0)
    n = 120
    vecs = [unit(rng.normal(size=DIM)) for _ in range(n)]
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        ids = []
        for start in range(0, n, 30):  # four archive objects
            ids += _archive(store, clock, vecs[start : start + 30], lambda i, start=start: f"m{start + i}")
        assert store.stats(lifecycle=False).by_tier["cold"] == n
        vec_of = dict(zip(ids, vecs))
        stop = threading.Event()
        failures: list[BaseException] = []

        def churn() -> None:
            try:
                for i in range(0, n, 3):
                    if stop.is_set():
                        return
                    store.delete("u", ids[i])
                    store.compact_cold()
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        worker = threading.Thread(target=churn)
        worker.start()
        checked = 0
        try:
            while worker.is_alive() or checked == 0:
                q = vecs[int(rng.integers(n))]
                store.engine.vector_cache.clear()
                for h in store.search("u", q, k=5, record_access=False, include_cold=True, explain=True):
                    assert abs(h.explain.raw["similarity"] - float(np.dot(q, vec_of[h.id]))) < 1e-5, h.id
                    checked += 1
        finally:
            stop.set()
            worker.join()
        assert not failures, failures
        assert checked > 0
        _assert_places_hold(store, {m: v for m, v in vec_of.items() if store.get("u", m) is not None})


def test_a_search_reads_again_where_a_compaction_under_it_moved_the_records(archived, monkeypatch):
    """The rows are read, then a compaction moves every record to a new
    object and collects the old one, then the vectors are fetched: the
    search reads the candidates again where the catalog now points, and
    reports no error."""
    from tierstore.core import row_ranker

    store, vecs = archived
    ids = list(vecs)
    old_key = store.engine.catalog.get_row("u", ids[1]).cold_key
    real = row_ranker.fetch_row_vectors
    calls = []

    def compact_first(index, cold, cache, ns, rows, errors):
        if not calls:
            store.delete("u", ids[0])  # marks the object for a rewrite
            assert store.compact_cold() == 1
        calls.append([r.cold_key for r in rows])
        return real(index, cold, cache, ns, rows, errors)

    monkeypatch.setattr(row_ranker, "fetch_row_vectors", compact_first)
    store.engine.vector_cache.clear()
    hits = store.search("u", vecs[ids[1]], k=3, record_access=False, include_cold=True, explain=True)
    assert hits[0].id == ids[1] and abs(hits[0].explain.raw["similarity"] - 1.0) < 1e-5
    assert len(hits) == 3 and store.cold_search_errors == 0
    assert len(calls) == 2 and set(calls[0]) == {old_key} and old_key not in calls[1]
    assert ids[0] not in [h.id for h in hits]  # deleted under the search: left out, not an error


def test_places_load_the_same_whether_every_value_is_an_int_or_some_are_damaged():
    # the loader reads a column of plain ints in one numpy conversion and anything else value by value;
    # both must give what the one-by-one rule gives (an int in range, else not known)
    def reference(rows):
        at = [v if type(v) is int and 0 <= v < 2**31 else -1 for _, _, v, _ in rows]
        crc = [v if type(v) is int and 0 <= v < 2**32 else -1 for _, _, _, v in rows]
        unknown = [a < 0 or c < 0 for a, c in zip(at, crc)]
        return [-1 if u else a for a, u in zip(at, unknown)], [0 if u else c for c, u in zip(crc, unknown)]

    rng = np.random.default_rng(5)
    clean = [
        (i, b"", int(a), int(c)) for i, (a, c) in enumerate(zip(rng.integers(0, 2**31, 50), rng.integers(0, 2**32, 50)))
    ]
    damaged_values = [None, -1, 2**31, 2**32, 2**70, -(2**70), 3.0, True, "7", b"7"]
    cases = [clean, clean[:0], [*clean[:5], (99, b"", 2**31 - 1, 2**32 - 1)]]
    for bad in damaged_values:
        cases.append([*clean[:5], (98, b"", bad, 5), *clean[5:9]])
        cases.append([*clean[:5], (98, b"", 5, bad), *clean[5:9]])
    for rows in cases:
        at, crc = cold_index._places_of(rows)
        assert at.dtype == np.int32 and crc.dtype == np.uint32
        want_at, want_crc = reference(rows)
        assert at.tolist() == want_at and crc.tolist() == want_crc

"""The cold search index (tierstore/tiers/cold_index.py) on real archive objects.

Archive objects are written by ``ColdTier.write_records`` into a
``LocalObjectStore`` under ``tmp_path``; the codes live in a SQLite file with
``COLD_CODES_SCHEMA``. The dimension (70) is not a multiple of 64, so codes
have a partly used second word.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierstore.errors import (
    CorruptDataError,
    DimensionMismatchError,
    InvalidInputError,
    InvalidNamespaceError,
    InvalidVectorError,
    ObjectNotFoundError,
)
from tierstore.kernels import sign_codes
from tierstore.storage.objectstore import LocalObjectStore
from tierstore.tiers.cold import ColdTier, Location
from tierstore.tiers.cold_index import (
    COLD_CODES_SCHEMA,
    MIN_CANDIDATES,
    OVERSAMPLE,
    ColdIndex,
    VectorCache,
    candidate_count,
    delete_codes,
    encode_codes,
    exact_rescore,
    fetch_vectors,
    first_stage_count,
    insert_codes,
)

DIM = 70
NOW = 1_700_000_000.0


def unit_rows(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def record(ns: str, mid: str, vec: np.ndarray) -> dict:
    """An archive record as ``cold.record_from_row`` makes it."""
    return dict(
        ns=ns,
        id=mid,
        content=f"memory {mid}",
        embedding=vec.astype("<f4").tobytes(),
        memory_type="fact",
        source="user_declaration",
        tags=["t"],
        created_at=NOW,
        last_accessed_at=NOW,
        access_count=0,
        conf_llm=None,
        conf_rule=0.8,
        conf_feedback=None,
        confidence=0.8,
        t_conf=NOW,
        ttl_seconds=None,
        pinned=False,
        w_ref=1.0,
        t_ref=NOW,
        half_life=86400.0,
        ttl=None,
        ttl_anchor=NOW,
        ctx_mult=1.0,
        archived_at=NOW,
    )


class CountingStore:
    """An object store that records every ranged GET; optionally makes the
    GETs meet at a barrier (so the test proves they run at the same time)."""

    def __init__(self, inner: LocalObjectStore, barrier: threading.Barrier | None = None) -> None:
        self.inner = inner
        self.barrier = barrier
        self.gets: list[tuple[str, int | None, int | None]] = []
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def get(self, key, start=None, end=None):
        with self._lock:
            self.gets.append((key, start, end))
            self.threads.add(threading.get_ident())
        if self.barrier is not None:
            self.barrier.wait()
        return self.inner.get(key, start, end)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Archive:
    """``n`` memories of one namespace in ``objects`` archive objects, their
    codes in a SQLite catalog; ``locations[rid]`` and ``vectors[rid]``."""

    def __init__(
        self,
        root: Path,
        rng: np.random.Generator,
        n: int = 60,
        objects: int = 3,
        ns: str = "alice",
        first_rid: int = 1,
        db: Path | None = None,
    ) -> None:
        self.objstore = LocalObjectStore(root / "cold")
        self.cold = ColdTier(self.objstore, DIM)
        self.db = db or root / "catalog.db"
        self.conn = sqlite3.connect(self.db)
        self.conn.executescript(COLD_CODES_SCHEMA)
        self.ns = ns
        self.vectors = unit_rows(rng, n)
        self.rids = list(range(first_rid, first_rid + n))
        self.locations: dict[int, Location] = {}
        per = -(-n // objects)
        for b in range(objects):
            part = self.rids[b * per : (b + 1) * per]
            key = ColdTier.new_key(ns, first_rid + b)
            recs = [record(ns, f"m{r}", self.vectors[r - first_rid]) for r in part]
            entries, _ = self.cold.write_records(key, ns, recs, NOW)
            for r, e in zip(part, entries):
                self.locations[r] = Location(key, e.offset, e.length)
        with self.conn:
            insert_codes(self.conn, list(zip(self.rids, [ns] * n, encode_codes(self.vectors))))
        self.queries = 0

    def query(self, sql, params):
        self.queries += 1
        conn = sqlite3.connect(self.db)  # one per call: callable from any thread
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def vector(self, rid: int) -> np.ndarray:
        return self.vectors[rid - self.rids[0]]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.fixture
def arc(tmp_path, rng) -> Archive:
    return Archive(tmp_path, rng)


# ---------------------------------------------------------------------------
# the two stages together


def test_two_stage_search_finds_the_exact_top_k_when_m_covers_every_memory(arc, rng):
    index = ColdIndex(arc.query, DIM)
    cache = VectorCache()
    for _ in range(5):
        q = rng.normal(size=DIM).astype(np.float32) * 3.0  # not unit length: the rescore normalises
        rids, hamming = index.candidates(arc.ns, q, m=len(arc.rids))
        assert sorted(rids.tolist()) == arc.rids and hamming.dtype == np.int32
        vecs = fetch_vectors(arc.cold, [arc.locations[int(r)] for r in rids], cache)
        assert np.array_equal(vecs, np.stack([arc.vector(int(r)) for r in rids]))  # bit-identical
        sims = exact_rescore(q, vecs)
        got = rids[np.argsort(-sims, kind="stable")[:5]]
        exact = arc.vectors @ (q / np.linalg.norm(q))
        want = np.array(arc.rids)[np.argsort(-exact, kind="stable")[:5]]
        assert got.tolist() == want.tolist()
        np.testing.assert_allclose(np.sort(sims)[::-1][:5], np.sort(exact)[::-1][:5], rtol=0, atol=1e-6)


def test_candidates_hamming_stage_alone_is_nearest_codes_with_ties_to_the_lower_rid(arc, rng):
    index = ColdIndex(arc.query, DIM)
    q = unit_rows(rng, 1)[0]
    rids, hamming = index.candidates(arc.ns, q, m=10, first_stage=10)
    codes = sign_codes(arc.vectors)
    qcode = sign_codes(q[None, :])[0]
    dist = np.bitwise_count(codes ^ qcode).sum(axis=1)
    order = sorted(range(len(arc.rids)), key=lambda i: (dist[i], arc.rids[i]))[:10]
    assert rids.tolist() == [arc.rids[i] for i in order]
    assert hamming.tolist() == [int(dist[i]) for i in order]
    # a memory's own vector is at distance 0 from itself
    rids, hamming = index.candidates(arc.ns, arc.vector(arc.rids[17]), m=1)
    assert rids.tolist() == [arc.rids[17]] and hamming.tolist() == [0]


def test_candidates_second_stage_ranks_by_the_query_against_the_signs(arc, rng):
    index = ColdIndex(arc.query, DIM)
    signs = np.where(arc.vectors > 0, 1.0, -1.0)
    codes = sign_codes(arc.vectors)
    for _ in range(5):
        q = unit_rows(rng, 1)[0]
        score = dict(zip(arc.rids, (signs @ q.astype(np.float64)).tolist()))
        for m in (12, 100):  # 60 rows < the first stage: all of them; m = 100: every row, in the same order
            rids, hamming = index.candidates(arc.ns, q, m=m)
            got = [score[r] for r in rids.tolist()]
            assert len(got) == min(m, 60)
            assert all(a >= b - 1e-5 for a, b in zip(got, got[1:]))  # best first
            assert min(got) >= sorted(score.values())[-len(got)] - 1e-5  # and the best ones
            qcode = sign_codes(q[None, :])[0]
            want = np.bitwise_count(codes ^ qcode).sum(axis=1)[rids - arc.rids[0]]
            assert hamming.tolist() == want.tolist()


def test_allowed_rids_restrict_the_candidates(arc, rng):
    index = ColdIndex(arc.query, DIM)
    allowed = arc.rids[::7] + [10_000]  # an unknown rid is ignored
    rids, _ = index.candidates(arc.ns, unit_rows(rng, 1)[0], m=100, allowed_rids=allowed)
    assert sorted(rids.tolist()) == arc.rids[::7]
    rids, _ = index.candidates(arc.ns, unit_rows(rng, 1)[0], m=3, allowed_rids=np.array([], np.int64))
    assert rids.tolist() == []


def test_namespaces_are_separate_and_m_beyond_n_returns_everything(tmp_path, rng):
    a = Archive(tmp_path, rng, n=20, ns="alice")
    b = Archive(tmp_path, rng, n=5, ns="bob", first_rid=100, db=a.db)
    index = ColdIndex(a.query, DIM)
    q = unit_rows(rng, 1)[0]
    assert sorted(index.candidates("bob", q, m=50)[0].tolist()) == b.rids
    assert sorted(index.candidates("alice", q, m=50)[0].tolist()) == a.rids
    assert index.candidates("nobody", q, m=5)[0].tolist() == []
    assert index.count("alice") == 20 and index.count("bob") == 5 and index.count("nobody") == 0


# ---------------------------------------------------------------------------
# loading and invalidation


def test_codes_load_once_and_reload_after_invalidation(arc, rng):
    index = ColdIndex(arc.query, DIM)
    q = unit_rows(rng, 1)[0]
    index.candidates(arc.ns, q, m=5)
    index.candidates(arc.ns, q, m=5)
    assert arc.queries == 1
    new_vec = unit_rows(rng, 1)
    with arc.conn:
        insert_codes(arc.conn, [(500, arc.ns, encode_codes(new_vec)[0])])
    assert 500 not in index.candidates(arc.ns, new_vec[0], m=100)[0].tolist()  # the cached codes
    index.invalidate("someone-else")
    assert arc.queries == 1 and 500 not in index.candidates(arc.ns, new_vec[0], m=100)[0].tolist()
    index.invalidate(arc.ns)
    rids, hamming = index.candidates(arc.ns, new_vec[0], m=1)
    assert arc.queries == 2 and rids.tolist() == [500] and hamming.tolist() == [0]
    with arc.conn:
        delete_codes(arc.conn, [500, arc.rids[0]])
    index.invalidate()  # every namespace
    rids, _ = index.candidates(arc.ns, new_vec[0], m=100)
    assert arc.queries == 3 and 500 not in rids.tolist() and arc.rids[0] not in rids.tolist()
    assert len(rids) == len(arc.rids) - 1


def test_a_load_overlapping_an_invalidation_is_not_kept(arc, rng):
    """The catalog read may predate the commit the invalidation announces:
    the result serves the search that loaded it, and is not cached."""
    index = ColdIndex(lambda sql, p: (arc.query(sql, p), index.invalidate(arc.ns))[0], DIM)
    q = unit_rows(rng, 1)[0]
    index.candidates(arc.ns, q, m=5)
    index.candidates(arc.ns, q, m=5)
    assert arc.queries == 2 and index.nbytes == 0


def test_loaded_codes_are_bounded_in_bytes(tmp_path, rng):
    a = Archive(tmp_path, rng, n=20, ns="alice")
    Archive(tmp_path, rng, n=20, ns="bob", first_rid=100, db=a.db)
    one = 20 * (8 + 16 + 8)  # per row: rid int64, two uint64 code words, vector_at int32 + vector_crc uint32
    index = ColdIndex(a.query, DIM, max_bytes=one + one // 2)
    q = unit_rows(rng, 1)[0]
    index.candidates("alice", q, m=1)
    assert index.nbytes == one
    index.candidates("bob", q, m=1)  # evicts alice
    assert index.nbytes == one and a.queries == 2
    index.candidates("bob", q, m=1)
    index.candidates("alice", q, m=1)
    assert a.queries == 3 and index.nbytes == one


def test_concurrent_searches_and_invalidations(arc, rng):
    index = ColdIndex(arc.query, DIM)
    queries = unit_rows(rng, 8)
    want = {i: index.candidates(arc.ns, queries[i], m=7) for i in range(8)}
    errors: list[BaseException] = []

    def search(i: int) -> None:
        try:
            for _ in range(40):
                rids, dist = index.candidates(arc.ns, queries[i], m=7)
                assert rids.tolist() == want[i][0].tolist() and dist.tolist() == want[i][1].tolist()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def churn() -> None:
        for _ in range(40):
            index.invalidate(arc.ns)

    threads = [threading.Thread(target=search, args=(i,)) for i in range(8)] + [threading.Thread(target=churn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_code_of_the_wrong_size_is_corrupt_data(arc, rng):
    with arc.conn:
        arc.conn.execute("UPDATE cold_codes SET code = ? WHERE rid = ?", (b"\0" * 8, arc.rids[3]))
    with pytest.raises(CorruptDataError, match=f"cold_codes row {arc.rids[3]}"):
        ColdIndex(arc.query, DIM).candidates(arc.ns, unit_rows(rng, 1)[0], m=5)


def test_bad_input_raises_clear_errors(arc, rng):
    index = ColdIndex(arc.query, DIM)
    q = unit_rows(rng, 1)[0]
    with pytest.raises(DimensionMismatchError):
        index.candidates(arc.ns, q[:10], m=5)
    with pytest.raises(InvalidVectorError):
        index.candidates(arc.ns, np.full(DIM, np.nan, np.float32), m=5)
    with pytest.raises(InvalidVectorError):
        index.candidates(arc.ns, np.zeros(DIM, np.float32), m=5)
    for m in (-1, 2.5, True, "3"):
        with pytest.raises(InvalidInputError, match="m must be"):
            index.candidates(arc.ns, q, m=m)
    with pytest.raises(InvalidInputError, match="first_stage must be"):
        index.candidates(arc.ns, q, m=5, first_stage=-1)
    with pytest.raises(InvalidNamespaceError):
        index.candidates("../etc", q, m=5)
    with pytest.raises(InvalidInputError, match="allowed_rids"):
        index.candidates(arc.ns, q, m=5, allowed_rids=["x"])
    with pytest.raises(InvalidInputError):
        ColdIndex(arc.query, 0)
    assert arc.queries == 0  # nothing was loaded for a refused call


# ---------------------------------------------------------------------------
# catalog helpers


def test_encode_codes_is_the_little_endian_sign_code(rng):
    X = unit_rows(rng, 4)
    blobs = encode_codes(X)
    assert all(len(b) == 16 for b in blobs)
    assert np.array_equal(np.frombuffer(b"".join(blobs), "<u8").reshape(4, 2), sign_codes(X))
    assert len(encode_codes(np.ones((1, 384), np.float32))[0]) == 48
    with pytest.raises(InvalidVectorError, match=r"vectors\[1\]"):
        encode_codes(np.array([[1.0, 2.0], [np.inf, 0.0]], np.float32))
    with pytest.raises(InvalidInputError):
        encode_codes(np.ones(5, np.float32))
    with pytest.raises(InvalidVectorError):
        encode_codes([["a"]])


def test_insert_codes_checks_every_row_before_writing(tmp_path):
    conn = sqlite3.connect(tmp_path / "c.db")
    conn.executescript(COLD_CODES_SCHEMA)
    good = (1, "alice", b"\0" * 16)
    for bad in [
        (2, "alice", b"\0" * 7),
        (2, "al/ice", b"\0" * 8),
        (True, "alice", b"\0" * 8),
        (2, "alice", "text"),
        (2, "alice"),
    ]:
        with pytest.raises(InvalidInputError):
            with conn:
                insert_codes(conn, [good, bad])
        assert conn.execute("SELECT count(*) FROM cold_codes").fetchone() == (0,)
    with conn:
        insert_codes(conn, [good])
        insert_codes(conn, [(1, "alice", b"\1" * 16)])  # a retried archive replaces
    assert conn.execute("SELECT rid, ns, code FROM cold_codes").fetchall() == [(1, "alice", b"\1" * 16)]
    with pytest.raises(InvalidInputError):
        delete_codes(conn, ["1"])
    with conn:
        delete_codes(conn, [1, 2])
    assert conn.execute("SELECT count(*) FROM cold_codes").fetchone() == (0,)


def test_candidate_count():
    assert candidate_count(1) == MIN_CANDIDATES
    assert candidate_count(1000) == OVERSAMPLE * 1000
    assert all(candidate_count(k) >= k for k in range(1, 200))
    assert first_stage_count(candidate_count(10)) == 1000 and first_stage_count(400) == 4000
    for bad in (0, -3, 1.5, True):
        with pytest.raises(InvalidInputError):
            candidate_count(bad)


# ---------------------------------------------------------------------------
# vector cache


def test_vector_cache_is_bounded_in_bytes_and_least_recently_used_first_out():
    v = np.arange(DIM, dtype=np.float32)
    cache = VectorCache(max_bytes=3 * v.nbytes)
    for i in range(3):
        cache.put("k", i, v + i)
    assert cache.get("k", 0) is not None  # now the most recently used
    cache.put("k", 3, v + 3)
    assert len(cache) == 3 and cache.nbytes == 3 * v.nbytes <= cache.max_bytes
    assert cache.get("k", 1) is None  # the least recently used went
    assert np.array_equal(cache.get("k", 0), v) and np.array_equal(cache.get("k", 3), v + 3)
    cache.put("k", 3, v + 30)  # replacing does not count twice
    assert cache.nbytes == 3 * v.nbytes and np.array_equal(cache.get("k", 3), v + 30)
    cache.put("big", 0, np.zeros(1000, np.float32))  # larger than the whole cache: not kept
    assert cache.get("big", 0) is None and len(cache) == 3
    src = v.copy()
    cache.put("k", 9, src)
    src[0] = 99.0  # the cache holds its own copy ...
    got = cache.get("k", 9)
    assert got[0] == 0.0
    with pytest.raises(ValueError):
        got[0] = 1.0  # ... read-only
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0
    with pytest.raises(InvalidInputError):
        VectorCache(max_bytes=-1)


# ---------------------------------------------------------------------------
# fetching from the archive


def test_fetch_groups_ranged_gets_per_object_and_runs_them_concurrently(arc):
    counting = CountingStore(arc.objstore, threading.Barrier(3, timeout=60))
    cold = ColdTier(counting, DIM)
    rids = arc.rids[::2]  # every object, a gap between neighbours: still one GET each
    locs = [arc.locations[r] for r in rids]
    got = fetch_vectors(cold, locs, VectorCache(), max_workers=8)
    assert np.array_equal(got, np.stack([arc.vector(r) for r in rids]))
    keys = [k for k, _, _ in counting.gets]
    assert sorted(keys) == sorted({loc.key for loc in locs}) and len(keys) == 3
    assert len(counting.threads) == 3  # the three GETs met at the barrier: they ran at once


def test_fetch_reads_a_local_store_on_the_calling_thread_unless_told(arc):
    # LocalObjectStore.serial_reads: a pread takes µs, threads would only add overhead
    counting = CountingStore(arc.objstore)
    cold = ColdTier(counting, DIM)
    locs = [arc.locations[r] for r in arc.rids[::2]]
    got = fetch_vectors(cold, locs, VectorCache())
    assert np.array_equal(got, np.stack([arc.vector(r) for r in arc.rids[::2]]))
    assert counting.threads == {threading.get_ident()} and len({k for k, _, _ in counting.gets}) == 3

    class Remote(CountingStore):  # a store that does not say it reads serially: threads by default
        serial_reads = False

    remote = Remote(arc.objstore, threading.Barrier(3, timeout=60))
    got = fetch_vectors(ColdTier(remote, DIM), locs, VectorCache())
    assert np.array_equal(got, np.stack([arc.vector(r) for r in arc.rids[::2]]))
    assert len(remote.threads) == 3 and threading.get_ident() not in remote.threads


def test_fetches_share_one_pool_of_threads_and_keep_each_fetch_within_its_workers(arc):
    """Every fetch runs on the process's pool (no threads started per search: the second fetch reads on
    threads the first one started), and one fetch never has more objects in flight than its
    max_workers, whatever the pool's size."""
    from tierstore.tiers.cold_index import fetch_pool

    class Remote(CountingStore):
        serial_reads = False

    locs = [arc.locations[r] for r in arc.rids[::2]]  # three objects
    first = Remote(arc.objstore, threading.Barrier(3, timeout=60))
    fetch_vectors(ColdTier(first, DIM), locs, VectorCache())
    pool_threads = {t.ident for t in threading.enumerate() if t.name.startswith("tierstore-cold-fetch")}
    assert first.threads <= pool_threads
    # A worker marks itself idle just after its result is set: wait until all three have, or the next
    # fetch may start a thread of its own in that moment (ThreadPoolExecutor's accounting, not ours).
    idle = getattr(fetch_pool(), "_idle_semaphore", None)
    deadline = time.monotonic() + 30
    while idle is not None and getattr(idle, "_value", 3) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    second = Remote(arc.objstore, threading.Barrier(3, timeout=60))
    got = fetch_vectors(ColdTier(second, DIM), locs, VectorCache())
    assert np.array_equal(got, np.stack([arc.vector(r) for r in arc.rids[::2]]))
    assert second.threads <= pool_threads  # no new thread
    assert fetch_pool() is fetch_pool()

    in_flight, most = [0], [0]
    lock = threading.Lock()
    two = threading.Event()  # two gets in flight at once: what max_workers=2 allows

    class Slow(Remote):
        def get(self, key, start=None, end=None):
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
                if in_flight[0] == 2:
                    two.set()
            try:
                two.wait(10)  # the first get waits for a second (a fetch one at a time: 10 s, then most is 1)
                return super().get(key, start, end)
            finally:
                with lock:
                    in_flight[0] -= 1

    got = fetch_vectors(ColdTier(Slow(arc.objstore), DIM), locs, VectorCache(), max_workers=2)
    assert np.array_equal(got, np.stack([arc.vector(r) for r in arc.rids[::2]]))
    assert most[0] == 2  # three objects, two at a time


def test_fetch_serves_cache_hits_without_a_get(arc):
    counting = CountingStore(arc.objstore)
    cold = ColdTier(counting, DIM)
    cache = VectorCache()
    first = [arc.locations[r] for r in arc.rids[:10]]
    fetch_vectors(cold, first, cache)
    assert len(counting.gets) == 1  # ten neighbours of one object: one GET
    counting.gets.clear()
    again = fetch_vectors(cold, first[::-1], cache)
    assert counting.gets == [] and np.array_equal(again, np.stack([arc.vector(r) for r in arc.rids[:10]][::-1]))
    mixed = [arc.locations[r] for r in (arc.rids[0], arc.rids[-1], arc.rids[1])]
    got = fetch_vectors(cold, mixed, cache)
    assert [k for k, _, _ in counting.gets] == [arc.locations[arc.rids[-1]].key]
    assert np.array_equal(got, np.stack([arc.vector(r) for r in (arc.rids[0], arc.rids[-1], arc.rids[1])]))
    assert fetch_vectors(cold, [], cache).shape == (0, DIM)


def test_a_missing_object_raises_object_not_found(arc):
    locs = [arc.locations[r] for r in arc.rids]
    gone = locs[-1].key
    arc.objstore.delete(gone)
    for workers in (1, 8):
        with pytest.raises(ObjectNotFoundError, match=gone):
            fetch_vectors(arc.cold, locs, VectorCache(), max_workers=workers)


def test_corrupt_archive_bytes_raise_corrupt_data(arc, tmp_path):
    loc = arc.locations[arc.rids[5]]
    path = tmp_path / "cold" / loc.key
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.length // 2] ^= 0x20  # inside the record's payload: fails its CRC32
    path.write_bytes(bytes(data))
    cache = VectorCache()
    with pytest.raises(CorruptDataError, match="checksum"):
        fetch_vectors(arc.cold, [arc.locations[r] for r in arc.rids], cache)
    with pytest.raises(CorruptDataError):
        fetch_vectors(arc.cold, [loc], cache)
    assert cache.get(loc.key, loc.offset) is None
    # a record whose embedding has another dimension is refused too
    with pytest.raises(CorruptDataError, match="embedding"):
        fetch_vectors(ColdTier(arc.objstore, DIM + 1), [arc.locations[arc.rids[0]]])


def test_fetch_with_an_errors_list_serves_the_readable_objects_whatever_the_workers(arc, tmp_path):
    # three objects: one deleted, one with a damaged record, one whole; and a
    # location of the whole object that the catalog says holds another memory
    by_key: dict[str, list[int]] = {}
    for r in arc.rids:
        by_key.setdefault(arc.locations[r].key, []).append(r)
    gone, damaged, whole = sorted(by_key, key=lambda k: by_key[k][0])
    rids = arc.rids[::3]
    bad = arc.locations[[r for r in by_key[damaged] if r in rids][2]]
    path = tmp_path / "cold" / damaged
    data = bytearray(path.read_bytes())
    data[bad.offset + bad.length // 2] ^= 0x20
    path.write_bytes(bytes(data))
    arc.objstore.delete(gone)
    locs = [arc.locations[r] for r in rids]
    for workers in (1, 8):
        cache = VectorCache()
        errors: list[BaseException] = []
        got = fetch_vectors(arc.cold, locs, cache, max_workers=workers, ids=[f"m{r}" for r in rids], errors=errors)
        for i, r in enumerate(rids):
            key = arc.locations[r].key
            if key == whole:
                assert np.array_equal(got[i], arc.vector(r))
                assert np.array_equal(cache.get(key, arc.locations[r].offset), arc.vector(r))
            else:  # the whole object's rows only: a damaged record costs its object's candidates
                assert np.isnan(got[i]).all() and cache.get(key, arc.locations[r].offset) is None
        assert sorted(type(e).__name__ for e in errors) == ["CorruptDataError", "ObjectNotFoundError"]
        # a record of another memory where the catalog points: that object's rows are NaN too
        errors = []
        ids = [f"m{r}" for r in rids]
        first_whole = next(i for i, r in enumerate(rids) if arc.locations[r].key == whole)
        ids[first_whole] = "someone-else"
        got = fetch_vectors(arc.cold, locs, VectorCache(), max_workers=workers, ids=ids, errors=errors)
        assert all(np.isnan(got[i]).all() for i, r in enumerate(rids) if arc.locations[r].key == whole)
        assert any("someone-else" in str(e) for e in errors) and len(errors) == 3


def test_fetch_refuses_bad_arguments(arc):
    with pytest.raises(InvalidInputError, match="max_workers"):
        fetch_vectors(arc.cold, [], max_workers=0)
    with pytest.raises(InvalidInputError, match="Location"):
        fetch_vectors(arc.cold, [("key", 0, 10)])


def test_exact_rescore_is_the_cosine(rng):
    X = unit_rows(rng, 6)
    q = rng.normal(size=DIM).astype(np.float32)
    sims = exact_rescore(q, X)
    assert sims.dtype == np.float32
    np.testing.assert_allclose(sims, X @ (q / np.linalg.norm(q)), rtol=0, atol=1e-6)
    assert exact_rescore(q, np.zeros((0, DIM), np.float32)).shape == (0,)
    with pytest.raises(DimensionMismatchError):
        exact_rescore(q[:5], X)
    with pytest.raises(InvalidVectorError):
        exact_rescore(np.zeros(DIM, np.float32), X)
    with pytest.raises(InvalidInputError):
        exact_rescore(q, X[0])


# ---------------------------------------------------------------------------
# merging a night's archived codes into a loaded namespace


def _reference_merge(entry, new):
    """The merge written out: every row by rid, a new row replacing an old one (the last of a rid wins)."""
    rows = {int(r): (c.tobytes(), int(a), int(v)) for r, c, a, v in zip(*(getattr(entry, f) for f in _FIELDS))}
    rows.update({int(r): (c.tobytes(), int(a), int(v)) for r, c, a, v in zip(*(getattr(new, f) for f in _FIELDS))})
    return sorted(rows.items())


_FIELDS = ("rids", "codes", "vector_at", "vector_crc")


def _codes(rids, seed, words=2):
    from tierstore.tiers.cold_index import _Codes

    rng = np.random.default_rng(seed)
    n = len(rids)
    return _Codes(
        np.asarray(rids, np.int64),
        rng.integers(0, 2**63, (n, words), dtype=np.uint64),
        rng.integers(-1, 1000, n).astype(np.int32),
        rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32),
    )


@settings(max_examples=150, deadline=None)
@given(
    old=st.sets(st.integers(1, 400), max_size=60),
    new=st.lists(st.integers(1, 420), min_size=1, max_size=120),  # beyond 64 new rows: merged by a sort
    seed=st.integers(0, 2**32 - 1),
)
def test_merged_codes_match_a_merge_by_rid(old, new, seed):
    from tierstore.tiers.cold_index import merged_codes

    entry = _codes(sorted(old), seed)
    before = [getattr(entry, f).copy() for f in _FIELDS]
    added = _codes(new, seed + 1)  # any order, a rid may repeat
    out = merged_codes(entry, added)
    got = [
        (int(r), (c.tobytes(), int(a), int(v)))
        for r, c, a, v in zip(out.rids, out.codes, out.vector_at, out.vector_crc)
    ]
    assert got == _reference_merge(entry, added)
    assert out.codes.dtype == np.uint64 and out.vector_at.dtype == np.int32 and out.vector_crc.dtype == np.uint32
    # the loaded entry, which scans may be reading, is left as it was
    assert all(np.array_equal(getattr(entry, f), b) for f, b in zip(_FIELDS, before))

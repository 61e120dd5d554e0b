"""tierstore.cluster's parts without Ray: slots and rendezvous placement, the
lease (conditional puts), the slot log (create-only appends, fencing, replay)
and the record format — against moto's server over real HTTP."""

from __future__ import annotations

import collections
import dataclasses
import threading
import time

import numpy as np
import pytest

pytest.importorskip("boto3")

from tierstore.cluster.bucket import Bucket, BucketConfig
from tierstore.cluster.errors import FencedError
from tierstore.cluster.lease import read_lease, release_lease, take_lease
from tierstore.cluster.records import pack, unpack
from tierstore.cluster.slotlog import LogConflictError, SlotLog
from tierstore.cluster.slots import check_slots, placement, rendezvous, slot_of
from tierstore.errors import CorruptDataError, InvalidInputError


@pytest.fixture
def bucket(moto_server, s3_bucket) -> Bucket:
    return BucketConfig(s3_bucket, "c1", {"endpoint_url": moto_server.endpoint_url, "region_name": "us-east-1"}).open()


# ------------------------------------------------------------------ slots


def test_slot_of_is_stable_and_spread() -> None:
    assert slot_of("alice", 64) == slot_of("alice", 64)  # not Python's salted hash()
    counts = collections.Counter(slot_of(f"user-{i}", 64) for i in range(6400))
    assert len(counts) == 64 and max(counts.values()) < 2 * 100  # ~100 each


def test_rendezvous_moves_only_the_new_shards_slots() -> None:
    before = placement(64, ["a", "b", "c"])
    after = placement(64, ["a", "b", "c", "d"])
    moved = {s for s in range(64) if before[s] != after[s]}
    assert moved and all(after[s] == "d" for s in moved)
    assert 6 <= len(moved) <= 28  # about a quarter


def test_rendezvous_on_removal_moves_only_the_removed_shards_slots() -> None:
    before = placement(64, ["a", "b", "c", "d"])
    after = placement(64, ["a", "b", "d"])
    for s in range(64):
        if before[s] != "c":
            assert after[s] == before[s]
        else:
            assert after[s] in ("a", "b", "d")
    assert placement(64, ["d", "a", "b"]) == after  # order of the shard list does not matter


def test_placement_rejects_bad_input() -> None:
    with pytest.raises(InvalidInputError):
        rendezvous(3, [])
    for bad in (0, -1, 1.5, True, 70000):
        with pytest.raises(InvalidInputError):
            check_slots(bad)


# ------------------------------------------------------------------ records


def test_records_round_trip_arrays_exactly() -> None:
    v = np.random.default_rng(1).standard_normal(17).astype(np.float32)
    doc = unpack(pack({"v": v, "t": (1, 2), "s": "x", "b": b"\x00"}))
    assert doc["v"].dtype == np.float32 and np.array_equal(doc["v"], v)
    assert doc["t"] == [1, 2] and doc["b"] == b"\x00"
    with pytest.raises(CorruptDataError):
        unpack(b"\xc1garbage")
    with pytest.raises(TypeError):
        pack({"x": object()})
    with pytest.raises(TypeError):  # its bytes would be pointers
        pack(np.array([1, "a"], dtype=object))


# ------------------------------------------------------------------ lease


@pytest.mark.slow
def test_lease_create_then_cas_bumps_the_epoch(bucket: Bucket) -> None:
    assert read_lease(bucket, 5) is None
    first = take_lease(bucket, 5, "shard-a")
    assert (first.owner, first.epoch) == ("shard-a", 1)
    second = take_lease(bucket, 5, "shard-b")
    assert (second.owner, second.epoch) == ("shard-b", 2)
    assert read_lease(bucket, 5).nonce == second.nonce
    # the first owner's stale ETag: its release is refused and changes nothing (412)
    assert release_lease(bucket, first) is False
    assert read_lease(bucket, 5).owner == "shard-b"
    assert release_lease(bucket, second) is True
    released = read_lease(bucket, 5)
    assert released.owner == "" and released.epoch == 2
    assert take_lease(bucket, 5, "shard-c").epoch == 3


def test_conditional_puts_answer_412(bucket: Bucket) -> None:
    etag = bucket.put_new("k", b"1")
    assert etag is not None
    assert bucket.put_new("k", b"2") is None  # If-None-Match: *
    assert bucket.put_cas("k", b"3", '"0000"') is None  # If-Match with a wrong ETag
    assert bucket.get("k")[0] == b"1"
    assert bucket.put_cas("k", b"4", etag) is not None
    assert bucket.get("k")[0] == b"4"


def _overlapping_gets(bucket: Bucket, parties: int) -> list[str]:
    """Make the bucket's first ``parties`` GETs wait for each other (a barrier):
    reads that were not in flight at once fail with BrokenBarrierError instead of
    passing. Returns the keys read, in the order the GETs were made."""
    barrier = threading.Barrier(parties, timeout=20)
    plain, made = bucket.get, []
    lock = threading.Lock()

    def get(key: str):
        with lock:
            made.append(key)
            first = len(made) <= parties
        if first:
            barrier.wait()
        return plain(key)

    bucket.get = get  # type: ignore[method-assign]
    return made


def test_get_many_reads_ahead_and_answers_in_order(bucket: Bucket) -> None:
    keys = [f"many/{i:02d}" for i in range(12)]
    for i, key in enumerate(keys):
        if i != 5:
            bucket.put(key, f"body {i}".encode())
    made = _overlapping_gets(bucket, 4)  # four requests in flight at once, or the barrier breaks
    got = list(bucket.get_many(keys, ahead=4))
    assert [g[0] if g else None for g in got] == [f"body {i}".encode() if i != 5 else None for i in range(12)]
    assert sorted(made) == keys  # each read once


def test_get_many_closed_early_starts_no_more_reads(bucket: Bucket) -> None:
    keys = [f"early/{i:02d}" for i in range(20)]
    for key in keys:
        bucket.put(key, b"x")
    before = bucket.counters()["gets"]
    reads = bucket.get_many(keys, ahead=2)
    assert next(reads) is not None
    reads.close()  # e.g. a snapshot's blob was missing: the take moves on to an older snapshot
    time.sleep(0.2)  # a read already running may finish; none may start
    assert bucket.counters()["gets"] - before <= 3  # two ahead, one started on taking the first answer
    with pytest.raises(StopIteration):
        next(reads)


# ------------------------------------------------------------------ log


def test_log_appends_replay_in_order(bucket: Bucket) -> None:
    log = SlotLog(bucket, 7)
    for seq in range(5):
        log.append(seq, kind="ops", epoch=1, owner="a", t=100.0 + seq, ops=[{"rid": f"r{seq}", "op": "add"}])
    records = list(log.replay_from(0))
    assert [r.seq for r in records] == [0, 1, 2, 3, 4]
    assert [r.ops[0]["rid"] for r in records] == ["r0", "r1", "r2", "r3", "r4"]
    assert [r.seq for r in log.replay_from(3)] == [3, 4]
    assert list(SlotLog(bucket, 8).replay_from(0)) == []  # another slot's log is its own


def test_log_replay_reads_records_ahead(bucket: Bucket) -> None:
    """A take replays up to a snapshot's worth of records: their GETs overlap
    (on S3 each is a round trip), and the records still come in order."""
    log = SlotLog(bucket, 9)
    for seq in range(30):
        log.append(seq, kind="ops", epoch=1, owner="a", t=float(seq), ops=[{"rid": f"r{seq}"}])
    made = _overlapping_gets(bucket, 4)
    assert [r.ops[0]["rid"] for r in log.replay_from(0)] == [f"r{i}" for i in range(30)]
    assert len(made) >= 30  # each record read (and the probe for one past the end)


def test_log_replay_refuses_a_gap(bucket: Bucket) -> None:
    """Appends are contiguous: a missing number with records after it is
    collected history, and replaying past it (or fencing at it) would lose
    writes, so the replay raises instead of stopping there."""
    log = SlotLog(bucket, 1)
    log.append(0, kind="ops", epoch=1, owner="a", t=1.0, ops=[])
    log.append(2, kind="ops", epoch=1, owner="a", t=1.0, ops=[])
    with pytest.raises(CorruptDataError):
        list(log.replay_from(0))
    assert [r.seq for r in log.replay_from(2)] == [2]  # from a number at or above the gap, it replays
    assert list(log.replay_from(3)) == []  # the end


def test_zombie_append_after_fence_is_rejected(bucket: Bucket) -> None:
    log = SlotLog(bucket, 2)
    log.append(0, kind="ops", epoch=1, owner="old", t=1.0, ops=[])
    # the new owner replayed to seq 0 and fenced at 1
    log.append(1, kind="fence", epoch=2, owner="new", t=2.0, ops=[])
    with pytest.raises(FencedError) as info:
        log.append(1, kind="ops", epoch=1, owner="old", t=3.0, ops=[{"rid": "z"}])
    assert info.value.slot == 2
    assert [r.kind for r in log.replay_from(0)] == ["ops", "fence"]  # nothing of the zombie's landed


def test_fence_losing_the_race_sees_the_old_owners_record(bucket: Bucket) -> None:
    log = SlotLog(bucket, 3)
    log.append(0, kind="ops", epoch=1, owner="old", t=1.0, ops=[{"rid": "late"}])
    with pytest.raises(LogConflictError) as info:
        log.append(0, kind="fence", epoch=2, owner="new", t=2.0, ops=[])
    assert info.value.record.ops == [{"rid": "late"}] and info.value.record.epoch == 1


# ------------------------------------------------------------------ shards (without Ray)

from tierstore.cluster.errors import NotOwnerError  # noqa: E402
from tierstore.cluster.shard import Shard  # noqa: E402
from tierstore.cluster.stats import sum_stats  # noqa: E402
from tierstore.errors import MemoryNotFoundError  # noqa: E402

DIM = 8


def _shard(bucket: Bucket, name: str, tmp_path, snapshot_every: int = 0, keep_history: bool = False) -> Shard:
    return Shard(
        name,
        bucket.config,
        dim=DIM,
        num_slots=4,
        root=str(tmp_path / "shards"),
        snapshot_every=snapshot_every,
        keep_history=keep_history,
    )


def _vec(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(DIM).astype(np.float32)


@pytest.mark.slow
def test_takeover_replays_the_same_state_and_fences_the_old_owner(bucket: Bucket, tmp_path) -> None:
    rng = np.random.default_rng(7)
    a = _shard(bucket, "a", tmp_path)
    assert a.acquire([0]) == {0: 1}
    ids = [a.write(0, f"r{i}", "add", "ns1", [f"memory {i}", _vec(rng)], {"memory_type": "fact"}) for i in range(12)]
    a.write(0, "fb", "feedback", "ns1", [ids[3]], {"positive": True})
    a.write(0, "del", "delete", "ns1", [ids[5]], {})
    with pytest.raises(MemoryNotFoundError):  # bad input: an error, nothing logged
        a.write(0, "bad", "pin", "ns1", ["nope"], {})
    q = _vec(rng)
    # ids in rank order (scores move a little with the wall clock between the two searches)
    before = [h.memory.id for h in a.read(0, "search", "ns1", [q], {"k": 5, "record_access": False})]
    state_a = a.read(0, "memories", "ns1", [], {"with_embedding": True})
    # a retried write returns its first answer and adds nothing
    assert a.write(0, "r2", "add", "ns1", ["memory 2", _vec(rng)], {}) == ids[2]
    b = _shard(bucket, "b", tmp_path)
    assert b.acquire([0]) == {0: 2}
    after = [h.memory.id for h in b.read(0, "search", "ns1", [q], {"k": 5, "record_access": False})]
    assert after == before
    state_b = b.read(0, "memories", "ns1", [], {"with_embedding": True})
    assert [m.id for m in state_b] == [m.id for m in state_a]
    for ma, mb in zip(state_a, state_b):  # the same memories, times, weights, confidences, vectors
        # confidence and weight are decayed to the time of reading: equal up to the seconds between the reads
        fields = [f.name for f in dataclasses.fields(ma) if f.name not in ("embedding", "confidence", "weight")]
        assert {f: getattr(ma, f) for f in fields} == {f: getattr(mb, f) for f in fields}
        assert mb.confidence == pytest.approx(ma.confidence, rel=1e-5)
        assert mb.weight == pytest.approx(ma.weight, rel=1e-5)
        assert np.array_equal(ma.embedding, mb.embedding)
    assert b.read(0, "get", "ns1", [ids[5]], {}) is None
    assert len(b.read(0, "memories", "ns1", [], {})) == 11
    assert b.write(0, "r2", "add", "ns1", ["memory 2", _vec(rng)], {}) == ids[2]  # the answer survived failover
    # the old owner, still running, is fenced at its next write and stops serving the slot
    with pytest.raises(FencedError):
        a.write(0, "z1", "add", "ns1", ["zombie", _vec(rng)], {})
    with pytest.raises(NotOwnerError):
        a.read(0, "get", "ns1", [ids[0]], {})
    assert 0 in a.lost and a.owned() == []
    assert all(m.content != "zombie" for m in b.read(0, "memories", "ns1", [], {}))
    b.close()
    a.close()


@pytest.mark.slow
def test_release_then_take_hands_over_cleanly(bucket: Bucket, tmp_path) -> None:
    rng = np.random.default_rng(3)
    a = _shard(bucket, "a", tmp_path)
    a.acquire([1, 2])
    mid = a.write(1, "x", "add", "ns", ["hello", _vec(rng)], {"key": "city"})
    a.release([1])
    assert a.owned() == [2]
    assert read_lease(bucket, 1).owner == ""
    with pytest.raises(NotOwnerError):
        a.write(1, "y", "add", "ns", ["again", _vec(rng)], {})
    b = _shard(bucket, "b", tmp_path)
    b.acquire([1])
    assert b.read(1, "get_by_key", "ns", ["city"], {}).id == mid
    b.close()
    a.close()


def test_concurrent_writers_share_log_objects(bucket: Bucket, tmp_path) -> None:
    import threading

    a = _shard(bucket, "a", tmp_path)
    a.acquire([3])
    rng = np.random.default_rng(5)
    vecs = [_vec(rng) for _ in range(64)]

    def writer(w: int) -> None:
        for i in range(8):
            a.write(3, f"w{w}-{i}", "add", "ns", [f"m {w} {i}", vecs[w * 8 + i]], {})

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = a.counters()
    assert c["acked"] == 64
    assert c["commits"] < 64  # group commit: concurrent writers shared PUTs
    assert len(a.read(3, "memories", "ns", [], {})) == 64
    a.close()


@pytest.mark.slow
def test_a_new_owner_starts_from_the_latest_snapshot(bucket: Bucket, tmp_path) -> None:
    rng = np.random.default_rng(9)
    a = _shard(bucket, "a", tmp_path, snapshot_every=4)
    a.acquire([2])  # the fence is record 0
    ids = [a.write(2, f"r{i}", "add", "ns", [f"m {i}", _vec(rng)], {"key": f"k{i % 3}"}) for i in range(9)]
    a.write(2, "fb", "feedback", "ns", [ids[8]], {"positive": True})  # record 10
    q = _vec(rng)
    before = [h.memory.id for h in a.read(2, "search", "ns", [q], {"k": 5, "record_access": False})]
    c = a.counters()
    assert c["snapshots"] == 2 and not c["snapshot_errors"]  # after records 0-3 and 0-7
    assert [k.rsplit("/", 1)[1] for k in bucket.list("slots/00002/snap/")] == ["000000000004", "000000000008"]
    b = _shard(bucket, "b", tmp_path)
    b.acquire([2])
    assert b.counters()["replayed"] == 3  # records 8-10, not all 10 writes
    assert [h.memory.id for h in b.read(2, "search", "ns", [q], {"k": 5, "record_access": False})] == before
    assert b.read(2, "get_by_key", "ns", ["k0"], {}).id == ids[6]
    assert b.read(2, "get", "ns", [ids[0]], {}).superseded_by == ids[3]
    assert b.write(2, "r1", "add", "ns", ["m 1", _vec(rng)], {}) == ids[1]  # an answer kept in the snapshot
    assert b.write(2, "fb", "feedback", "ns", [ids[8]], {"positive": True}).id == ids[8]
    assert len(b.read(2, "memories", "ns", [], {})) == 9
    # a release snapshots too: the next owner replays nothing
    b.release([2])
    c2 = _shard(bucket, "c", tmp_path)
    c2.acquire([2])
    assert c2.counters()["replayed"] == 0
    assert [h.memory.id for h in c2.read(2, "search", "ns", [q], {"k": 5, "record_access": False})] == before
    for shard in (a, b, c2):
        shard.close()


@pytest.mark.slow
def test_a_corrupt_snapshot_is_passed_over(bucket: Bucket, tmp_path) -> None:
    rng = np.random.default_rng(2)
    a = _shard(bucket, "a", tmp_path, snapshot_every=3)
    a.acquire([1])
    ids = [a.write(1, f"r{i}", "add", "ns", [f"m {i}", _vec(rng)], {}) for i in range(7)]
    keys = bucket.list("slots/00001/snap/")
    assert len(keys) == 2
    bucket.put(keys[-1], b"\x00 not msgpack")
    b = _shard(bucket, "b", tmp_path)
    b.acquire([1])
    assert sorted(m.id for m in b.read(1, "memories", "ns", [], {})) == sorted(ids)
    a.close()
    b.close()


def test_serve_takes_a_path_or_a_cluster_not_both(capsys) -> None:
    from tierstore.tools.cli import main

    assert main(["serve"]) == 2
    assert main(["serve", "some/path", "--cluster", "auto"]) == 2
    assert "--cluster ADDRESS" in capsys.readouterr().err
    assert main(["serve", "--cluster", "auto", "--dim", "8"]) == 2
    assert "--dim cannot be used with --cluster" in capsys.readouterr().err
    assert main(["serve", "some/path", "--cluster-name", "mine"]) == 2
    assert "--cluster-name goes with --cluster" in capsys.readouterr().err


@pytest.mark.slow
def test_a_write_whose_put_fails_is_not_acknowledged_and_applies_once_on_retry(
    bucket: Bucket, tmp_path, monkeypatch
) -> None:
    from tierstore.cluster.errors import SlotLostError
    from tierstore.errors import ObjectStoreError

    rng = np.random.default_rng(4)
    a = _shard(bucket, "a", tmp_path)
    a.acquire([0])
    first = a.write(0, "r1", "add", "ns", ["one", _vec(rng)], {})
    real_put_new = Bucket.put_new

    def down(self, key, data):  # the store is unreachable: nothing lands
        raise ObjectStoreError("injected: connection refused")

    monkeypatch.setattr(Bucket, "put_new", down)
    monkeypatch.setattr("tierstore.cluster.slotlog._APPEND_BACKOFF_S", 0.0)
    with pytest.raises(SlotLostError):
        a.write(0, "r2", "add", "ns", ["two", _vec(rng)], {})
    assert a.owned() == [] and 0 in a.lost  # local state was ahead of the log: dropped

    def lost_answer(self, key, data):  # the put lands, its answer does not come back
        real_put_new(self, key, data)
        raise ObjectStoreError("injected: read timeout")

    monkeypatch.setattr(Bucket, "put_new", real_put_new)
    a.acquire([0])  # taken again, replayed from the bucket: "two" never landed
    assert [m.content for m in a.read(0, "memories", "ns", [], {})] == ["one"]
    monkeypatch.setattr(Bucket, "put_new", lost_answer)
    second = a.write(0, "r2", "add", "ns", ["two", _vec(rng)], {})  # the append finds its own record: acknowledged
    monkeypatch.setattr(Bucket, "put_new", real_put_new)
    assert a.write(0, "r2", "add", "ns", ["two", _vec(rng)], {}) == second  # and a retry applies nothing
    b = _shard(bucket, "b", tmp_path)
    b.acquire([0])
    assert [m.id for m in b.read(0, "memories", "ns", [], {})] == [first, second]
    a.close()
    b.close()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim": 0},
        {"dim": 8, "shards": -1},
        {"dim": 8, "num_slots": 0},
        {"dim": 8, "call_timeout_s": 0},
        {"dim": 8, "deadline_s": 0},
        {"dim": 8, "deadline_s": float("inf")},
        {"dim": 8, "retry_for_s": -1},
        {"dim": 8, "takeover_threads": 0},
        {"dim": 8, "takeover_threads": 1.5},
        {"dim": 8, "snapshot_every": -2},
        {"dim": 8, "bucket": 3},
        {"dim": 8, "lease_check_s": 0},
        {"dim": 8, "name": ""},
        {"dim": 8, "name": "two words"},
        {"dim": 8, "name": "x" * 65},
        {"dim": 8, "keep_history": "yes"},
    ],
)
def test_cluster_rejects_bad_arguments_before_starting_anything(kwargs) -> None:
    ray = pytest.importorskip("ray")
    from tierstore.cluster import Cluster

    was_running = ray.is_initialized()
    with pytest.raises(InvalidInputError):
        Cluster(**{"bucket": "some-bucket", **kwargs})
    assert ray.is_initialized() == was_running


def test_cluster_rejects_a_bad_embedder_before_starting_anything() -> None:
    ray = pytest.importorskip("ray")
    from tierstore.cluster import Cluster
    from tierstore.errors import StoreConfigError

    def eight(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 8), np.float32)

    was_running = ray.is_initialized()
    with pytest.raises(StoreConfigError):
        Cluster(bucket="some-bucket", dim=8, embedder="no-such-embedder")
    with pytest.raises(StoreConfigError):  # the embedder's vectors are not the cluster's dimension
        Cluster(bucket="some-bucket", dim=16, embedder=eight)
    assert ray.is_initialized() == was_running


@pytest.mark.slow
def test_sealed_warm_shards_are_uploaded_once_and_downloaded(bucket: Bucket, tmp_path) -> None:
    import time

    from tierstore.cluster.snapshot import is_sealed, latest_snapshot

    rng = np.random.default_rng(8)
    # keep_history: the last step needs the whole log (by default the blobs and log records
    # older snapshots needed are collected; see the garbage collection tests)
    a = _shard(bucket, "a", tmp_path, keep_history=True)
    a.acquire([0])
    vectors = {}
    for mt in ("fact", "conversation", "preference"):
        items = [{"content": f"{mt} {i}", "embedding": _vec(rng), "memory_type": mt} for i in range(40)]
        for mid, item in zip(a.write(0, f"add-{mt}", "add_batch", "ns", [items], {}), items):
            vectors[mid] = item["embedding"]
    a._slots[0].clock._last = time.time() + 5 * 86400  # the slot's time runs 5 days ahead: the sweep demotes
    report = a.write(0, "sweep", "sweep", None, [], {"max_items": 1000})
    assert report.demoted > 0
    warm = [m.id for m in a.read(0, "memories", "ns", [], {}) if m.tier == "warm"]
    assert len(warm) == report.demoted
    hits_before = [h.memory.id for h in a.read(0, "search", "ns", [vectors[warm[0]]], {"k": 5, "record_access": False})]
    assert hits_before[0] == warm[0]
    a.release([0])  # snapshot: the warm shard's files go to blobs, once
    blobs = bucket.list("slots/00000/blobs/")
    snap = latest_snapshot(bucket, 0)
    assert len(blobs) == len(snap.refs) >= 3 and not any(is_sealed(p) for p in snap.files)
    b = _shard(bucket, "b", tmp_path, keep_history=True)
    b.acquire([0])
    assert b.counters()["replayed"] == 0  # downloaded, not rebuilt
    state = b._slots[0]
    assert all((state.path / rel).is_file() for rel in snap.refs)
    assert [m.id for m in b.read(0, "memories", "ns", [], {}) if m.tier == "warm"] == warm
    assert [
        h.memory.id for h in b.read(0, "search", "ns", [vectors[warm[0]]], {"k": 5, "record_access": False})
    ] == hits_before
    b.write(0, "later", "add", "ns", ["later", _vec(rng)], {})
    b.release([0])  # a second snapshot of the same shard uploads no blob
    assert bucket.list("slots/00000/blobs/") == blobs
    assert len(bucket.list("slots/00000/snap/")) == 2
    # a blob gone: the next owner replays the whole log instead, and gets the same memories
    bucket._client.delete_object(Bucket=bucket.config.bucket, Key=bucket._base + blobs[0])
    c = _shard(bucket, "c", tmp_path)
    c.acquire([0])
    assert c.counters()["replayed"] == 5  # all of it: 3 batches, the sweep (at its own time), 1 add
    assert sorted(m.id for m in c.read(0, "memories", "ns", [], {}) if m.tier == "warm") == sorted(warm)
    a.close()
    b.close()
    c.close()


@pytest.mark.slow
def test_a_shards_stats_sum_its_slots(bucket: Bucket, tmp_path) -> None:
    rng = np.random.default_rng(11)
    a = _shard(bucket, "a", tmp_path)
    a.acquire([0, 1])
    for i in range(5):
        a.write(0, f"s0-{i}", "add", "n0", [f"zero {i}", _vec(rng)], {"memory_type": "fact"})
    for i in range(3):
        a.write(1, f"s1-{i}", "add", "n1", [f"one {i}", _vec(rng)], {"memory_type": "task", "pinned": i == 0})
    got = a.stats()
    assert got["total"] == 8 and got["namespaces"] == 2 and got["pinned"] == 1
    assert got["by_type"]["fact"]["hot"] == 5 and got["by_type"]["task"]["hot"] == 3
    assert sum_stats([got, got]).total == 16  # what a router does with its shards' answers
    a.close()


# ------------------------------------------------------------------ read fencing


class _FakeMonotonic:
    """The shard's monotonic clock, moved by hand (seconds)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _wait_for(predicate, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.slow
def test_a_stale_owner_stops_serving_reads_within_the_lease_check_bound(bucket: Bucket, tmp_path, monkeypatch) -> None:
    clock = _FakeMonotonic()
    monkeypatch.setattr("tierstore.cluster.slotstore._monotonic", clock)
    bound = 2.0
    rng = np.random.default_rng(12)
    a = Shard("a", bucket.config, dim=DIM, num_slots=4, root=str(tmp_path / "a"), lease_check_s=bound)
    a.acquire([0])  # the fence landed at clock.t: confirmed then
    mid = a.write(0, "r1", "add", "ns", ["before", _vec(rng)], {})
    gets = bucket.counters()["gets"]
    lease_gets = a.bucket.counters()["gets"]
    clock.t += 0.4 * bound
    for _ in range(20):  # within half the bound: reads cost no request to the bucket
        assert a.read(0, "get", "ns", [mid], {}).content == "before"
    assert a.bucket.counters()["gets"] == lease_gets and a.counters()["lease_checks"] == 0
    # a write that lands confirms the lease as of when it was sent
    clock.t += 0.9 * bound
    a.write(0, "r2", "add", "ns", ["second", _vec(rng)], {})
    clock.t += 0.4 * bound
    assert a.read(0, "get", "ns", [mid], {}) is not None
    assert a.counters()["lease_checks"] == 0
    # past half the bound: answered at once, re-confirmed in the background (one GET, 304)
    clock.t += 0.2 * bound
    assert a.read(0, "get", "ns", [mid], {}) is not None
    _wait_for(lambda: a.counters()["lease_checks"] == 1 and not a._slots[0]._renewing)
    assert a.owned() == [0]
    confirmed_at = clock.t
    # a new owner takes the slot and writes
    b = _shard(bucket, "b", tmp_path)
    b.acquire([0])
    b.write(0, "r3", "add", "ns", ["after the move", _vec(rng)], {})
    # within the bound the stale owner may still answer, from the state it had (the documented window)
    clock.t = confirmed_at + 0.3 * bound
    assert [m.content for m in a.read(0, "memories", "ns", [], {})] == ["before", "second"]
    # once its last confirmation is older than the bound, it checks, finds the lease moved, and stops
    clock.t = confirmed_at + bound
    with pytest.raises(FencedError) as info:
        a.read(0, "memories", "ns", [], {})
    assert "'b' at epoch 2" in str(info.value)
    assert a.owned() == [] and 0 in a.lost
    with pytest.raises(NotOwnerError):
        a.read(0, "get", "ns", [mid], {})
    assert [m.content for m in b.read(0, "memories", "ns", [], {})] == ["before", "second", "after the move"]
    assert bucket.counters()["gets"] >= gets
    b.close()
    a.close()


@pytest.mark.slow
def test_an_unconfirmable_lease_refuses_reads_and_keeps_the_slot(bucket: Bucket, tmp_path, monkeypatch) -> None:
    from tierstore.cluster.errors import LeaseUnconfirmedError
    from tierstore.errors import ObjectStoreError

    clock = _FakeMonotonic()
    monkeypatch.setattr("tierstore.cluster.slotstore._monotonic", clock)
    rng = np.random.default_rng(13)
    a = Shard("a", bucket.config, dim=DIM, num_slots=4, root=str(tmp_path / "a"), lease_check_s=1.0)
    a.acquire([1])
    mid = a.write(1, "r1", "add", "ns", ["kept", _vec(rng)], {})
    real = Bucket.get_if_changed

    def down(self, key, etag):
        raise ObjectStoreError("injected: connection refused")

    monkeypatch.setattr(Bucket, "get_if_changed", down)
    clock.t += 5.0
    with pytest.raises(LeaseUnconfirmedError):  # it might be stale by more than the bound: refused
        a.read(1, "get", "ns", [mid], {})
    assert a.owned() == [1]  # not dropped: the lease may well be ours
    monkeypatch.setattr(Bucket, "get_if_changed", real)
    assert a.read(1, "get", "ns", [mid], {}).content == "kept"
    assert a.counters()["lease_checks"] == 2
    a.close()


@pytest.mark.slow
def test_shard_rejects_a_bad_lease_check_bound(bucket: Bucket, tmp_path) -> None:
    for bad in (0, -1.0, float("inf"), float("nan"), True, "2"):
        with pytest.raises(InvalidInputError):
            Shard("a", bucket.config, dim=DIM, num_slots=4, root=str(tmp_path / "a"), lease_check_s=bad)


# ------------------------------------------------------------------ maintenance on a slot


@pytest.mark.slow
def test_verify_repair_compact_and_a_dry_run_sweep_on_a_slot(bucket: Bucket, tmp_path) -> None:
    import time

    rng = np.random.default_rng(14)
    a = _shard(bucket, "a", tmp_path)
    a.acquire([0])
    for mt in ("fact", "conversation", "preference"):
        items = [{"content": f"{mt} {i}", "embedding": _vec(rng), "memory_type": mt} for i in range(40)]
        a.write(0, f"add-{mt}", "add_batch", "ns", [items], {})
    a._slots[0].clock._last = time.time() + 5 * 86400  # 5 days ahead: the sweep demotes some, archives others
    seq = a._slots[0].next_seq
    tiers = {m.id: m.tier for m in a.read(0, "memories", "ns", [], {})}
    # a dry run is a read: it counts, logs nothing and changes nothing
    preview = a.read(0, "sweep_preview", None, [], {"max_items": 1000})
    assert preview.dry_run and preview.examined > 0
    assert a._slots[0].next_seq == seq and {m.id: m.tier for m in a.read(0, "memories", "ns", [], {})} == tiers
    with pytest.raises(ValueError):  # a dry run is not a write
        a.write(0, "x", "sweep_preview", None, [], {})
    report = a.write(0, "sweep", "sweep", None, [], {"max_items": 1000})
    # what the dry run said it would do
    assert (report.demoted, report.archived, report.deleted) == (preview.demoted, preview.archived, preview.deleted)
    assert report.demoted > 0 and report.archived > 0
    assert a.read(0, "verify", None, [], {}).ok
    # damage a sealed warm shard's file in the owner's local copy: verify says so, repair rebuilds it
    state = a._slots[0]
    warm_files = sorted(p for p in (state.path / "warm").rglob("*") if p.is_file())
    assert warm_files
    victim = max(warm_files, key=lambda p: p.stat().st_size)
    victim.write_bytes(b"\x00" * victim.stat().st_size)
    damaged = a.read(0, "verify", None, [], {})
    assert not damaged.ok and {p.kind for p in damaged.problems} == {"warm"}
    repaired = a.write(0, "repair-1", "repair", None, [], {})
    assert repaired.ok and repaired.repaired
    assert a.read(0, "verify", None, [], {}).ok
    assert a.write(0, "repair-1", "repair", None, [], {}) is repaired  # a retry returns the first answer
    archived = [m.id for m in a.read(0, "memories", "ns", [], {}) if m.tier == "cold"]
    assert a.write(0, "del-cold", "delete", "ns", [archived[0]], {}) is True
    assert a.write(0, "compact-1", "compact_cold", None, [], {}) >= 1  # its archive object, rewritten without it
    assert a.write(0, "compact-2", "compact_cold", None, [], {}) == 0
    assert a._slots[0].next_seq == seq + 5  # the sweep, repair, delete and compactions were logged
    expected = {m.id: (m.tier, m.content) for m in a.read(0, "memories", "ns", [], {})}
    # a new owner replays all of it (the repair and the compaction included) to the same memories
    b = _shard(bucket, "b", tmp_path)
    b.acquire([0])
    assert {m.id: (m.tier, m.content) for m in b.read(0, "memories", "ns", [], {})} == expected
    assert b.read(0, "verify", None, [], {}).ok
    a.close()
    b.close()


def test_integrity_reports_merge_per_slot() -> None:
    from tierstore.cluster.cluster import _merge_integrity
    from tierstore.core.integrity import IntegrityReport, Problem

    one = IntegrityReport(
        problems=[Problem("warm", "warm/ns/s1", "bad checksum", True)],
        checked={"warm_shards": 2, "archives": 1},
        repaired=["warm/ns/s1"],
    )
    two = IntegrityReport(checked={"warm_shards": 3}, in_flight=[Problem("cold", "batch-9", "pending", True)])
    merged = _merge_integrity([(3, one), (17, two)])
    assert not merged.ok
    assert [p.where for p in merged.problems] == ["slot 00003: warm/ns/s1"]
    assert [p.where for p in merged.in_flight] == ["slot 00017: batch-9"]
    assert merged.checked == {"warm_shards": 5, "archives": 1}
    assert merged.repaired == ["slot 00003: warm/ns/s1"]
    assert _merge_integrity([(0, IntegrityReport())]).ok


# ------------------------------------------------------------------ garbage collection


def _keys(bucket: Bucket, slot: int, what: str) -> list[int | str]:
    prefix = f"slots/{slot:05d}/{what}/"
    tails = [k[len(prefix) :] for k in bucket.list(prefix)]
    return [int(t) for t in tails] if what != "blobs" else tails


def _state_of(shard: Shard, slot: int, ns: str) -> dict[str, tuple]:
    return {m.id: (m.content, m.tier, m.created_at, m.superseded_by) for m in shard.read(slot, "memories", ns, [], {})}


@pytest.mark.slow
def test_garbage_collection_keeps_what_a_replay_needs_and_every_fence(bucket: Bucket, tmp_path) -> None:
    import hashlib
    import time

    rng = np.random.default_rng(21)
    a = _shard(bucket, "a", tmp_path, snapshot_every=4)
    a.acquire([2])  # the fence is record 0
    for mt in ("fact", "conversation", "preference"):  # records 1-3
        a.write(
            2,
            f"add-{mt}",
            "add_batch",
            "ns",
            [[{"content": f"{mt} {i}", "embedding": _vec(rng), "memory_type": mt} for i in range(40)]],
            {},
        )
    a._slots[2].clock._last = time.time() + 5 * 86400
    assert a.write(2, "sweep", "sweep", None, [], {"max_items": 1000}).demoted > 0  # record 4: sealed warm shards
    orphan = b"a blob no snapshot names"
    orphan_digest = hashlib.sha256(orphan).hexdigest()
    bucket.put(f"slots/00002/blobs/{orphan_digest}", orphan)
    ids = [a.write(2, f"r{i}", "add", "ns", [f"m {i}", _vec(rng)], {"key": f"k{i % 3}"}) for i in range(9)]  # 5-13
    # snapshots at 4, 8 and 12; after the one at 12 the history below 8 goes, the fence at 0 stays
    _wait_for(lambda: a.counters()["collected"]["snapshots"] == 1 and a.counters()["collected"]["log"] == 7)
    assert not a.counters()["snapshot_errors"]
    assert _keys(bucket, 2, "snap") == [8, 12]
    assert _keys(bucket, 2, "log") == [0, *range(8, 14)]
    blobs = _keys(bucket, 2, "blobs")
    assert orphan_digest not in blobs and blobs  # the orphan went; the warm shards' blobs stayed
    expected = _state_of(a, 2, "ns")
    q = _vec(rng)
    top5 = [h.memory.id for h in a.read(2, "search", "ns", [q], {"k": 5, "record_access": False})]

    # a new owner rebuilds from what is left: the newest snapshot (its blobs) and the tail
    b = _shard(bucket, "b", tmp_path, snapshot_every=4)
    b.acquire([2])  # fences at 14
    assert b.counters()["replayed"] == 2  # records 12-13
    assert _state_of(b, 2, "ns") == expected
    assert [h.memory.id for h in b.read(2, "search", "ns", [q], {"k": 5, "record_access": False})] == top5
    for i in range(8):  # records 15-22: snapshots at 16 and 20; the history below 16 goes, bar the fences
        b.write(2, f"b{i}", "add", "ns", [f"b {i}", _vec(rng)], {})
    _wait_for(lambda: 14 in _keys(bucket, 2, "log") and 13 not in _keys(bucket, 2, "log"))
    assert _keys(bucket, 2, "log") == [0, 14, *range(16, 23)]
    assert _keys(bucket, 2, "snap") == [16, 20]
    # the stale owner's next append is at 14: the kept fence refuses it (412), though its neighbours are gone
    with pytest.raises(FencedError):
        a.write(2, "zombie", "add", "ns", ["zombie", _vec(rng)], {})
    expected_b = _state_of(b, 2, "ns")
    assert len(expected_b) == len(expected) + 8 and "zombie" not in {v[0] for v in expected_b.values()}
    b.release([2])  # a snapshot at 23, then a collection below 20
    c = _shard(bucket, "c", tmp_path)
    c.acquire([2])
    assert c.counters()["replayed"] == 0
    assert _state_of(c, 2, "ns") == expected_b
    assert c.read(2, "get_by_key", "ns", ["k0"], {}).id == ids[6]
    assert c.write(2, "r1", "add", "ns", ["m 1", _vec(rng)], {}) == ids[1]  # an answer kept across all of it
    for shard in (a, b, c):
        shard.close()


@pytest.mark.slow
def test_a_takeover_racing_a_collection_loses_nothing(bucket: Bucket, tmp_path, monkeypatch) -> None:
    import tierstore.cluster.slotstore as slotstore_module

    rng = np.random.default_rng(22)
    a = _shard(bucket, "a", tmp_path)  # snapshots only when told: the test drives them
    a.acquire([3])
    state = a._slots[3]
    for i in range(6):
        a.write(3, f"r{i}", "add", "ns", [f"m {i}", _vec(rng)], {})
    assert state.snapshot(reopen=True)  # at 7
    a.write(3, "r6", "add", "ns", ["m 6", _vec(rng)], {})
    assert state.snapshot(reopen=True)  # at 8: the one at 7 is the older kept one
    logs_before = _keys(bucket, 3, "log")

    # 1. the slot moves before the collector confirms its lease: nothing is deleted
    b = _shard(bucket, "b", tmp_path)
    b.acquire([3])
    assert state.collect_garbage() is None
    assert _keys(bucket, 3, "log") == logs_before + [8]  # b's fence, and nothing gone
    with pytest.raises(FencedError):
        a.write(3, "late", "add", "ns", ["late", _vec(rng)], {})
    expected = _state_of(b, 3, "ns")
    assert len(expected) == 7

    # 2. the slot moves after the collector confirmed its lease, while it deletes
    state_b = b._slots[3]
    b.write(3, "r7", "add", "ns", ["m 7", _vec(rng)], {})
    assert state_b.snapshot(reopen=True)  # at 10 (the one at 8, loaded at the takeover, is the older kept one)
    c = _shard(bucket, "c", tmp_path)
    real_collect = slotstore_module.collect
    taken: list[int] = []

    def racing_collect(*args, **kwargs):
        taken.append(c.acquire([3])[3])  # the takeover lands between the lease check and the deletes
        return real_collect(*args, **kwargs)

    monkeypatch.setattr(slotstore_module, "collect", racing_collect)
    done = state_b.collect_garbage()
    assert taken == [3] and done is not None and done.log > 0  # it did delete (below 8)
    monkeypatch.setattr(slotstore_module, "collect", real_collect)
    got = _state_of(c, 3, "ns")
    assert {v[0] for v in got.values()} == {f"m {i}" for i in range(8)}
    assert {k: v for k, v in got.items() if v[0] != "m 7"} == expected
    # and c's own successor still rebuilds it all from what the collection left
    c.release([3])
    d = _shard(bucket, "d", tmp_path)
    d.acquire([3])
    assert _state_of(d, 3, "ns") == got
    with pytest.raises(FencedError):  # the stale owners stay fenced
        b.write(3, "late-b", "add", "ns", ["late", _vec(rng)], {})
    for shard in (a, b, c, d):
        shard.close()


@pytest.mark.slow
def test_a_slot_whose_kept_snapshots_are_unreadable_is_refused_not_served_short(bucket: Bucket, tmp_path) -> None:
    rng = np.random.default_rng(23)
    a = _shard(bucket, "a", tmp_path, snapshot_every=3)
    a.acquire([1])
    for i in range(9):  # snapshots at 3, 6, 9; the log below 6 collected (bar the fence at 0)
        a.write(1, f"r{i}", "add", "ns", [f"m {i}", _vec(rng)], {})
    _wait_for(lambda: _keys(bucket, 1, "snap") == [6, 9] and 5 not in _keys(bucket, 1, "log"))
    a.release([1])  # a snapshot at 10 (+ the release); below 9 collected
    _wait_for(lambda: _keys(bucket, 1, "snap") == [9, 10])
    for seq in (9, 10):
        bucket.put(f"slots/00001/snap/{seq:012d}", b"\x00 damaged")
    b = _shard(bucket, "b", tmp_path)
    with pytest.raises(CorruptDataError):  # the whole log is not there to fall back on
        b.acquire([1])
    assert b.owned() == []
    assert _keys(bucket, 1, "log")[-1] == 9  # and it wrote no fence into the gap (or anywhere)
    a.close()
    b.close()


def _no_ray(monkeypatch) -> None:
    """Fail the test if anything starts or joins Ray."""
    ray = pytest.importorskip("ray")

    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the bucket was checked")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)


def test_a_bucket_that_does_not_answer_is_refused_before_ray_starts(moto_server, monkeypatch) -> None:
    from tierstore.cluster import Cluster
    from tierstore.errors import StoreConfigError

    _no_ray(monkeypatch)
    with pytest.raises(StoreConfigError, match="cannot reach the cluster's bucket 'no-such-bucket-here'"):
        Cluster(
            bucket="no-such-bucket-here",
            s3_options={"endpoint_url": moto_server.endpoint_url, "region_name": "us-east-1"},
            dim=8,
            shards=1,
        )


@pytest.mark.slow
def test_a_prefix_belongs_to_one_cluster_name(bucket: Bucket, monkeypatch) -> None:
    """The first router claims the prefix for its cluster's name
    (cluster.json, create-only); the same name again is fine; another name is
    refused before Ray starts, naming the cluster that holds it."""
    from tierstore.cluster import Cluster
    from tierstore.cluster.identity import KEY, Identity, claim, read_identity
    from tierstore.errors import StoreConfigError

    claim(bucket, "first")
    claim(bucket, "first")
    assert isinstance(read_identity(bucket), Identity) and read_identity(bucket).name == "first"
    with pytest.raises(StoreConfigError, match="holds the slots of the cluster 'first'"):
        claim(bucket, "second")
    _no_ray(monkeypatch)
    with pytest.raises(StoreConfigError, match=r"Use name='first' to join that cluster"):
        Cluster(bucket=bucket.config, name="second", dim=8, shards=1)
    # another prefix of the same bucket is another cluster's to claim
    other = BucketConfig(bucket.config.bucket, "c2", bucket.config.options).open()
    claim(other, "second")
    assert read_identity(other).name == "second" and read_identity(bucket).name == "first"
    bucket.put(KEY, b"not json")
    with pytest.raises(StoreConfigError, match="does not parse"):
        claim(bucket, "first")


# ------------------------------------------------------------------ deadlines, concurrent takes


@pytest.mark.parametrize("bad", [0, -0.5, float("nan"), float("inf"), "2", True, None])
def test_a_deadline_is_a_positive_finite_number_of_seconds(bad) -> None:
    from tierstore.cluster.deadline import check_deadline

    with pytest.raises(InvalidInputError, match="deadline_s must be a positive, finite number of seconds"):
        check_deadline(bad)
    assert check_deadline(2) == 2.0 and isinstance(check_deadline(2), float)


def test_an_exceeded_deadline_names_what_it_waited_for_and_travels() -> None:
    import pickle

    from tierstore.cluster.deadline import Deadline
    from tierstore.cluster.errors import ClusterError, DeadlineExceededError

    err = Deadline(0.25).exceeded(7, "slot move", "slot 7 was still moving to a new owner")
    assert isinstance(err, ClusterError)
    assert str(err) == "deadline of 0.25 s exceeded: slot 7 was still moving to a new owner"
    back = pickle.loads(pickle.dumps(err))  # what Ray or a served cluster's error path may do with it
    assert type(back) is DeadlineExceededError and str(back) == str(err)
    assert (back.slot, back.deadline_s, back.waiting_for) == (7, 0.25, "slot move")


@pytest.mark.slow
def test_concurrent_takes_of_one_slot_take_it_once(bucket: Bucket, tmp_path) -> None:
    """The router sends one take per slot; two that meet on a shard take the slot once (one epoch)."""
    import threading

    rng = np.random.default_rng(13)
    a = _shard(bucket, "a", tmp_path)
    a.acquire([3])
    mid = a.write(3, "w", "add", "ns", ["kept", _vec(rng)], {})
    a.release([3])
    b = _shard(bucket, "b", tmp_path)
    results: list[dict[int, int]] = []
    threads = [threading.Thread(target=lambda: results.append(b.acquire([3]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [{3: 2}] * 4  # one take: epoch 2, the same for all
    assert read_lease(bucket, 3).epoch == 2 and b.owned() == [3]
    assert b.read(3, "get", "ns", [mid], {}).content == "kept"
    b.close()
    a.close()

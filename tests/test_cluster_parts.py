"""tierstore.cluster's parts without Ray: slots and rendezvous placement, the
lease (conditional puts), the slot log (create-only appends, fencing, replay)
and the record format — against moto's server over real HTTP."""

from __future__ import annotations

import collections

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
    return BucketConfig(s3_bucket, "c1", {"endpoint_url": moto_server.endpoint_url,
                                          "region_name": "us-east-1"}).open()


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


# ------------------------------------------------------------------ lease

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


def test_log_replay_stops_at_a_gap(bucket: Bucket) -> None:
    log = SlotLog(bucket, 1)
    log.append(0, kind="ops", epoch=1, owner="a", t=1.0, ops=[])
    log.append(2, kind="ops", epoch=1, owner="a", t=1.0, ops=[])
    assert [r.seq for r in log.replay_from(0)] == [0]


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

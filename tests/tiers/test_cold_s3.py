"""The cold tier on S3 (moto's standalone server over HTTP), restore, and
rebuilding the cold catalog from the bucket alone."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import DIM, T0, unit

from tierstore import ManualClock, TierStore
from tierstore.storage.objectstore import S3ObjectStore

HOUR = 3600.0


def open_s3_store(path, clock, moto_server, bucket, **kwargs):
    return TierStore.open(
        path,
        dim=DIM,
        clock=clock,
        cold=f"s3://{bucket}/mem",
        cold_options={"endpoint_url": moto_server.endpoint_url},
        **kwargs,
    )


def test_archive_and_restore_over_s3(tmp_path, rng, moto_server, s3_bucket):
    clock = ManualClock(T0)
    store = open_s3_store(tmp_path / "s", clock, moto_server, s3_bucket)
    ids = store.add_batch(
        "alice",
        [
            {
                "content": f"chat about the trip to Lisbon #{i}",
                "embedding": unit(rng),
                "memory_type": "conversation",
                "tags": ["travel"],
            }
            for i in range(12)
        ],
    )
    before = {i: store.get("alice", i) for i in ids}
    clock.advance(2 * HOUR)
    assert store.sweep().archived == 12
    assert isinstance(store.engine.cold.store, S3ObjectStore)
    keys = moto_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="mem/archive/")["Contents"]
    assert len(keys) == 1 and keys[0]["Key"].startswith("mem/archive/alice/")
    assert store.restore("alice", ids=ids[:3]) == ids[:3]
    assert sorted(store.restore("alice", text="Lisbon", limit=4)) == sorted(
        store.restore("alice", ids=ids[3:7]) or ids[3:7]
    )
    for i in ids[:7]:
        m = store.get("alice", i)
        assert m.tier == "hot" and m.embedding.tobytes() == before[i].embedding.tobytes()
    store.close()
    # reopened without cold=: the store remembers its bucket and endpoint
    with TierStore.open(tmp_path / "s", clock=clock) as again:
        assert isinstance(again.engine.cold.store, S3ObjectStore)
        got = again.restore("alice", where={"memory_type": "conversation"})
        assert sorted(got) == sorted(ids[7:])
        assert again.stats().by_tier["cold"] == 0


@pytest.mark.slow
def test_rebuild_cold_catalog_from_the_bucket_alone(tmp_path, rng, moto_server, s3_bucket):
    clock = ManualClock(T0)
    with open_s3_store(tmp_path / "old", clock, moto_server, s3_bucket) as store:
        ids = store.add_batch(
            "bob",
            [
                {
                    "content": f"note {i} on the quarterly report",
                    "embedding": unit(rng),
                    "memory_type": "conversation",
                    "tags": [f"t{i % 2}"],
                }
                for i in range(10)
            ],
        )
        before = {i: store.get("bob", i) for i in ids}
        clock.advance(2 * HOUR)
        store.sweep()
        (first,) = store.engine.cold.list_batches()
        first_bytes = store.engine.cold.store.get(first)
        store.restore("bob", ids=[ids[0]])
        clock.advance(2 * HOUR)
        report = store.sweep()  # archived a second time, in a second batch; the first object rewritten
        assert report.archived == 1 and report.compacted == 1 and first not in store.engine.cold.list_batches()
        # as if the rewrite's delete of the old object had been lost: the bucket
        # holds an older copy of every memory, of ids[0] two
        assert store.engine.cold.store.put_if_absent(first, first_bytes)
    # The catalog is lost: a fresh store on the same bucket (handed over to it).
    with open_s3_store(tmp_path / "new", clock, moto_server, s3_bucket, take_over_cold=True) as fresh:
        assert fresh.stats().total == 0
        counts = fresh.rebuild_catalog()
        assert counts["objects"] == 3 and counts["records"] == 20 and counts["inserted"] == 10
        assert fresh.stats().by_tier == {"hot": 0, "warm": 0, "cold": 10}
        again = fresh.rebuild_catalog()  # idempotent
        assert again["inserted"] == 0 and fresh.stats().total == 10
        assert sorted(fresh.restore("bob", where={"tags": ["t1"]})) == sorted(ids[1::2])
        assert sorted(fresh.restore("bob", text="quarterly")) == sorted(ids[0::2])
        for i in ids:
            m = fresh.get("bob", i)
            assert m.tier == "hot" and m.content == before[i].content
            assert m.embedding.tobytes() == before[i].embedding.tobytes()
            assert m.tags == before[i].tags and m.created_at == before[i].created_at


@pytest.mark.slow
def test_a_deleted_memory_stays_forgotten_in_a_rebuild_over_s3(tmp_path, rng, moto_server, s3_bucket):
    """The delete's tombstone lives in the bucket: a catalog rebuilt from it
    alone, before any sweep rewrote the archive object, leaves the memory out."""
    clock = ManualClock(T0)
    with open_s3_store(tmp_path / "old", clock, moto_server, s3_bucket) as store:
        ids = store.add_batch(
            "eve",
            [{"content": f"private note {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(6)],
        )
        clock.advance(2 * HOUR)
        assert store.sweep().archived == 6
        assert store.delete("eve", ids[2])
    keys = [o["Key"] for o in moto_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="mem/")["Contents"]]
    assert sum(k.startswith("mem/tombstone/eve/") for k in keys) == 1
    with open_s3_store(tmp_path / "new", clock, moto_server, s3_bucket, take_over_cold=True) as fresh:
        counts = fresh.rebuild_catalog()
        assert counts["inserted"] == 5 and counts["forgotten"] == 1 and fresh.get("eve", ids[2]) is None
        assert fresh.sweep().compacted == 1
        keys = [o["Key"] for o in moto_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="mem/")["Contents"]]
        assert not any(k.startswith("mem/tombstone/") for k in keys)
        assert all(b"private note 2" not in fresh.engine.cold.store.get(k) for k in fresh.engine.cold.list_batches())


@pytest.mark.slow
def test_cli_sweep_restore_stats_over_s3(tmp_path, rng, moto_server, s3_bucket):
    import datetime
    import time

    clock = ManualClock(time.time() - 3 * HOUR)
    path = tmp_path / "s"
    with open_s3_store(path, clock, moto_server, s3_bucket) as store:
        ids = store.add_batch(
            "cli",
            [
                {"content": f"passport renewal step {i}", "embedding": unit(rng), "memory_type": "conversation"}
                for i in range(5)
            ],
        )

    # the CLI runs on wall-clock time: three hours later, these conversations have expired
    def cli(*args):
        out = subprocess.run(
            [sys.executable, "-m", "tierstore.tools.cli", *args], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    # the store's time was kept by the ManualClock: the machine's clock is refused, the time must be given
    refused = subprocess.run(
        [sys.executable, "-m", "tierstore.tools.cli", "sweep", str(path)], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "--allow-clock-jump" in refused.stderr
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    swept = json.loads(cli("sweep", str(path), "--json", "--until-done", "--now", now))
    assert swept["archived"] == 5 and swept["remaining_due"] == 0
    stats = json.loads(cli("stats", str(path), "--json"))
    assert stats["by_tier"]["cold"] == 5
    restored = json.loads(cli("restore", str(path), "--ns", "cli", "--text", "passport", "--limit", "2", "--json"))
    assert len(restored) == 2 and set(restored) <= set(ids)
    assert "restored 3 memories" in cli("restore", str(path), "--ns", "cli", "--type", "conversation")
    assert "per tier: hot 5, warm 0, cold 0" in cli("stats", str(path))

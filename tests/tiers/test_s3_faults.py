"""The cold tier on S3 under faults: 500/503 answers, connections dropped
mid-response, responses stalled past the client's read timeout, a whole outage,
and the S3 server restarted (losing its state). Everything runs against moto's
standalone server through ``tests/support/faultproxy.py``.

What must hold: nothing is lost (every memory readable, restorable
bit-identical); errors are clear (they name the operation and the key) and
never carry credentials; a sweep during an outage archives nothing and changes
nothing it cannot finish; the next sweep after recovery finishes the pending
batches; the background migrator backs off and completes after recovery.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from faultproxy import FAULTS, FaultProxy
from helpers import DIM, T0, unit
from s3_fixtures import MotoServer, _free_port

from tierstore import ManualClock, ObjectNotFoundError, ObjectStoreError, TierStore

HOUR = 3600.0
DAY = 86400.0
SECRET = "tierstore-fault-SECRET-9f3c1d"
ACCESS_KEY = "AKIAFAULTPROXYTEST01"


@pytest.fixture
def proxy(moto_server: MotoServer):
    p = FaultProxy(moto_server.host, moto_server.port, stall_s=5.0).start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def private_moto(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory):
    """A moto server of our own, to stop and restart without disturbing other tests
    (``moto_server`` only provides the credentials environment)."""
    server = MotoServer(_free_port(MotoServer.host), tmp_path_factory.mktemp("moto-private") / "server.log")
    server.start()
    yield server
    server.stop()


# Timeouts far above moto's answer on a loaded two-core machine: a request that merely waits for the CPU is
# not a fault. The stall tests use STALL_TIMEOUT, below the proxy's stall (5 s).
READ_TIMEOUT = 10.0
STALL_TIMEOUT = 1.5


def open_store(
    path: Path,
    clock: ManualClock,
    endpoint: str,
    bucket: str,
    *,
    max_attempts: int = 3,
    read_timeout: float = READ_TIMEOUT,
) -> TierStore:
    return TierStore.open(
        path,
        dim=DIM,
        clock=clock,
        cold=f"s3://{bucket}/mem",
        cold_options={
            "endpoint_url": endpoint,
            "region_name": "us-east-1",
            "connect_timeout": 10.0,
            "read_timeout": read_timeout,
            "max_attempts": max_attempts,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET,
        },
    )


def seed(store: TierStore, rng: np.random.Generator) -> dict[str, tuple[str, str, bytes]]:
    """12 conversations and 4 facts in "a", 6 conversations in "b": id -> (ns, content, embedding)."""
    out = {}
    for ns, n_conv, n_fact in (("a", 12, 4), ("b", 6, 0)):
        items = [
            {
                "content": f"{ns} chat {i} about Lisbon",
                "embedding": unit(rng),
                "memory_type": "conversation",
                "id": f"{ns}-c{i}",
            }
            for i in range(n_conv)
        ]
        items += [
            {"content": f"{ns} fact {i}", "embedding": unit(rng), "memory_type": "fact", "id": f"{ns}-f{i}"}
            for i in range(n_fact)
        ]
        for mid in store.add_batch(ns, items):
            m = store.get(ns, mid)
            out[mid] = (ns, m.content, m.embedding.tobytes())
    return out


CONVERSATIONS = 18


def check_nothing_lost(store: TierStore, expected: dict[str, tuple[str, str, bytes]]) -> None:
    assert store.stats().total == len(expected)
    for mid, (ns, content, emb) in expected.items():
        m = store.get(ns, mid)
        assert m is not None, f"{mid} was lost"
        assert m.content == content
        if m.embedding is not None:  # cold memories carry no embedding until restored
            assert m.embedding.tobytes() == emb
        else:
            assert m.tier == "cold"


def restore_all_and_check(store: TierStore, expected: dict[str, tuple[str, str, bytes]]) -> None:
    for ns in sorted({ns for ns, _, _ in expected.values()}):
        cold = [mid for mid, (n, _, _) in expected.items() if n == ns and store.get(ns, mid).tier == "cold"]
        if cold:
            assert sorted(store.restore(ns, ids=cold)) == sorted(cold)
    for mid, (ns, content, emb) in expected.items():
        m = store.get(ns, mid)
        assert m.tier in ("hot", "warm") and m.content == content
        assert m.embedding.tobytes() == emb, f"{mid} did not come back bit-identical"


def bucket_keys(server: MotoServer, bucket: str) -> list[str]:
    """The bucket's data objects (not the prefix's owner object, tierstore/storage/ownership.py)."""
    resp = server.client().list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in resp.get("Contents", ()) if o["Key"] != "mem/owner.json")


def referenced_keys(store: TierStore) -> set[str]:
    return {
        f"mem/{k}"
        for (k,) in store.engine.catalog.query("SELECT DISTINCT cold_key FROM memories WHERE cold_key IS NOT NULL")
    }


def catalog_snapshot(store: TierStore) -> list[tuple]:
    return (
        store.engine.catalog.query("SELECT * FROM memories ORDER BY rid")
        + store.engine.catalog.query("SELECT * FROM archives ORDER BY batch")
        + store.engine.catalog.query("SELECT count(*) FROM events")
    )


def assert_clear(message: str, *, op: str | None = None) -> None:
    assert SECRET not in message and ACCESS_KEY not in message
    assert "archive/" in message, message  # names the key
    if op is not None:
        assert op in message, message


# -- transient faults: retried, invisible to the caller --------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS)
def test_a_transient_fault_is_retried_by_sweep_and_restore(tmp_path, rng, moto_server, s3_bucket, proxy, fault):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock, proxy.url, s3_bucket) as store:
        expected = seed(store, rng)
        clock.advance(2 * HOUR)
        proxy.set_fault(fault, count=1, methods={"PUT"})
        report = store.sweep()
        assert proxy.injected[fault] == 1
        assert report.errors == [] and report.archived == CONVERSATIONS
        # A PUT that reached the server although the client saw it fail was not written
        # twice: the retry found the object (If-None-Match) and used it.
        assert bucket_keys(moto_server, s3_bucket) == sorted(referenced_keys(store))
        assert len(bucket_keys(moto_server, s3_bucket)) == 2
        proxy.set_fault(fault, count=1, methods={"GET"})
        ids = [f"a-c{i}" for i in range(12)]
        assert sorted(store.restore("a", ids=ids)) == sorted(ids)
        assert proxy.injected[fault] == 2
        check_nothing_lost(store, expected)
        restore_all_and_check(store, expected)


# -- an outage: nothing archived, nothing lost, finished after recovery ------------------------


@pytest.mark.slow
def test_sweep_during_an_outage_archives_nothing_and_the_next_sweep_finishes(
    tmp_path, rng, moto_server, s3_bucket, proxy
):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock, proxy.url, s3_bucket, max_attempts=2) as store:
        expected = seed(store, rng)
        clock.advance(2 * HOUR)
        proxy.set_fault("503")
        report = store.sweep()
        assert proxy.injected["503"] >= 2  # tried, retried
        assert report.archived == 0 and len(report.errors) == 1
        assert_clear(report.errors[0], op="put_if_absent")
        assert "SlowDown" in report.errors[0] and "HTTP 503" in report.errors[0]
        assert store.stats().by_tier == {"hot": 22, "warm": 0, "cold": 0}
        check_nothing_lost(store, expected)
        # the store keeps serving from the hot tier
        for ns, content, emb in list(expected.values())[:3]:
            q = np.frombuffer(emb, np.float32)
            hits = store.search(ns, q, k=1, memory_types=["conversation"], record_access=False)
            assert hits[0].memory.content == content
        assert store.engine.catalog.query("SELECT count(*) FROM archives WHERE state = 'pending'")[0][0] >= 1
        assert bucket_keys(moto_server, s3_bucket) == []

        # Another sweep while it lasts: an error (reported or raised), no change.
        before = catalog_snapshot(store)
        try:
            again = store.sweep()
        except ObjectStoreError as exc:
            assert_clear(str(exc))
        else:
            assert again.archived == 0 and again.errors
            assert_clear(again.errors[0])
        assert catalog_snapshot(store) == before

        proxy.clear()
        report = store.sweep()
        assert report.errors == [] and report.archived == CONVERSATIONS
        assert store.engine.catalog.query("SELECT count(*) FROM archives WHERE state = 'pending'")[0][0] == 0
        assert bucket_keys(moto_server, s3_bucket) == sorted(referenced_keys(store))
        check_nothing_lost(store, expected)
        restore_all_and_check(store, expected)


def test_sweep_keeps_demoting_during_an_outage(tmp_path, rng, moto_server, s3_bucket, proxy):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock, proxy.url, s3_bucket, max_attempts=1) as store:
        seed(store, rng)
        clock.advance(2 * HOUR)
        proxy.set_fault("503")
        assert store.sweep().errors  # leaves a pending batch behind
        clock.advance(20 * DAY)  # the facts are now due for demotion (no object store needed)
        report = store.sweep()
        assert report.errors and report.demoted == 4
        assert {store.get("a", f"a-f{i}").tier for i in range(4)} == {"warm"}


def test_a_put_that_landed_before_its_error_does_not_wedge_the_batch(tmp_path, rng, moto_server, s3_bucket, proxy):
    """The PUT reaches S3 but the client times out (so the batch stays pending);
    then a member of the batch is deleted. The next sweep must reuse the object
    (it holds one record more than the batch now needs) instead of failing on
    every sweep from then on."""
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock, proxy.url, s3_bucket, max_attempts=1, read_timeout=STALL_TIMEOUT) as store:
        expected = seed(store, rng)
        clock.advance(2 * HOUR)
        proxy.set_fault("stall_response", methods={"PUT"})
        report = store.sweep()
        assert report.archived == 0 and report.errors
        assert "timeout" in report.errors[0].lower()
        assert_clear(report.errors[0], op="put_if_absent")
        landed = bucket_keys(moto_server, s3_bucket)
        assert landed  # the object is there although the client saw a failure
        proxy.clear()
        assert store.delete("a", "a-c0") and store.delete("b", "b-c0")
        del expected["a-c0"], expected["b-c0"]
        report = store.sweep()
        assert report.errors == [] and report.archived == CONVERSATIONS - 2
        assert store.sweep().errors == []
        assert store.get("a", "a-c0") is None and store.get("b", "b-c0") is None
        check_nothing_lost(store, expected)
        restore_all_and_check(store, expected)


def test_a_stall_past_the_read_timeout_is_a_clear_error(tmp_path, rng, moto_server, s3_bucket, proxy):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock, proxy.url, s3_bucket, max_attempts=2, read_timeout=STALL_TIMEOUT) as store:
        expected = seed(store, rng)
        clock.advance(2 * HOUR)
        proxy.set_fault("stall")
        report = store.sweep()
        assert proxy.injected["stall"] >= 2
        assert report.archived == 0 and report.errors
        assert "Read timeout" in report.errors[0]
        assert_clear(report.errors[0], op="put_if_absent")
        check_nothing_lost(store, expected)
        proxy.clear()
        report = store.sweep()
        assert report.errors == [] and report.archived == CONVERSATIONS
        restore_all_and_check(store, expected)


@pytest.mark.parametrize("fault", ["500", "drop_before", "stall"])
def test_restore_during_an_outage_raises_and_changes_nothing(tmp_path, rng, moto_server, s3_bucket, proxy, fault):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock, proxy.url, s3_bucket, max_attempts=2, read_timeout=STALL_TIMEOUT) as store:
        expected = seed(store, rng)
        clock.advance(2 * HOUR)
        assert store.sweep().archived == CONVERSATIONS
        before = catalog_snapshot(store)
        proxy.set_fault(fault)
        ids = [f"a-c{i}" for i in range(12)]
        with pytest.raises(ObjectStoreError) as info:
            store.restore("a", ids=ids)
        assert not isinstance(info.value, ObjectNotFoundError)
        assert_clear(str(info.value), op="S3 get")
        assert catalog_snapshot(store) == before
        hot = store.engine.hot.ensure("a")
        assert not set(ids) & set(hot.slot_of)
        assert {store.get("a", i).tier for i in ids} == {"cold"}
        proxy.clear()
        assert sorted(store.restore("a", ids=ids)) == sorted(ids)
        restore_all_and_check(store, expected)


# -- the background migrator ---------------------------------------------------------------------


@pytest.mark.slow
def test_background_migrator_backs_off_during_an_outage_and_completes_after(
    tmp_path, rng, moto_server, s3_bucket, proxy
):
    clock = ManualClock(T0)
    store = open_store(tmp_path / "s", clock, proxy.url, s3_bucket, max_attempts=1)
    try:
        expected = seed(store, rng)
        clock.advance(2 * HOUR)
        proxy.set_fault("503")
        starts: list[float] = []
        ends: list[float] = []
        engine = store.engine
        sweep = engine.sweep

        def timed_sweep(**kwargs):
            starts.append(time.monotonic())
            try:
                return sweep(**kwargs)
            finally:
                ends.append(time.monotonic())

        engine.sweep = timed_sweep  # type: ignore[method-assign]  # the migrator calls the engine's sweep
        interval = 0.05
        store.start_migrator(interval_s=interval, max_items=1000, time_budget_s=5.0)
        deadline = time.monotonic() + 30
        while len(ends) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(ends) >= 5, "the background migrator did not run"
        failed = len(ends)
        assert store.stats().by_tier["cold"] == 0
        check_nothing_lost(store, expected)
        proxy.clear()
        deadline = time.monotonic() + 60
        while store.stats().by_tier["cold"] < CONVERSATIONS and time.monotonic() < deadline:
            time.sleep(0.05)
        store.stop_migrator()
        errors = list(store.engine.migrator.background_errors)
        assert len(errors) >= failed - 1 >= 4
        for e in errors:
            assert_clear(e)
            assert "503" in e
        # Backoff: the pause after the i-th failed sweep is the interval doubled i times
        # (lower bounds only: a wait never ends early).
        for i in range(4):
            assert starts[i + 1] - ends[i] >= 0.9 * interval * 2 ** (i + 1)
        assert store.stats().by_tier == {"hot": 4, "warm": 0, "cold": CONVERSATIONS}
        check_nothing_lost(store, expected)
        assert store.engine.catalog.query("SELECT count(*) FROM archives WHERE state = 'pending'")[0][0] == 0
        restore_all_and_check(store, expected)
    finally:
        store.close()


# -- the S3 server restarted: its objects are gone ------------------------------------------------


@pytest.mark.slow
def test_s3_server_down_then_restarted_without_its_data(tmp_path, rng, private_moto):
    server = private_moto
    bucket = "restart-test"
    server.client().create_bucket(Bucket=bucket)
    clock = ManualClock(T0)
    store = open_store(tmp_path / "s", clock, server.endpoint_url, bucket, max_attempts=2)
    try:
        expected = seed(store, rng)
        clock.advance(2 * HOUR)
        assert store.sweep().archived == CONVERSATIONS  # batch 1: lost with the server later
        lost_ids = {mid for mid in expected if "-c" in mid}
        more = {}
        for i in range(5):
            mid = store.add("b", f"b late chat {i}", unit(rng), memory_type="conversation", id=f"b-late{i}")
            more[mid] = ("b", f"b late chat {i}", store.get("b", mid).embedding.tobytes())
        expected.update(more)
        clock.advance(2 * HOUR)

        server.stop()
        report = store.sweep()  # the server is down
        assert report.archived == 0 and report.errors
        assert "Could not connect" in report.errors[0]
        assert_clear(report.errors[0], op="put_if_absent")
        before = catalog_snapshot(store)
        with pytest.raises(ObjectStoreError) as info:
            store.restore("a", ids=["a-c1"])
        assert_clear(str(info.value), op="S3 get")
        assert catalog_snapshot(store) == before
        check_nothing_lost(store, expected)

        server.start()  # back, but empty: moto keeps its state in memory
        try:
            report = store.sweep()
        except ObjectStoreError as exc:  # the pending batch is retried first
            message = str(exc)
        else:
            assert report.archived == 0 and report.errors
            message = report.errors[0]
        assert "NoSuchBucket" in message
        assert_clear(message)
        assert catalog_snapshot(store) == before

        server.client().create_bucket(Bucket=bucket)
        report = store.sweep()
        assert report.errors == [] and report.archived == 5  # the pending batch, finished
        assert sorted(store.restore("b", ids=list(more))) == sorted(more)
        for mid, (ns, _content, emb) in more.items():
            assert store.get(ns, mid).embedding.tobytes() == emb

        # Batch 1 died with the server: restoring it is a clear error naming the key,
        # and the catalog keeps the memories (content and metadata) as they were.
        before = catalog_snapshot(store)
        with pytest.raises(ObjectNotFoundError) as info:
            store.restore("a", ids=["a-c1"])
        assert "missing" in str(info.value)
        assert_clear(str(info.value))
        assert catalog_snapshot(store) == before
        for mid in lost_ids:
            ns, content, _ = expected[mid]
            m = store.get(ns, mid)
            assert m.tier == "cold" and m.content == content
        # the rest of the store is intact
        assert store.sweep().errors == []
        for mid in set(expected) - lost_ids:
            ns, content, emb = expected[mid]
            m = store.get(ns, mid)
            assert m.content == content and m.embedding.tobytes() == emb
    finally:
        store.close()

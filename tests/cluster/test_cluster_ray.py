"""tierstore.cluster on a local Ray cluster with moto's S3 server on loopback.

One Ray instance and one cluster for the module (starting Ray and shard
processes is most of the time); the tests run in file order on it:

1. 4 shards, 400 namespaces, a bounded mixed load from 8 threads; one shard's
   process is SIGKILLed mid-load. Every acknowledged write is readable after,
   nothing is duplicated, the untouched namespaces' top-5 are unchanged, and
   only the dead shard's slots moved.
2. Scale-up from the 3 survivors to 4: only the slots rendezvous hashing gives
   the new shard move, and their data comes along.
3. A zombie: a shard paused (SIGSTOP) is declared dead, its slots are taken
   over; resumed (SIGCONT) after longer than the read-fencing bound, every
   read it is asked for refuses (its lease check finds the lease moved) and
   every write it still tries is rejected (the log's 412, FencedError); none
   lands, and it serves those slots no more.

And at the end: a failover held mid-way (a hook) stalls only the calls to
the slots that move; a call's deadline.

Wall-clock limits are not asserted (the failover time is measured by
benchmarks/cluster.py); waits have generous timeouts.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("boto3")

from tierstore.cluster import Cluster, FencedError, NotOwnerError  # noqa: E402
from tierstore.errors import InvalidInputError  # noqa: E402
from tierstore.records import SweepReport  # noqa: E402

# one Ray cluster for the module, its tests in file order on it: all slow (Ray and the shards take seconds to start)
pytestmark = pytest.mark.slow

DIM = 16
NAMESPACES = [f"user-{i:03d}" for i in range(400)]
PER_NS = 4
SLOTS = 64
LEASE_CHECK_S = 1.0  # the read-fencing bound: the zombie below is paused for longer (3 s of pings at least)


def _vec(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(DIM).astype(np.float32)


@pytest.fixture(scope="module")
def cluster(moto_server, tmp_path_factory):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    client = moto_server.client()
    bucket = f"ts-cluster-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="tierstore-test")
    c = None
    try:
        c = Cluster(
            bucket=bucket,
            s3_options={"endpoint_url": moto_server.endpoint_url, "region_name": "us-east-1"},
            dim=DIM,
            shards=4,
            num_slots=SLOTS,
            root=str(tmp_path_factory.mktemp("shards")),
            name="tierstore-test",
            call_timeout_s=20.0,
            lease_check_s=LEASE_CHECK_S,
            snapshot_every=5,
            takeover_threads=2,
        )  # small, so that takeovers start from a snapshot and replay a tail
        yield c
    finally:
        if c is not None:
            for name in c.shards:
                ray.kill(c.handle(name))
        for handle in _extra_handles.values():
            ray.kill(handle)
        ray.shutdown()


_extra_handles: dict[str, object] = {}  # shards taken out of the cluster, killed at the end
_state: dict[str, object] = {}  # what one test leaves for the next


def test_failover_loses_no_acknowledged_write(cluster: Cluster) -> None:
    assert len(cluster.shards) == 4
    rng = np.random.default_rng(11)
    base = {ns: [{"content": f"{ns} base {j}", "embedding": _vec(rng)} for j in range(PER_NS)] for ns in NAMESPACES}
    queries = {ns: _vec(rng) for ns in NAMESPACES}

    def load_base(part: list[str]) -> None:
        for ns in part:
            cluster.add_batch(ns, base[ns])

    threads = [threading.Thread(target=load_base, args=(NAMESPACES[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    top5_before = {ns: [h.memory.id for h in cluster.search(ns, queries[ns], k=5)] for ns in NAMESPACES}

    table_before = cluster.slot_table()
    victim = "shard-1"
    victim_slots = {s for s, owner in table_before.items() if owner == victim}
    assert victim_slots
    # a listing paged across the failover: its first page read from the victim, the rest from the new owner
    paged = [ns for ns in NAMESPACES[200:] if cluster.slot_of(ns) in victim_slots][:5]
    first_pages = {ns: cluster.memories_page(ns, limit=max(1, PER_NS // 2)) for ns in paged}
    assert paged and all(cursor is not None for _, cursor in first_pages.values())
    victim_pid = cluster.shard_pids()[victim]

    written = NAMESPACES[:200]  # the load writes these; the other 200 must keep their top-5
    acked: list[tuple[str, str, str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    killed = threading.Event()
    writes_per_thread = 30

    def worker(w: int) -> None:
        r = random.Random(w)
        g = np.random.default_rng(100 + w)
        try:
            for i in range(writes_per_thread):
                ns = r.choice(written)
                content = f"{ns} load {w} {i}"
                mid = cluster.add(ns, content, _vec(g), tags=["load"])
                with lock:
                    acked.append((ns, mid, content))
                    if len(acked) == 90 and not killed.is_set():
                        os.kill(victim_pid, signal.SIGKILL)
                        killed.set()
                cluster.search(r.choice(NAMESPACES), _vec(g), k=5)
                cluster.get(ns, mid)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:3]
    assert killed.is_set() and len(acked) == 8 * writes_per_thread

    # the dead shard is out, and only its slots moved
    assert victim not in cluster.shards and len(cluster.shards) == 3
    table_after = cluster.slot_table()
    assert {s for s in table_before if table_before[s] != table_after[s]} == victim_slots
    assert [f["shard"] for f in cluster.failovers] == [victim]

    # every acknowledged write is readable, and none is there twice
    for ns, mid, content in acked:
        m = cluster.get(ns, mid)
        assert m is not None and m.content == content, (ns, mid)
    expected: dict[str, int] = {}
    for ns, _, _ in acked:
        expected[ns] = expected.get(ns, 0) + 1
    for ns in written:
        contents = [m.content for m in cluster.memories(ns)]
        assert len(contents) == len(set(contents)), ns
        assert len(contents) == PER_NS + expected.get(ns, 0), ns
    # the counts over all shards: every memory once, in every namespace
    stats = cluster.stats()
    assert stats.total == PER_NS * len(NAMESPACES) + len(acked) and stats.namespaces == len(NAMESPACES)
    assert sum(stats.by_tier.values()) == stats.total

    # a cursor taken before the failover goes on where it stopped: every memory once, in order
    for ns, (page, cursor) in first_pages.items():
        listed = [m.id for m in page]
        while cursor is not None:
            more, cursor = cluster.memories_page(ns, after=cursor, limit=max(1, PER_NS // 2))
            listed += [m.id for m in more]
        assert listed == [m.id for m in cluster.memories(ns)], ns

    # the namespaces the load did not write keep their top-5, on whichever shard they are now
    moved_untouched = 0
    for ns in NAMESPACES[200:]:
        assert [h.memory.id for h in cluster.search(ns, queries[ns], k=5)] == top5_before[ns], ns
        moved_untouched += cluster.slot_of(ns) in victim_slots
    assert moved_untouched > 0  # the check covered replayed slots, not only untouched shards
    counters = cluster.counters().values()
    assert sum(c["snapshots"] for c in counters) > 0 and not any(c["snapshot_errors"] for c in counters)
    assert sum(c["replayed"] for c in counters) > 0
    _state.update(acked=acked, queries=queries, top5_before=top5_before)


def test_scale_up_moves_only_the_new_shards_slots(cluster: Cluster) -> None:
    assert len(cluster.shards) == 3
    before = cluster.slot_table()
    counts_before = {ns: len(cluster.memories(ns)) for ns in NAMESPACES[::7]}
    new = cluster.add_shard()
    after = cluster.slot_table()
    moved = {s for s in before if before[s] != after[s]}
    assert moved and all(after[s] == new for s in moved)
    assert set(ray.get(cluster.handle(new).owned.remote())) == moved
    for name in cluster.shards:  # every shard owns exactly what the table says
        assert set(ray.get(cluster.handle(name).owned.remote())) == {s for s, o in after.items() if o == name}
    assert {ns: len(cluster.memories(ns)) for ns in NAMESPACES[::7]} == counts_before
    for ns, mid, content in _state["acked"]:
        if cluster.slot_of(ns) in moved:
            assert cluster.get(ns, mid).content == content
    top5_before, queries = _state["top5_before"], _state["queries"]
    for ns in NAMESPACES[200:]:
        if cluster.slot_of(ns) in moved:
            assert [h.memory.id for h in cluster.search(ns, queries[ns], k=5)] == top5_before[ns], ns


def test_zombie_owner_is_fenced(cluster: Cluster) -> None:
    assert len(cluster.shards) == 4
    zombie = cluster.shards[0]
    handle = cluster.handle(zombie)
    slots = sorted(s for s, owner in cluster.slot_table().items() if owner == zombie)
    by_slot = {}
    for ns in NAMESPACES:
        by_slot.setdefault(cluster.slot_of(ns), ns)
    targets = [(s, by_slot[s]) for s in slots if s in by_slot]
    assert targets
    pid = cluster.shard_pids()[zombie]
    os.kill(pid, signal.SIGSTOP)
    try:
        assert cluster.check_shards(timeout_s=8.0, kill=False) == [
            zombie
        ]  # kept alive: a node cut off (8 s: ample for a live shard under load)
    finally:
        os.kill(pid, signal.SIGCONT)
    _extra_handles[zombie] = handle
    assert zombie not in cluster.shards
    rng = np.random.default_rng(5)
    # the new owners serve the slots, and take writes
    for s, ns in targets:
        assert cluster.slot_table()[s] != zombie
        cluster.add(ns, f"{ns} after the move", _vec(rng))
    # the zombie, resumed, still believes it owns them. Its last confirmation of
    # each lease is older than the bound (it was paused for longer): a read makes
    # it check, find the lease moved and refuse; a write is refused by the log
    reads_first, writes_first = targets[::2], targets[1::2]
    for s, ns in reads_first:
        with pytest.raises(ray.exceptions.RayTaskError) as info:
            ray.get(handle.read.remote(s, "memories", ns, [], {}), timeout=60)
        # FencedError from this read's lease check (or plain NotOwnerError if a
        # background re-check begun before the pause found it first)
        assert isinstance(info.value.cause, NotOwnerError), info.value.cause
    for s, ns in writes_first:
        ref = handle.write.remote(s, uuid.uuid4().hex, "add", ns, [f"{ns} zombie write", _vec(rng)], {})
        with pytest.raises(ray.exceptions.RayTaskError) as info:
            ray.get(ref, timeout=60)
        assert isinstance(info.value.cause, FencedError), info.value.cause
    # ... and it stops serving them, reads and writes alike: each dropped as lost, not released
    assert set(ray.get(handle.owned.remote(), timeout=60)).isdisjoint(s for s, _ in targets)
    assert {s for s, _ in targets} <= set(ray.get(handle.counters.remote(), timeout=60)["lost"])
    for s, ns in targets:
        with pytest.raises(ray.exceptions.RayTaskError) as info:
            ray.get(handle.read.remote(s, "get", ns, ["any-id"], {}), timeout=60)
        assert isinstance(info.value.cause, NotOwnerError)
        with pytest.raises(ray.exceptions.RayTaskError) as info:
            ray.get(handle.write.remote(s, uuid.uuid4().hex, "add", ns, ["late", _vec(rng)], {}), timeout=60)
        assert isinstance(info.value.cause, NotOwnerError)
    # none of its writes landed: the owners' state (rebuilt from the bucket) has none
    for _s, ns in targets:
        contents = [m.content for m in cluster.memories(ns)]
        assert f"{ns} after the move" in contents
        assert not any("zombie" in c for c in contents)
    ray.kill(handle)
    _extra_handles.pop(zombie)


def test_a_second_router_finds_the_running_shards(cluster: Cluster) -> None:
    from tierstore.errors import StoreConfigError

    deadline = time.monotonic() + 30
    while "tierstore-shard-0" in {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}:
        assert time.monotonic() < deadline, "the killed zombie's name lingers"
        time.sleep(0.2)
    other = Cluster(name="tierstore-test")  # Ray is up: it connects, finds the shards, reads their settings
    assert other.shards == cluster.shards and other.dim == DIM and other.num_slots == SLOTS
    assert other.slot_table() == cluster.slot_table()
    assert all(ray.get(cluster.handle(n).info.remote())["takeover_threads"] == 2 for n in cluster.shards)
    for ns, mid, content in _state["acked"][:50]:
        assert other.get(ns, mid).content == content
    mid = other.add("second-router", "from the second router", np.ones(DIM, np.float32))
    assert cluster.get("second-router", mid).content == "from the second router"
    with pytest.raises(StoreConfigError):
        Cluster(name="tierstore-test", dim=DIM + 1)


def test_http_api_serves_the_cluster(cluster: Cluster) -> None:
    """What ``tierstore serve --cluster ADDRESS`` serves: the HTTP app over a Cluster."""
    pytest.importorskip("uvicorn")
    from tierstore.errors import InvalidNamespaceError, MemoryNotFoundError
    from tierstore.remote.client import RemoteStore
    from tierstore.remote.server.app import build_app
    from tierstore.testing.live_server import ThreadedServer

    rng = np.random.default_rng(21)
    with ThreadedServer(build_app(cluster, tokens=None)) as url:
        remote = RemoteStore(url)
        assert remote.dim == DIM
        v = _vec(rng)
        mid = remote.add("http-ns", "over http", v, tags=["web"])
        assert remote.get("http-ns", mid).content == "over http"
        assert cluster.get("http-ns", mid).content == "over http"  # the same cluster
        assert remote.search("http-ns", v, k=1)[0].memory.id == mid
        assert "http-ns" in remote.namespaces()
        assert [m.id for m in remote.memories("http-ns")] == [m.id for m in cluster.memories("http-ns")] == [mid]
        with pytest.raises(MemoryNotFoundError):
            remote.touch("http-ns", ["no-such-id"])
        with pytest.raises(InvalidNamespaceError):
            remote.add("bad namespace!", "x", v)
        assert remote.delete("http-ns", mid) is True
        assert remote.get("http-ns", mid) is None
        assert 'tierstore_cluster_acked_writes_total{shard="' in remote.metrics_text()
        # an access is recorded only when asked, as a logged touch
        other = remote.add("http-ns", "read me", v)
        remote.search("http-ns", v, k=1)
        assert cluster.get("http-ns", other).access_count == 0
        cluster.search("http-ns", v, k=1, record_access=True)
        assert cluster.get("http-ns", other).access_count == 1
        # a sweep over HTTP (the server always gives a time budget): every slot, or the rest next time
        report = remote.sweep(max_items=100)
        assert report.errors == [] and report.examined >= 0
        # stats() as for a store (lifecycle=True, TierStore's default): the summed counts, no lifecycle metrics
        stats = remote.stats()
        assert stats.total == cluster.stats().total > 0 and stats.lifecycle == {}
        remote.close()


def test_serve_cli_serves_the_named_cluster(cluster: Cluster, tmp_path, capsys) -> None:
    """``tierstore serve --cluster ADDRESS --cluster-name NAME`` end to end, in
    this process: the CLI's argument handling, the server's start (tokens,
    binding, the Cluster found by name), requests over HTTP, and a graceful
    stop on SIGTERM. main() runs in the main thread (it installs the signal
    handlers); a helper thread is the client and sends the SIGTERM."""
    pytest.importorskip("uvicorn")
    import socket

    from tierstore.errors import AuthError
    from tierstore.remote.client import RemoteStore
    from tierstore.tools.cli import main

    token = "cli-test-token-0123456789abcdef"
    token_file = tmp_path / "tokens"
    token_file.write_text(f"{token}\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    common = ["--cluster", "auto", "--port", str(port), "--token-file", str(token_file), "--graceful-timeout", "5"]
    # a name no cluster was started under: a clear error, nothing served
    assert main(["serve", *common, "--cluster-name", "no-such-cluster"]) == 2
    assert "no shard of the cluster 'no-such-cluster'" in capsys.readouterr().err
    assert main(["serve", *common, "--cluster-name", "bad name!"]) == 2
    assert "name must be" in capsys.readouterr().err

    url = f"http://127.0.0.1:{port}"
    outcome: dict[str, object] = {}
    mid = cluster.add("cli-ns", "written directly", np.ones(DIM, np.float32))

    def client() -> None:
        import urllib.request

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            outcome["error"] = "the server never answered /health"
            return  # no SIGTERM: main() is not serving (it returns, or the test times out)
        try:
            remote = RemoteStore(url, token=token)
            assert remote.dim == DIM
            assert remote.get("cli-ns", mid).content == "written directly"  # the cluster named, not another
            new = remote.add("cli-ns", "over the CLI's server", np.full(DIM, 0.5, np.float32))
            assert cluster.get("cli-ns", new).content == "over the CLI's server"
            assert "cli-ns" in remote.namespaces()
            assert remote.migrator_running  # the served cluster's router sweeps, as a served store does
            remote.close()
            try:
                RemoteStore(url, token="wrong-token-0123456789abcdef").get("cli-ns", mid)
                outcome["error"] = "a wrong token was served"
            except AuthError:
                pass
            outcome["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome["error"] = exc
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # main()'s handler: a graceful stop

    helper = threading.Thread(target=client)
    helper.start()
    try:
        code = main(["serve", *common, "--cluster-name", "tierstore-test"])
    finally:
        helper.join(timeout=90)
    assert outcome.get("ok"), outcome.get("error")
    assert code == 0
    out = capsys.readouterr().out
    assert f"serving cluster 'tierstore-test' at auto at http://127.0.0.1:{port}" in out
    assert cluster.shards and cluster.get("cli-ns", mid) is not None  # the shards outlive the server


def _words_embedder(texts: list[str]) -> np.ndarray:
    """A tiny deterministic embedder: each word adds a fixed random direction."""
    out = np.zeros((len(texts), DIM), np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i] += np.random.default_rng(int.from_bytes(word.encode()[:8].ljust(8, b"_"), "little")).standard_normal(
                DIM
            )
    return out


_words_embedder.dim = DIM  # type: ignore[attr-defined]
_words_embedder.name = "words-test"  # type: ignore[attr-defined]


def test_verify_repair_compact_and_dry_run_sweep_over_the_cluster(cluster: Cluster) -> None:
    from tierstore.core.integrity import IntegrityReport

    report = cluster.verify()
    assert isinstance(report, IntegrityReport) and report.ok, report.problems[:3]
    assert sum(report.checked.values()) > 0
    commits = sum(c["commits"] for c in cluster.counters().values())
    preview = cluster.sweep(dry_run=True, max_items=100)
    assert preview.dry_run and preview.errors == []
    assert sum(c["commits"] for c in cluster.counters().values()) == commits  # a dry run logs nothing
    with pytest.raises(InvalidInputError):
        cluster.sweep(dry_run="yes")
    assert cluster.compact_cold() == 0  # nothing archived in this cluster's slots
    repaired = cluster.repair()
    assert repaired.ok and repaired.repaired == []
    # each was logged per slot (a replay does the same), one record each
    assert sum(c["commits"] for c in cluster.counters().values()) == commits + 2 * SLOTS


def test_a_router_with_an_embedder_takes_text(cluster: Cluster) -> None:
    from tierstore.errors import StoreConfigError

    text_router = Cluster(name="tierstore-test", embedder=_words_embedder)
    assert text_router.embedder is not None and text_router.embedder.dim == DIM
    a = text_router.add("text-ns", "alice lives in tokyo")
    b = text_router.add("text-ns", "bob likes green tea", "bob likes tea")  # the embedding given as a text
    c, d = text_router.add_batch(
        "text-ns",
        [
            {"content": "carol plays the violin"},
            {"content": "dave rides a bicycle", "embedding": _vec(np.random.default_rng(1))},
        ],
    )
    hits = text_router.search("text-ns", "where does alice live tokyo", k=1)
    assert hits[0].memory.id == a
    assert text_router.search("text-ns", "bob tea", k=1)[0].memory.id == b
    # the log holds vectors: the router without an embedder reads the same memories, and searches by vector
    logged = next(m for m in cluster.memories("text-ns", with_embedding=True) if m.id == c)
    expected = _words_embedder(["carol plays the violin"])[0]
    assert np.allclose(logged.embedding, expected / np.linalg.norm(expected), atol=1e-5)
    assert {m.id for m in cluster.memories("text-ns")} == {a, b, c, d}
    with pytest.raises(InvalidInputError):  # no embedder here: text is refused, before any call
        cluster.search("text-ns", "alice", k=1)
    with pytest.raises(InvalidInputError):
        cluster.add("text-ns", "no vector")

    def other_dim(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), DIM + 1), np.float32)

    with pytest.raises(StoreConfigError):
        Cluster(name="tierstore-test", embedder=other_dim)


def test_background_sweeps_over_the_cluster(cluster: Cluster) -> None:
    """start_migrator sweeps from the router; on a cluster with nothing due
    its passes only ask each slot (reads), so they log nothing."""
    with pytest.raises(InvalidInputError):
        cluster.start_migrator(interval_s=0)
    with pytest.raises(InvalidInputError):
        cluster.start_migrator(max_items=0)
    passes: list[SweepReport] = []
    plain = cluster._sweep_slots

    def counted(*args: Any, **kwargs: Any) -> SweepReport:
        report = plain(*args, **kwargs)
        passes.append(report)
        return report

    cluster._sweep_slots = counted  # type: ignore[method-assign]
    try:
        cluster.start_migrator(interval_s=0.2, max_items=50, time_budget_s=5.0)
        deadline = time.monotonic() + 60
        while len(passes) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster.stop_migrator()
        assert len(passes) >= 2 and all(not p.dry_run and p.errors == [] for p in passes)
        n = len(passes)
        time.sleep(0.5)
        assert len(passes) == n  # stopped
        assert cluster.background_errors == []
        # once nothing is due (earlier tests may have left a memory due), a pass writes nothing
        cluster._sweep_due(50, 5.0)
        commits = sum(c["commits"] for c in cluster.counters().values())
        idle = cluster._sweep_due(50, 5.0)
        assert idle.examined == 0 and idle.remaining_due == 0
        assert sum(c["commits"] for c in cluster.counters().values()) == commits
    finally:
        cluster.stop_migrator()
        cluster._sweep_slots = plain  # type: ignore[method-assign]


def test_a_second_cluster_name_on_the_bucket_is_refused(cluster: Cluster) -> None:
    """The cluster's prefix is claimed for its name (cluster.json): a cluster
    of another name started on it is refused before any shard of it starts,
    and the first cluster's memories stay its own."""
    from tierstore.cluster.identity import read_identity
    from tierstore.errors import StoreConfigError

    assert read_identity(cluster._bucket.open()).name == "tierstore-test"
    mid = cluster.add("claimed-ns", "kept by its cluster", np.ones(DIM, np.float32))
    with pytest.raises(StoreConfigError, match="holds the slots of the cluster 'tierstore-test'"):
        Cluster(bucket=cluster._bucket, name="intruder", dim=DIM, shards=1, num_slots=SLOTS)
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == "intruder"]
    assert cluster.get("claimed-ns", mid).content == "kept by its cluster"
    elsewhere = dataclasses.replace(cluster._bucket, prefix="elsewhere")
    with pytest.raises(StoreConfigError, match="leave bucket= out to join it"):  # the running one, another prefix
        Cluster(bucket=elsewhere, name="tierstore-test")


def _serve_cluster(address: str, env: dict[str, str]) -> subprocess.Popen:
    from server_process import child_env

    full = {k: v for k, v in child_env(**env).items() if k != "RAY_AUTH_MODE" or "RAY_AUTH_MODE" in env}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tierstore.tools.cli",
            "serve",
            "--cluster",
            address,
            "--cluster-name",
            "tierstore-test",
            "--port",
            "0",
            "--no-migrator",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
    )


def test_serve_joins_the_cluster_at_its_address_with_the_local_token(cluster: Cluster) -> None:
    """``tierstore serve --cluster HOST:PORT`` from another process (a fresh
    shell: no RAY_AUTH_MODE) joins a Ray started by ray.init()/Cluster() on
    this machine, whose token auth Ray turned on; told to send no token, it
    fails with a message saying what to set."""
    from server_process import TOKEN

    from tierstore.remote.client import RemoteStore

    address = cluster.ray_address
    assert re.fullmatch(r"[^:]+:\d+", address)
    proc = _serve_cluster(address, {})
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving cluster 'tierstore-test' at {address} at http://"), proc.stderr.read()
        url = line.split(" at ")[2].split()[0]
        remote = RemoteStore(url, token=TOKEN)
        assert remote.dim == DIM and remote.stats().total == cluster.stats().total
        remote.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    # RAY_NUM_REDIS_GET_RETRIES: Ray's connection attempts (20 by default, one a second)
    refused = _serve_cluster(address, {"RAY_AUTH_MODE": "disabled", "RAY_NUM_REDIS_GET_RETRIES": "2"})
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2 and out == ""
    assert f"tierstore serve: the Ray cluster at {address} wants its authentication token" in err
    assert "set RAY_AUTH_MODE=token" in err


def test_a_failover_stalls_only_the_slots_that_move(cluster: Cluster) -> None:
    """A shard dies and its takeover is held (the router's failover hook
    blocks, holding the placement, until released): meanwhile calls to
    namespaces on the live shards are answered, reads and writes alike; a call
    to a moved namespace waits, and with a small deadline raises
    DeadlineExceededError naming the slot move; released, the moved
    namespaces are served with everything they had."""
    from tierstore.cluster import DeadlineExceededError

    shards_before = len(cluster.shards)
    victim = cluster.shards[-1]
    table = cluster.slot_table()
    moved_ns = [ns for ns in NAMESPACES if table[cluster.slot_of(ns)] == victim][:8]
    live_ns = [ns for ns in NAMESPACES if table[cluster.slot_of(ns)] != victim][:24]
    assert len(moved_ns) >= 2 and live_ns
    counts = {ns: len(cluster.memories(ns)) for ns in moved_ns + live_ns}
    entered, release = threading.Event(), threading.Event()

    def hold(shard: str) -> None:
        assert shard == victim
        entered.set()
        release.wait(120)  # a router that waits for it fails the test after this, not hangs

    cluster._failover_hook = hold
    first: dict[str, Any] = {}

    def meet_the_dead_shard() -> None:  # meets the dead actor, starts the failover, waits for the slot's new owner
        try:
            first["memories"] = cluster.memories(moved_ns[0])
        except BaseException as exc:  # noqa: BLE001 - asserted below
            first["error"] = exc

    waiter = threading.Thread(target=meet_the_dead_shard)
    try:
        ray.kill(cluster.handle(victim), no_restart=True)
        waiter.start()
        assert entered.wait(120), "no failover started"
        assert victim not in cluster.shards and cluster.failovers[-1]["seconds"] is None  # under way, held
        rng = np.random.default_rng(31)
        for ns in live_ns:  # the live shards' namespaces answer while it is held
            assert len(cluster.memories(ns, deadline_s=60)) == counts[ns], ns
            assert len(cluster.search(ns, _vec(rng), k=3, deadline_s=60)) == min(3, counts[ns])
        mid = cluster.add(live_ns[0], "written during a failover", _vec(rng), deadline_s=60)
        counts[live_ns[0]] += 1
        for ns in moved_ns[1:3]:
            with pytest.raises(DeadlineExceededError) as info:
                cluster.get(ns, "any-id", deadline_s=0.3)
            assert info.value.waiting_for == "slot move" and info.value.slot == cluster.slot_of(ns)
            assert "deadline of 0.3 s exceeded" in str(info.value) and "moving" in str(info.value)
        assert waiter.is_alive() and not release.is_set()  # everything above happened while it was held
    finally:
        release.set()
        waiter.join(120)
        cluster._failover_hook = None
    assert "error" not in first, first.get("error")
    assert len(first["memories"]) == counts[moved_ns[0]]
    assert {ns: len(cluster.memories(ns)) for ns in moved_ns + live_ns} == counts
    assert cluster.get(live_ns[0], mid).content == "written during a failover"
    assert cluster.failovers[-1]["shard"] == victim and "error" not in cluster.failovers[-1]
    assert all(owner != victim for owner in cluster.slot_table().values())
    cluster.add_shard()  # back to as many shards as before
    assert len(cluster.shards) == shards_before


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True, [1]])
def test_a_calls_deadline_must_be_a_positive_finite_number(cluster: Cluster, bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="deadline_s must be a positive, finite number of seconds"):
        cluster.get("user-000", "any-id", deadline_s=bad)
    with pytest.raises(InvalidInputError, match="deadline_s"):
        cluster.add("user-000", "never written", np.ones(DIM, np.float32), deadline_s=bad)

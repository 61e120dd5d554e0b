"""tierstore.cluster on one machine: failover time, per-call overhead over the
embedded store, and S3 PUTs per acknowledged write (issue 19); what a
failover under load stalls (issue 31).

    .venv/bin/python benchmarks/cluster.py                # the figures in docs/benchmarks.md
    .venv/bin/python benchmarks/cluster.py --quick        # smaller, for a smoke run
    .venv/bin/python benchmarks/cluster.py --only failover-load --failover-runs 3   # issue 31's figures

Starts moto's standalone server on a free loopback port (the tests' fixture
class) and a local Ray (``num_cpus=2``), then:

1. **Failover**: ``--shards`` shards, ``--per-shard`` namespaces per shard on
   average (``--memories`` each). One shard's process is SIGKILLed; the clock
   runs from the kill until every namespace it owned answered a read again
   (the first read meets the dead actor, the router fails it over: the
   survivors take its slots' leases, download the newest snapshots, replay the
   log tails, fence). Then every acknowledged write is read back (lost count),
   and a zombie (a shard SIGSTOPped, declared dead, SIGCONTed) answers one read
   for every other slot it had (answered count: the read fencing) and tries one
   write per slot it had (accepted count).
2. **Per-call overhead**: one namespace of ``--memories`` memories loaded
   into an embedded TierStore and into the cluster; ``--samples`` rounds,
   interleaved, of the same ``search`` (k=5) and ``get`` on each; p50 of each
   and of the per-round difference.
3. **PUTs per acknowledged write**: a mixed load (8 threads, 30 % adds, 70 %
   searches) over all namespaces, and again over 4 namespaces (concurrent
   writers meet in the same slot, so group commits are shared); then both
   again with 50 ms added before every PUT (what a remote store costs; on
   loopback a PUT is over before a second writer arrives), and 8 threads
   writing only, to one namespace, with the 50 ms (the most sharing). Counts every PUT
   the shards sent (log appends, snapshots, leases, fences) and the log
   appends alone.
4. **Failover under load** (issue 31; ``--failover-runs`` times, each on a
   fresh cluster of ``--load-shards`` shards, ``--per-shard`` namespaces per
   shard of ``--memories`` each): ``--load-threads`` threads search
   (k=5) the namespaces of the shards that will live, back to back, for
   ``--before-s`` seconds; then one shard is SIGKILLed and one prober per
   slot it owned searches one of that slot's namespaces until answered. The
   live namespaces' search latency p50/p99 before the kill and during the
   failover (the calls overlapping the span from the kill until every moved
   slot answered), their ratio, and when the moved namespaces were served
   again (the first, the median and the last slot), seconds from the kill.
   The script uses only the API that main had before issue 31, so it
   measures the code before and after side by side (``PYTHONPATH`` at a
   copy of the older ``tierstore``: ``code`` says which one the shards ran).

moto answers on loopback in about a millisecond: the timings say what the
code costs, not what S3 would (a real PUT is 20-200 ms, which is what group
commit amortises).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from s3_fixtures import _AWS_ENV, MotoServer, _free_port  # noqa: E402

from tierstore import TierStore  # noqa: E402

DIM = 64


def _vec(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(DIM).astype(np.float32)


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def failover(cluster, args, rng) -> dict:
    namespaces = [f"user-{i:04d}" for i in range(args.shards * args.per_shard)]
    acked: list[tuple[str, str]] = []
    lock = threading.Lock()

    def load(part: list[str]) -> None:
        g = np.random.default_rng(hash(part[0]) & 0xFFFF)
        for ns in part:
            ids = cluster.add_batch(ns, [{"content": f"{ns} {j}", "embedding": _vec(g)} for j in range(args.memories)])
            with lock:
                acked.extend((ns, i) for i in ids)

    threads = [threading.Thread(target=load, args=(namespaces[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    victim = cluster.shards[1]
    victim_ns = [ns for ns in namespaces if cluster.owner_of(ns) == victim]
    pid = cluster.shard_pids()[victim]
    os.kill(pid, signal.SIGKILL)
    t0 = time.perf_counter()
    first = None
    for ns in victim_ns:
        cluster.get(ns, "no-such-id")  # a read that must reach the slot's (new) owner
        if first is None:
            first = time.perf_counter() - t0
    served = time.perf_counter() - t0
    lost = sum(1 for ns, mid in acked if cluster.get(ns, mid) is None)
    out = {
        "shards": args.shards,
        "namespaces": len(namespaces),
        "memories_per_ns": args.memories,
        "victim_namespaces": len(victim_ns),
        "victim_slots": cluster.failovers[-1]["slots"],
        "served_again_s": round(served, 3),
        "first_read_s": round(first or 0.0, 3),
        "router_failover_s": round(cluster.failovers[-1]["seconds"], 3),
        "acked_writes": len(acked),
        "acked_lost": lost,
    }
    # a zombie: paused, declared dead, resumed; every write it tries must be refused
    zombie = cluster.shards[0]
    handle = cluster.handle(zombie)
    zslots = sorted(s for s, o in cluster.slot_table().items() if o == zombie)
    zpid = cluster.shard_pids()[zombie]
    os.kill(zpid, signal.SIGSTOP)
    try:
        cluster.check_shards(timeout_s=3.0, kill=False)  # kept alive, as a node cut off from Ray would be
    finally:
        os.kill(zpid, signal.SIGCONT)
    import ray

    accepted = 0
    ns_of = {}
    for ns in namespaces:
        ns_of.setdefault(cluster.slot_of(ns), ns)
    # every other old slot is read first: paused past the read-fencing bound, it must refuse
    # (its lease check finds the lease moved); the rest meet the log's 412 on their write
    read_slots = [s for s in zslots if s in ns_of][::2]
    answered = 0
    for s in read_slots:
        try:
            ray.get(handle.read.remote(s, "memories", ns_of[s], [], {}), timeout=60)
            answered += 1
        except ray.exceptions.RayTaskError:
            pass
    for s in zslots:
        if s not in ns_of:
            continue
        try:
            ray.get(handle.write.remote(s, uuid.uuid4().hex, "add", ns_of[s], ["zombie", _vec(rng)], {}), timeout=60)
            accepted += 1
        except ray.exceptions.RayTaskError:
            pass
    ray.kill(handle)
    out.update(
        zombie_writes_tried=sum(1 for s in zslots if s in ns_of),
        zombie_writes_accepted=accepted,
        zombie_reads_tried=len(read_slots),
        zombie_reads_answered=answered,
    )
    return out


def overhead(cluster, args, rng, root: Path) -> dict:
    items = [{"content": f"memory {j}", "embedding": _vec(rng)} for j in range(args.memories)]
    store = TierStore.open(root / "embedded", dim=DIM)
    ids = store.add_batch("bench-ns", items)
    cids = cluster.add_batch("bench-ns", items)
    import ray

    from tierstore.cluster.records import pack

    owner = cluster.handle(cluster.owner_of("bench-ns"))
    slot = cluster.slot_of("bench-ns")
    emb_s, clu_s, diff_s, emb_g, clu_g, diff_g = [], [], [], [], [], []
    ping, direct = [], []
    for i in range(args.samples):
        q = _vec(rng)
        # the floor: an empty actor call; then the owner's read without the router
        t = time.perf_counter()
        ray.get(owner.ping.remote())
        ping.append(time.perf_counter() - t)
        t = time.perf_counter()
        packed = pack(["read", slot, "", "search", "bench-ns", [q], {"k": 5, "record_access": False}])
        ray.get(owner.call.remote(packed))
        direct.append(time.perf_counter() - t)
        t = time.perf_counter()
        store.search("bench-ns", q, k=5, record_access=False)
        a = time.perf_counter() - t
        t = time.perf_counter()
        cluster.search("bench-ns", q, k=5)
        b = time.perf_counter() - t
        emb_s.append(a), clu_s.append(b), diff_s.append(b - a)
        j = i % len(ids)
        t = time.perf_counter()
        store.get("bench-ns", ids[j])
        a = time.perf_counter() - t
        t = time.perf_counter()
        cluster.get("bench-ns", cids[j])
        b = time.perf_counter() - t
        emb_g.append(a), clu_g.append(b), diff_g.append(b - a)
    store.close()
    ms = lambda xs: round(1000 * statistics.median(xs), 3)  # noqa: E731
    return {
        "samples": args.samples,
        "memories": args.memories,
        "search_p50_ms": {
            "embedded": ms(emb_s),
            "cluster": ms(clu_s),
            "overhead": ms(diff_s),
            "actor_direct": ms(direct),
        },
        "ray_ping_p50_ms": ms(ping),
        "get_p50_ms": {"embedded": ms(emb_g), "cluster": ms(clu_g), "overhead": ms(diff_g)},
        "search_p99_ms": {"embedded": round(1000 * _p(emb_s, 0.99), 3), "cluster": round(1000 * _p(clu_s, 0.99), 3)},
    }


def puts_per_write(cluster, namespaces: list[str], ops: int, label: str, write_share: float = 0.3) -> dict:
    before = cluster.counters()
    acked = [0]
    lock = threading.Lock()

    def worker(w: int) -> None:
        r = random.Random(w)
        g = np.random.default_rng(1000 + w)
        for i in range(ops):
            ns = r.choice(namespaces)
            if r.random() < write_share:
                cluster.add(ns, f"{label} {w} {i}", _vec(g))
                with lock:
                    acked[0] += 1
            else:
                cluster.search(ns, _vec(g), k=5)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    after = cluster.counters()
    common = set(before) & set(after)
    puts = sum(after[n]["puts"] - before[n]["puts"] for n in common)
    commits = sum(after[n]["commits"] - before[n]["commits"] for n in common)
    snaps = sum(after[n]["snapshots"] - before[n]["snapshots"] for n in common)
    return {
        "namespaces": len(namespaces),
        "threads": 8,
        "calls": 8 * ops,
        "write_share": write_share,
        "acked_writes": acked[0],
        "puts": puts,
        "log_appends": commits,
        "snapshots": snaps,
        "puts_per_acked_write": round(puts / max(acked[0], 1), 3),
        "log_appends_per_acked_write": round(commits / max(acked[0], 1), 3),
        "calls_per_s": round(8 * ops / elapsed, 1),
    }


def _where() -> str:
    import tierstore.cluster.cluster as module

    return module.__file__


def failover_under_load(server, root: Path, args, run: int) -> dict:
    """One run of section 4 on a fresh cluster (its own name and prefix)."""
    import ray

    from tierstore.cluster import Cluster

    cluster = Cluster(
        bucket="bench",
        prefix=f"failover-load-{run}",
        s3_options={"endpoint_url": server.endpoint_url, "region_name": "us-east-1"},
        dim=DIM,
        shards=args.load_shards,
        root=str(root / f"shards-fo-{run}"),
        name=f"tierstore-bench-fo-{run}",
        **({} if args.takeover_threads is None else {"takeover_threads": args.takeover_threads}),
    )
    try:
        namespaces = [f"fo-{i:04d}" for i in range(args.load_shards * args.per_shard)]

        def load(part: list[str]) -> None:
            g = np.random.default_rng(hash(part[0]) & 0xFFFF)
            for ns in part:
                cluster.add_batch(ns, [{"content": f"{ns} {j}", "embedding": _vec(g)} for j in range(args.memories)])

        threads = [threading.Thread(target=load, args=(namespaces[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if args.store_ms:  # a remote store's round trip on every GET and PUT from here on (the takes' reads)
            for name in cluster.shards:
                ray.get(cluster.handle(name).set_put_delay.remote(args.store_ms / 1000))
                ray.get(cluster.handle(name).set_get_delay.remote(args.store_ms / 1000))
        victim = cluster.shards[1]
        table = cluster.slot_table()
        live_ns = [ns for ns in namespaces if table[cluster.slot_of(ns)] != victim]
        probe_ns: dict[int, str] = {}
        for ns in namespaces:
            if table[cluster.slot_of(ns)] == victim:
                probe_ns.setdefault(cluster.slot_of(ns), ns)
        pid = cluster.shard_pids()[victim]
        samples: list[tuple[float, float]] = []  # (start, end), perf_counter seconds, live namespaces only
        errors: list[str] = []
        stop = threading.Event()
        lock = threading.Lock()

        def live_load(w: int) -> None:
            r = random.Random(w)
            g = np.random.default_rng(2000 + w)
            while not stop.is_set():
                q = _vec(g)
                t = time.perf_counter()
                try:
                    cluster.search(r.choice(live_ns), q, k=5)
                except Exception as exc:  # noqa: BLE001 - counted
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                e = time.perf_counter()
                with lock:
                    samples.append((t, e))

        workers = [threading.Thread(target=live_load, args=(w,)) for w in range(args.load_threads)]
        for t in workers:
            t.start()
        time.sleep(args.before_s)
        os.kill(pid, signal.SIGKILL)
        t_kill = time.perf_counter()
        served: dict[int, float] = {}

        def probe(slot: int, ns: str) -> None:
            g = np.random.default_rng(slot)
            while True:
                try:
                    cluster.search(ns, _vec(g), k=5)
                except Exception as exc:  # noqa: BLE001 - counted, and tried again
                    with lock:
                        errors.append(f"probe {type(exc).__name__}: {exc}")
                    time.sleep(0.01)
                    continue
                served[slot] = time.perf_counter() - t_kill
                return

        probes = [threading.Thread(target=probe, args=item) for item in probe_ns.items()]
        for t in probes:
            t.start()
        for t in probes:
            t.join()
        t_all = t_kill + max(served.values())
        time.sleep(args.after_s)  # the load runs on past the failover a little
        stop.set()
        for t in workers:
            t.join()
        until = time.monotonic() + 60
        while (not cluster.failovers or cluster.failovers[-1].get("seconds") is None) and time.monotonic() < until:
            time.sleep(0.05)
        before = [e - t for t, e in samples if t_kill - args.before_s <= t and e <= t_kill]
        during = [e - t for t, e in samples if t < t_all and e > t_kill]
        ms = lambda xs, q: round(1000 * _p(xs, q), 2) if xs else None  # noqa: E731
        times = sorted(served.values())
        out = {
            "code": ray.get(ray.remote(num_cpus=0)(_where).remote()),
            "shards": args.load_shards,
            "namespaces": len(namespaces),
            "live_namespaces": len(live_ns),
            "moved_slots": len(probe_ns),
            "load_threads": args.load_threads,
            "takeover_threads": args.takeover_threads,
            "store_ms": args.store_ms,
            "live_search_ms": {
                "before": {"n": len(before), "p50": ms(before, 0.5), "p99": ms(before, 0.99)},
                "during": {"n": len(during), "p50": ms(during, 0.5), "p99": ms(during, 0.99)},
            },
            "p99_during_over_before": round(_p(during, 0.99) / _p(before, 0.99), 2) if before and during else None,
            "moved_served_again_s": {
                "first": round(times[0], 3),
                "median": round(statistics.median(times), 3),
                "all": round(times[-1], 3),
            },
            "router_failover_s": round(cluster.failovers[-1]["seconds"] or 0.0, 3) if cluster.failovers else None,
            "errors": len(errors),
            "first_errors": errors[:3],
        }
        return out
    finally:
        for name in cluster.shards:
            try:
                ray.kill(cluster.handle(name))
            except Exception:  # noqa: BLE001 - already gone
                pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--per-shard", type=int, default=100)
    ap.add_argument("--memories", type=int, default=20)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--ops", type=int, default=100, help="calls per thread in the mixed loads")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["all", "failover-load"], default="all", help="the sections to run")
    ap.add_argument("--failover-runs", type=int, default=1, help="runs of section 4, each on a fresh cluster")
    ap.add_argument("--load-shards", type=int, default=3, help="shards in section 4")
    ap.add_argument("--load-threads", type=int, default=4, help="threads searching live namespaces in section 4")
    ap.add_argument("--before-s", type=float, default=5.0, help="seconds of load before the kill in section 4")
    ap.add_argument(
        "--takeover-threads", type=int, help="Cluster(takeover_threads=...) in section 4 (default: the cluster's)"
    )
    ap.add_argument(
        "--store-ms",
        type=float,
        default=0.0,
        help="section 4: milliseconds added before every GET and PUT of the shards from the kill on "
        "(a remote object store's round trip; moto on loopback answers in about one)",
    )
    ap.add_argument("--after-s", type=float, default=1.0, help="seconds of load after the failover in section 4")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    if not 0 <= args.store_ms <= 1000:
        ap.error("--store-ms: 0 to 1000")
    if args.quick:
        args.per_shard, args.memories, args.samples, args.ops = 25, 5, 200, 30
    os.environ.update(_AWS_ENV)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    root = Path(tempfile.mkdtemp(prefix="tierstore-cluster-bench-"))
    server = MotoServer(_free_port(MotoServer.host), root / "moto.log")
    server.start()
    import ray

    from tierstore.cluster import Cluster

    results: dict = {}
    try:
        server.client().create_bucket(Bucket="bench")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="tierstore-bench")
        if args.only == "failover-load":
            results["failover_load"] = [
                failover_under_load(server, root, args, run) for run in range(args.failover_runs)
            ]
            return 0
        t = time.perf_counter()
        cluster = Cluster(
            bucket="bench",
            s3_options={"endpoint_url": server.endpoint_url, "region_name": "us-east-1"},
            dim=DIM,
            shards=args.shards,
            root=str(root / "shards"),
            name="tierstore-bench",
        )
        results["start_s"] = round(time.perf_counter() - t, 1)
        rng = np.random.default_rng(0)
        results["overhead"] = overhead(cluster, args, rng, root)
        namespaces = [f"mix-{i:04d}" for i in range(args.shards * args.per_shard)]
        results["puts_spread"] = puts_per_write(cluster, namespaces, args.ops, "spread")
        results["puts_hot"] = puts_per_write(cluster, namespaces[:4], args.ops, "hot")
        # the same two loads with 50 ms added to every PUT: a remote store's latency, which group commit amortises
        for name in cluster.shards:
            ray.get(cluster.handle(name).set_put_delay.remote(0.05))
        results["puts_spread_50ms"] = puts_per_write(cluster, namespaces, args.ops // 2, "spread50")
        results["puts_hot_50ms"] = puts_per_write(cluster, namespaces[:4], args.ops // 2, "hot50")
        results["puts_one_ns_writes_only_50ms"] = puts_per_write(
            cluster, namespaces[:1], args.ops // 4, "one50", write_share=1.0
        )
        for name in cluster.shards:
            ray.get(cluster.handle(name).set_put_delay.remote(0.0))
        results["failover"] = failover(cluster, args, rng)
        for name in cluster.shards:
            ray.kill(cluster.handle(name))
        results["failover_load"] = [failover_under_load(server, root, args, run) for run in range(args.failover_runs)]
    finally:
        if ray.is_initialized():
            ray.shutdown()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(results, indent=2))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

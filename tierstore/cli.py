"""The ``tierstore`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tierstore", description="A tiered memory engine for AI agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the synthetic 60-day agent workload and show what it remembers")
    demo.add_argument("--path", default=None, help="store directory (default: a fresh temporary one)")
    demo.add_argument("--days", type=int, default=60)
    demo.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(path=args.path, days=args.days, seed=args.seed)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""What one sweep costs per due memory, and how much of it is the catalog's writer.

    .venv/bin/python benchmarks/sweep_cost.py                      # 200 namespaces x 60, 384-d, 3 rounds
    .venv/bin/python benchmarks/sweep_cost.py --phase delete       # the sweep that deletes them from the archive
    .venv/bin/python benchmarks/sweep_cost.py --json out.json

Each round opens a fresh store (local directory, default policy), adds
``--namespaces`` x ``--per`` conversation memories (random unit vectors of
``--dim``), moves the clock three days on so that every one of them is due to
be archived, and runs one sweep. With ``--phase delete`` that sweep is not
timed: the clock then moves 400 days on, when every archived conversation is
due to be deleted (its confidence decayed below the delete bar, as from night
~260 of benchmarks/platform_year.py), and the sweep that deletes them is.
It prints, per due memory: the sweep's wall
time, the process's CPU, and the CPU of the catalog's writer thread (the
thread named ``tierstore-catalog-writer``, read from ``/proc``; Linux only,
else not reported). Compare revisions by running it from an exported copy
with ``PYTHONPATH`` (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from tierstore import ManualClock, TierStore

T0 = 1_700_000_000.0
DAY = 86400.0
WRITER_THREAD = "tierstore-catalog-writer"


def thread_cpu_s(native_id: int) -> float | None:
    """CPU seconds (user + system) of one thread of this process, or None where /proc has no such file."""
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(namespaces: int, per: int, dim: int, seed: int, phase: str = "archive") -> dict[str, float | int | None]:
    root = Path(tempfile.mkdtemp(prefix="tierstore-sweep-cost-"))
    try:
        clock = ManualClock(T0)
        rng = np.random.default_rng(seed)
        with TierStore.open(root / "s", dim=dim, clock=clock) as store:
            for n in range(namespaces):
                vecs = rng.normal(size=(per, dim)).astype(np.float32)
                items = [
                    {
                        "content": f"user {n} said thing {i} about the weather and lunch",
                        "embedding": vecs[i],
                        "memory_type": "conversation",
                    }
                    for i in range(per)
                ]
                store.add_batch(f"user-{n}", items)
            store.flush()
            clock.advance(3 * DAY)
            if phase == "delete":
                archived = store.sweep().archived
                if archived != namespaces * per:
                    raise SystemExit(f"expected {namespaces * per} archived, the sweep archived {archived}")
                clock.advance(400 * DAY)
            writer = next((t for t in threading.enumerate() if t.name == WRITER_THREAD), None)
            tid = writer.native_id if writer is not None else None
            w0 = thread_cpu_s(tid) if tid is not None else None
            t0, c0 = time.perf_counter(), time.process_time()
            report = store.sweep()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            w1 = thread_cpu_s(tid) if tid is not None else None
        due = namespaces * per
        done = report.deleted if phase == "delete" else report.archived
        if done != due:
            raise SystemExit(f"expected {due} {phase}d, the sweep did {done}: {report}")
        return {
            "due": due,
            "wall_us": wall / due * 1e6,
            "cpu_us": cpu / due * 1e6,
            "writer_us": None if w0 is None or w1 is None else (w1 - w0) / due * 1e6,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namespaces", type=int, default=200)
    ap.add_argument("--per", type=int, default=60, help="memories per namespace")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--phase", choices=("archive", "delete"), default="archive", help="the sweep timed: archive, or delete"
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    for name, lo, hi in (("namespaces", 1, 100_000), ("per", 1, 100_000), ("dim", 2, 4096), ("rounds", 1, 100)):
        value = getattr(args, name)
        if not lo <= value <= hi:
            ap.error(f"--{name} in {lo}..{hi}, got {value}")
    rounds = [one_round(args.namespaces, args.per, args.dim, seed, args.phase) for seed in range(args.rounds)]
    print(
        f"{args.namespaces} x {args.per} conversation memories, {args.dim}-d, all due to {args.phase}; per due memory:"
    )
    for i, r in enumerate(rounds):
        writer = "n/a" if r["writer_us"] is None else f"{r['writer_us']:.1f}"
        print(f"  round {i + 1}: wall {r['wall_us']:.1f} us, process CPU {r['cpu_us']:.1f} us, writer CPU {writer} us")
    med: dict[str, float | None] = {}
    for key in ("wall_us", "cpu_us", "writer_us"):
        values = [r[key] for r in rounds]
        med[key] = None if None in values else statistics.median(float(v) for v in values if v is not None)
    writer = "n/a" if med["writer_us"] is None else f"{med['writer_us']:.1f}"
    print(f"  median: wall {med['wall_us']:.1f} us, process CPU {med['cpu_us']:.1f} us, writer CPU {writer} us")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rounds": rounds, "median": med}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

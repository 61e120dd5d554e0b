"""add_batch against raw hnswlib add_items, interleaved batch by batch in one process.

    .venv/bin/python benchmarks/ingest_ratio.py                    # 100 000 x 384, batches of 1 000, ids given
    .venv/bin/python benchmarks/ingest_ratio.py --no-ids           # as a new user: no ids, content "memory i"
    .venv/bin/python benchmarks/ingest_ratio.py --json out.json

A store with the default policy and default settings (M 16, ef_construction
200, every core for big batches) and a raw index with the same parameters
take the same clustered vectors, one batch each in turn, the order of the two
alternating per batch: a machine whose speed drifts during the run (shared
cores) slows both alike, which runs one after the other do not (on the
2-core development machine, raw add_items alone moved 255-627 us per memory
between runs of the same day). Each batch is timed by its wall clock; the
report gives the totals per memory, their ratio, and the store's CPU beside
the graph: the calling thread's and the catalog writer's (read from
``/proc``, Linux only). Compare revisions by running it from an exported
copy with ``PYTHONPATH`` (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import clustered_vectors  # noqa: E402
from sweep_cost import WRITER_THREAD, thread_cpu_s  # noqa: E402

import tierstore  # noqa: E402
from tierstore import ManualClock, TierStore  # noqa: E402


def writer_id() -> int | None:
    return next((t.native_id for t in threading.enumerate() if t.name == WRITER_THREAD), None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="memories (default 100 000)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument(
        "--no-ids", action="store_true", help="items without ids (the store makes them), content 'memory i'"
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not 2 <= args.dim <= 4096:
        ap.error("--dim in 2..4096")
    if args.n < 1 or args.batch < 1 or args.n % args.batch:
        ap.error("--n and --batch positive, --n a multiple of --batch")
    import hnswlib

    vecs = clustered_vectors(args.n, args.dim, seed=51)
    threads = os.cpu_count() or 1
    index = hnswlib.Index(space="ip", dim=args.dim)
    index.init_index(max_elements=args.n, M=16, ef_construction=200, random_seed=100)
    with tempfile.TemporaryDirectory() as d:
        store = TierStore.open(Path(d) / "s", dim=args.dim, clock=ManualClock())
        writer = writer_id()
        main_id = threading.get_native_id()
        cpu0 = (thread_cpu_s(main_id), thread_cpu_s(writer) if writer else None)
        t_store = t_raw = 0.0
        for b, start in enumerate(range(0, args.n, args.batch)):
            stop = start + args.batch
            if args.no_ids:
                items = [{"content": f"memory {i}", "embedding": vecs[i]} for i in range(start, stop)]
            else:
                items = [{"content": f"m{i}", "embedding": vecs[i], "id": f"m{i}"} for i in range(start, stop)]
            for side in ("store", "raw") if b % 2 == 0 else ("raw", "store"):
                t = time.perf_counter()
                if side == "store":
                    store.add_batch("mem", items)
                    t_store += time.perf_counter() - t
                else:
                    index.add_items(vecs[start:stop], np.arange(start, stop), num_threads=threads)
                    t_raw += time.perf_counter() - t
            if sys.stderr.isatty():
                print(f"\r{stop}/{args.n}", end="", file=sys.stderr, flush=True)
        if sys.stderr.isatty():
            print(file=sys.stderr)
        cpu1 = (thread_cpu_s(main_id), thread_cpu_s(writer) if writer else None)
        held = store.stats(lifecycle=False).by_tier.get("hot", 0)
        store.close()
    if held != args.n or index.get_current_count() != args.n:
        raise SystemExit(f"expected {args.n} memories on each side, the store holds {held}")

    def per(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None else (y - x) / args.n * 1e6

    report = {
        "code": str(Path(tierstore.__file__).parent),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "add_batch_us": t_store / args.n * 1e6,
        "add_items_us": t_raw / args.n * 1e6,
        "ratio": t_store / t_raw,
        # the calling thread's CPU includes building the items and the raw side's own (tiny) calls
        "calling_thread_cpu_us": per(cpu0[0], cpu1[0]),
        "writer_cpu_us": per(cpu0[1], cpu1[1]),
    }
    print(
        f"code {report['code']}: add_batch {report['add_batch_us']:.1f} us per memory, raw add_items "
        f"{report['add_items_us']:.1f}, ratio {report['ratio']:.3f}"
        + (f"; CPU beside the graph: calling thread {report['calling_thread_cpu_us']:.1f} us," if writer else "")
        + (f" catalog writer {report['writer_cpu_us']:.1f} us" if writer else "")
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

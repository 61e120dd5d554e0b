"""Sweep cost against store size: the same number of due memories in a store
of 1M and of 10M memories (issue 3). The goal is a ratio <= 1.2: a sweep reads
the due index, so its cost follows the work due, not the store size.

    .venv/bin/python benchmarks/sweep_scaling.py --sizes 1000000 10000000 --due 10000

Stores are filled through the catalog directly (bulk SQL inserts of fully
formed rows, dim 8), because adding 10M memories through the API would take
an hour and measure ingest, not sweeps. Three due batches per store, at three
times; each sweep handles one batch (half archive, half demote); the median
of the three is reported. Archives go to an in-memory object store: the cost
of writing objects does not depend on the store's size, and on a shared
machine the fsyncs of a local directory would only add noise (``--local-cold``
uses the default local directory instead).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from tierstore import ManualClock, TierStore
from tierstore.errors import ObjectNotFoundError
from tierstore.progress import Progress
from tierstore.storage.catalog import INSERT_SQL, MemoryRow, insert_params

DIM = 8
T0 = 1_700_000_000.0
HOUR = 3600.0
DAY = 86400.0
NAMESPACES = 100


class MemoryObjectStore:
    """The object-store protocol over a dict (benchmark only)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = bytes(data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key in self.objects:
            return False
        self.objects[key] = bytes(data)
        return True

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if key not in self.objects:  # the protocol's error: the store's owner record is looked for at open
            raise ObjectNotFoundError(key)
        return self.objects[key][start:end]

    def delete(self, key: str) -> bool:
        return self.objects.pop(key, None) is not None

    def list(self, prefix: str = "") -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def exists(self, key: str) -> bool:
        return key in self.objects

    def size(self, key: str) -> int:
        if key not in self.objects:
            raise ObjectNotFoundError(key)
        return len(self.objects[key])


def fill(store: TierStore, n: int, due: int, batches: int, progress: bool) -> list[float]:
    """Insert ``n`` hot memories; ``due`` of them due at each of ``batches``
    times (returned); the rest due far in the future."""
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(1024, DIM)).astype("<f4")
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    blobs = [e.tobytes() for e in emb]
    due_times = [T0 + (b + 1) * HOUR for b in range(batches)]
    chunk = 50_000
    n_due = due * batches
    # every row as this one but for its namespace, id, vector, type and lifetime (set per row below)
    base = MemoryRow(
        rid=-1, ns="", id="", content="x", embedding=None, memory_type="fact", source="user_declaration",
        tags=(), created_at=T0, last_accessed_at=T0, access_count=0, conf_llm=0.9, conf_rule=None,
        conf_feedback=None, confidence=0.9, t_conf=T0, ttl_seconds=None, pinned=False, tier=0, w_ref=1.0,
        t_ref=T0, half_life=DAY, ttl=1e9, ttl_anchor=T0, ctx_mult=1.0, due_at=T0,
    )  # fmt: skip
    with Progress(n, "fill", enabled=progress, unit=" rows") as bar:
        for start in range(0, n, chunk):
            rows = []
            for i in range(start, min(n, start + chunk)):
                if i < n_due:
                    b = i // due
                    # half expire (archive), half cross the demote threshold
                    if i % 2:
                        mtype, ttl, w_ref, t_ref, h = "conversation", due_times[b] - T0, 1.0, T0, DAY
                    else:
                        mtype, ttl = "fact", 1e9
                        h = DAY
                        # W crosses 0.3 exactly at due_times[b]: w_ref = 0.3 * 2^((due - t_ref)/h)
                        t_ref, w_ref = T0, 0.3 * 2 ** ((due_times[b] - T0) / h)
                    due_at = due_times[b]
                else:
                    mtype, ttl, w_ref, t_ref, h = "fact", 1e9, 1.0, T0, 1e9
                    due_at = T0 + 1e9
                row = replace(
                    base,
                    ns=f"ns{i % NAMESPACES}",
                    id=f"m{i}",
                    embedding=blobs[i % 1024],
                    memory_type=mtype,
                    w_ref=w_ref,
                    t_ref=t_ref,
                    half_life=h,
                    ttl=ttl,
                    due_at=due_at,
                )
                rows.append(insert_params(row))
            store.engine.catalog.write(lambda conn, rows=rows: conn.executemany(INSERT_SQL, rows))
            bar.update(len(rows))
    return due_times


def run(size: int, due: int, batches: int, progress: bool, local_cold: bool) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"tierstore-sweep-{size}-"))
    try:
        clock = ManualClock(T0)
        store = TierStore.open(root / "s", dim=DIM, clock=clock, cold=None if local_cold else MemoryObjectStore())
        t = time.perf_counter()
        times = fill(store, size, due, batches, progress)
        fill_s = time.perf_counter() - t
        store.engine.catalog.write(lambda conn: conn.execute("ANALYZE"))
        # Let the fill's dirty pages reach the disk first: on ext4 an fsync of
        # a new archive object otherwise waits for them, which would charge
        # the fill to the sweep.
        os.sync()
        elapsed, counts = [], []
        for when in times:
            clock.set(when + 1.0)  # just past the crossing, whatever the rounding
            t = time.perf_counter()
            report = store.sweep(progress=progress)
            elapsed.append(time.perf_counter() - t)
            counts.append((report.examined, report.archived, report.demoted, report.errors))
        db = (root / "s" / "catalog.sqlite").stat().st_size
        store.close()
        return {
            "size": size,
            "due_per_sweep": due,
            "sweep_s": elapsed,
            "median_s": statistics.median(elapsed),
            "counts": counts,
            "fill_s": fill_s,
            "catalog_bytes": db,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--due", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--local-cold", action="store_true", help="archive to the default local directory")
    args = ap.parse_args(argv)
    progress = sys.stderr.isatty()
    results = [run(n, args.due, args.batches, progress, args.local_cold) for n in args.sizes]
    base = results[0]["median_s"]
    print(
        f"cores {os.cpu_count()}, dim {DIM}, {NAMESPACES} namespaces, {args.due} due per sweep "
        f"(half archive, half demote), median of {args.batches}, cold: "
        f"{'local directory' if args.local_cold else 'in-memory object store'}"
    )
    for r in results:
        print(
            f"  {r['size']:>11,} memories: sweep {r['median_s'] * 1e3:8.1f} ms "
            f"(runs {', '.join(f'{x * 1e3:.0f}' for x in r['sweep_s'])} ms), ratio {r['median_s'] / base:5.2f}, "
            f"catalog {r['catalog_bytes'] / 2**30:.2f} GiB, fill {r['fill_s']:.0f} s; "
            f"examined/archived/demoted {[c[:3] for c in r['counts']]}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

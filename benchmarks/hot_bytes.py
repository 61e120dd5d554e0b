"""Resident memory per hot memory against raw hnswlib at the same parameters (issue 31, item 6).

    .venv/bin/python benchmarks/hot_bytes.py --n 100000

Each side runs in a child process of its own on the same vectors (clustered, 384 dims, seed 1): the child
draws the vectors, notes its RSS, builds, collects garbage and notes its RSS again; the difference over
``--n`` is the bytes per memory. Raw: one ``hnswlib.Index`` ("ip", M = 16, ef_construction = 200)
initialised for exactly ``--n`` elements, ``add_items`` in batches of 1 000. tierstore: a fresh store
(default settings: the same graph parameters), ``add_batch`` in batches of 1 000 of short texts
("memory 123") into one namespace. The tierstore child also reports where its bytes are: the graph
(hnswlib's allocation per element times its capacity), the kernel columns, the per-slot Python
strings and the id map, and the SQLite writer connection's page cache (what ``PRAGMA shrink_memory`` gives back).
Peak RSS is printed too (``ru_maxrss``): a build's transient buffers.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import clustered_vectors  # noqa: E402  (also pins BLAS to one thread)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def malloc_trim_rss() -> int:
    """RSS after glibc's malloc_trim(0) hands freed heap memory back to the system (unchanged elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return rss_bytes()


def graph_bytes_per_element(dim: int, m: int) -> float:
    """hnswlib's allocation per element: level 0 (links, vector, label) plus the upper levels' expected share."""
    level0 = (2 * m * 4 + 4) + dim * 4 + 8
    upper = (m * 4 + 4) / (m - 1)  # a level above 0 with probability 1/M per level (mult = 1/ln M)
    return level0 + upper + 8  # + the element's level-list pointer


def child_raw(n: int, batch: int) -> dict:
    import hnswlib
    import numpy as np

    vecs = clustered_vectors(n, 384, seed=1)
    gc.collect()
    start_rss = before = rss_bytes()
    index = hnswlib.Index(space="ip", dim=384)
    index.init_index(max_elements=n, M=16, ef_construction=200, random_seed=100)
    for start in range(0, n, batch):
        index.add_items(vecs[start : start + batch], np.arange(start, min(n, start + batch)))
    gc.collect()
    after = rss_bytes()
    return {
        "rss_per_memory": (after - before) / n,
        "rss_per_memory_after_trim": (malloc_trim_rss() - before) / n,
        "fixed": before - start_rss,
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def child_tierstore(n: int, batch: int) -> dict:
    from tierstore import TierStore
    from tierstore.kernels import columns as C

    vecs = clustered_vectors(n, 384, seed=1)
    gc.collect()
    start_rss = rss_bytes()
    with tempfile.TemporaryDirectory() as d:
        store = TierStore.open(Path(d) / "s", dim=384)
        # the kernels compile (or load from Numba's cache) on first use: a fixed cost, paid before the baseline
        store.add_batch("warm-up", [{"content": f"w {i}", "embedding": vecs[i]} for i in range(64)])
        store.search("warm-up", vecs[0], k=5)
        gc.collect()
        before = rss_bytes()
        for start in range(0, n, batch):
            stop = min(n, start + batch)
            store.add_batch("ns", [{"content": f"memory {i}", "embedding": vecs[i]} for i in range(start, stop)])
        gc.collect()
        after = rss_bytes()
        end_trimmed = malloc_trim_rss()  # before anything below allocates
        eng = store.engine
        hot = eng.hot.ensure("ns")
        s = eng.settings.hot
        parts = {
            "graph (capacity x per element)": hot.cap * graph_bytes_per_element(384, s.hnsw_m),
            "kernel columns (F, I, tags, rids)": hot.F.nbytes + hot.I.nbytes + hot.tags.nbytes + hot.rids.nbytes,
            "slot strings and id map": sum(
                sys.getsizeof(x) for lst in (hot.ids, hot.sources) for x in [lst, *{id(v): v for v in lst}.values()]
            )
            + hot.contents.nbytes()  # the texts: one UTF-8 buffer, a start and a length per slot
            + sys.getsizeof(hot.tag_names)
            + sys.getsizeof(hot.metadata)
            + sys.getsizeof(hot.slot_of),
        }
        gc.collect()
        parts_freed = malloc_trim_rss()  # what measuring the parts allocated
        eng.catalog.write(lambda conn: conn.execute("PRAGMA shrink_memory"))  # the writer connection's cache
        shrunk = malloc_trim_rss()
        parts["SQLite writer page cache (returned by shrink_memory)"] = parts_freed - shrunk
        parts["freed but held by malloc at the end (returned by malloc_trim)"] = after - end_trimmed
        out = {
            "rss_per_memory": (after - before) / n,
            "rss_per_memory_after_shrink": (shrunk - before) / n,
            "rss_per_memory_after_trim": (end_trimmed - before) / n,
            "fixed": before - start_rss,
            "capacity": hot.cap,
            "parts_per_memory": {k: v / n for k, v in parts.items()},
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "columns": {"NF": C.NF, "NI": C.NI},
        }
        store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="memories (a positive int)")
    ap.add_argument("--batch", type=int, default=1000, help="items per add (a positive int)")
    ap.add_argument("--child", choices=("raw", "tierstore"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.n < 1 or args.batch < 1:
        ap.error("--n and --batch must be positive")
    if args.child:
        print(json.dumps((child_raw if args.child == "raw" else child_tierstore)(args.n, args.batch)))
        return 0
    results = {}
    for side in ("raw", "tierstore"):
        print(f"building {side} ({args.n} x 384) ...", file=sys.stderr, flush=True)
        out = subprocess.run(
            [sys.executable, __file__, "--child", side, "--n", str(args.n), "--batch", str(args.batch)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results[side] = json.loads(out.strip().splitlines()[-1])
    raw, ts = results["raw"]["rss_per_memory"], results["tierstore"]["rss_per_memory"]
    print(f"{args.n} x 384, batches of {args.batch}")
    print(
        f"  raw hnswlib    {raw:8.0f} B per memory (peak RSS {results['raw']['peak_rss'] / 1024:.0f} MiB;"
        f" after malloc_trim {results['raw']['rss_per_memory_after_trim']:.0f} B)"
    )
    print(
        f"  tierstore      {ts:8.0f} B per memory (peak RSS {results['tierstore']['peak_rss'] / 1024:.0f} MiB;"
        f" after shrink_memory {results['tierstore']['rss_per_memory_after_shrink']:.0f} B)"
    )
    print(f"  ratio          {ts / raw:8.2f}")
    print(
        f"  fixed cost before the first memory (open store, compiled kernels; after imports): tierstore"
        f" {results['tierstore']['fixed'] / 2**20:.0f} MiB, raw {results['raw']['fixed'] / 2**20:.0f} MiB"
    )
    print(f"  tierstore capacity {results['tierstore']['capacity']}; estimated parts per memory:")
    for k, v in results["tierstore"]["parts_per_memory"].items():
        print(f"    {k:48s} {v:8.0f} B")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

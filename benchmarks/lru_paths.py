"""Hot paths of the LRU caches, this tree against a git revision, in one run.

    PYTHONPATH=. python benchmarks/lru_paths.py [REV]   (default REV: HEAD)

Loads the cache modules of ``REV`` (``git show``) beside the current ones and
times the same calls on both with timeit (best of several repeats, µs per
call); a ratio above 1 means the current tree is slower.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import timeit
import types
from pathlib import Path

import numpy as np

import tierstore.rules.scoring as new_scoring
import tierstore.storage.objectstore._open_files as new_open_files
import tierstore.tiers.cold_index as new_cold_index
import tierstore.tiers.warm as new_warm
from tierstore.policy import Policy
from tierstore.rules.tags import TagVocab

ROOT = Path(__file__).resolve().parent.parent


def old_module(rev: str, path: str, name: str) -> types.ModuleType:
    """The module at ``path`` as it was at ``rev``, registered as ``name``."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True)
    mod = types.ModuleType(name)
    mod.__file__ = str(ROOT / path)
    sys.modules[name] = mod  # dataclasses look their module up
    exec(compile(source.stdout, f"{rev}:{path}", "exec"), mod.__dict__)
    return mod


def best_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def cases(cold_index, scoring, open_files, warm, tmp: Path) -> dict[str, tuple]:
    rng = np.random.default_rng(0)
    vec = rng.standard_normal(384).astype(np.float32)
    blob = vec.astype("<f4").tobytes()

    vc = cold_index.VectorCache(max_bytes=1000 * len(blob))
    places = [(f"obj{i}", 64 * i) for i in range(1000)]
    vc.put_many(places, [blob] * len(places))
    hits = places[::10]  # 100 hits, as one cold search's rescoring reads
    churn = [(f"new{i}", i) for i in range(100)]

    cp = scoring.CompiledPolicy(Policy(), TagVocab())
    tags = ("work", "project-x")
    cp.context(tags)

    path = tmp / "obj"
    path.write_bytes(b"x" * 4096)
    of = open_files.OpenFiles(64)
    of.release(of.acquire("k", str(path)))

    class Catalog:
        def query(self, *_a):
            return []

    info = warm.ShardInfo(1, "ns", "ns/x", "flat", 1)
    wt = warm.WarmTier(tmp, 4, warm.WarmSettings(), Catalog())
    shard = warm.LoadedShard(info, np.zeros(1, np.int64), np.zeros((1, 4), np.float32), None, 40)
    wt._read = lambda _info: shard
    wt.load(info)

    codes = cold_index.ColdIndex(lambda *_a: [], 384)
    codes._codes("ns")  # loaded (empty)

    def vc_put():
        vc.put_many(churn, [blob] * len(churn))

    def of_hit():
        of.release(of.acquire("k", str(path)))

    return {
        "VectorCache.get (1 hit)": (lambda: vc.get("obj10", 640), 20000),
        "VectorCache.get_many (100 hits)": (lambda: vc.get_many(hits), 2000),
        "VectorCache.put_many (100, evicting)": (vc_put, 2000),
        "CompiledPolicy.context (hit)": (lambda: cp.context(tags), 50000),
        "OpenFiles.acquire+release (hit)": (of_hit, 50000),
        "WarmTier.load (hit)": (lambda: wt.load(info), 50000),
        "ColdIndex._codes (hit)": (lambda: codes._codes("ns"), 50000),
    }


def main() -> None:
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    olds = [
        old_module(rev, "tierstore/tiers/cold_index.py", "_old_cold_index"),
        old_module(rev, "tierstore/rules/scoring.py", "_old_scoring"),
        old_module(rev, "tierstore/storage/objectstore/_open_files.py", "_old_open_files"),
        old_module(rev, "tierstore/tiers/warm.py", "_old_warm"),
    ]
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "old").mkdir()
        (Path(d) / "new").mkdir()
        before = cases(*olds, Path(d) / "old")
        after = cases(new_cold_index, new_scoring, new_open_files, new_warm, Path(d) / "new")
        print(f"{'path':40s} {'before µs':>10s} {'after µs':>10s} {'ratio':>7s}")
        for name, (fn_old, number) in before.items():
            fn_new = after[name][0]
            # interleave the two, twice, so drift of the machine hits both alike
            runs = [(best_us(fn_old, number), best_us(fn_new, number)) for _ in range(5)]
            t_old, t_new = min(r[0] for r in runs), min(r[1] for r in runs)
            print(f"{name:40s} {t_old:10.3f} {t_new:10.3f} {t_new / t_old:7.3f}")


if __name__ == "__main__":
    main()

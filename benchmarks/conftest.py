"""Benchmark support: clustered vectors, and ratios printed at the end.

Every figure is reported as a ratio against a baseline measured in the same
run (these machines are noisy). Benchmarks call ``record(group, name, seconds)``
through the ``ratio_of`` fixture; ``RATIOS`` says which pairs to divide.
"""

from __future__ import annotations

import os

# One BLAS thread: the numpy baselines must not spin-wait for a second core
# that other work holds (seen: a 2k x 384 matmul going from 60 us to 8 ms).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import json
import platform
from pathlib import Path

import numpy as np

_MEDIANS: dict[tuple[str, str], float] = {}

# (group, candidate, baseline)
RATIOS = [
    ("search-100k", "tierstore_search", "hnswlib_knn_query_same_index"),
    ("search-100k", "tierstore_search", "hnswlib_knn_query_own_index"),
    ("search-100k", "tierstore_search_explain", "hnswlib_knn_query_same_index"),
    ("search-100k", "tierstore_search_record_access", "hnswlib_knn_query_same_index"),
    ("exact-2k", "tierstore_search_exact", "numpy_matmul_topk"),
    ("exact-2k", "kernel_flat_topk", "numpy_matmul_topk"),
    ("decay-10m", "kernel_decayed_weight", "read_same_bytes"),
    ("decay-10m", "kernel_due_times", "read_same_bytes"),
    ("decay-10m", "kernel_classify", "read_same_bytes"),
]


def clustered_vectors(
    n: int, dim: int, *, clusters: int = 1000, spread: float = 0.35, seed: int = 0, draw_seed: int | None = None
) -> np.ndarray:
    """``n`` L2-normalised vectors drawn around ``clusters`` random centres.

    Real embeddings are clustered; HNSW recall on isotropic random normal data
    says nothing about real use. ``seed`` fixes the centres (and, unless
    ``draw_seed`` is given, the draws around them): queries like the data are
    ``clustered_vectors(m, dim, seed=<the data's>, draw_seed=<another>)``."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    if draw_seed is not None:
        rng = np.random.default_rng(draw_seed)
    which = rng.integers(0, clusters, n)
    x = centres[which] + spread * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def add_vectors(store, ns: str, vecs: np.ndarray, chunk: int = 20_000) -> None:
    """Add ``vecs`` to namespace ``ns`` as memories ``m0``, ``m1``, ... (content
    as id), ``chunk`` at a time."""
    for start in range(0, len(vecs), chunk):
        store.add_batch(
            ns,
            [
                {"content": f"m{i}", "embedding": vecs[i], "id": f"m{i}"}
                for i in range(start, min(len(vecs), start + chunk))
            ],
        )


def record(group: str, name: str, benchmark) -> None:
    stats = benchmark.stats.stats if hasattr(benchmark.stats, "stats") else benchmark.stats
    _MEDIANS[(group, name)] = float(stats.median)


def pytest_terminal_summary(terminalreporter):
    if not _MEDIANS:
        return
    tr = terminalreporter
    tr.write_sep("=", "ratios (candidate / baseline, medians, same run)")
    out = []
    for group, cand, base in RATIOS:
        if (group, cand) in _MEDIANS and (group, base) in _MEDIANS:
            c, b = _MEDIANS[(group, cand)], _MEDIANS[(group, base)]
            tr.write_line(
                f"{group:<12} {cand:<32} / {base:<30} = {c / b:6.3f}   ({c * 1e6:10.1f} us / {b * 1e6:10.1f} us)"
            )
            out.append(
                {"group": group, "candidate": cand, "baseline": base, "ratio": c / b, "candidate_s": c, "baseline_s": b}
            )
    path = Path(os.environ.get("TIERSTORE_BENCH_OUT", ".benchmarks/ratios.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "ratios": out}, indent=2))
    tr.write_line(f"written to {path}")

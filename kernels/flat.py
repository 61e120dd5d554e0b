"""Exact (flat) inner-product search over a contiguous float32 matrix."""

import numpy as np
from numba import njit

from ._topk import topk_order


@njit(nogil=True, cache=True)
def squared_length(v):
    """``Σ v_i²`` accumulated in float64: no overflow for any finite float32
    vector; NaN or inf when ``v`` holds one."""
    n2 = 0.0
    for i in range(v.shape[0]):
        x = np.float64(v[i])
        n2 += x * x
    return n2


@njit(nogil=True, cache=True, fastmath=True)
def inner_products(q, X, n):
    """``X[:n] @ q`` as float32 (rows of ``X`` are L2-normalised: cosines
    times the length of ``q``). ``fastmath`` lets LLVM vectorise the reduction."""
    d = q.shape[0]
    out = np.empty(n, np.float32)
    for i in range(n):
        acc = np.float32(0.0)
        for j in range(d):
            acc += X[i, j] * q[j]
        out[i] = acc
    return out


@njit(nogil=True, cache=True)
def flat_topk(q, X, n, k):
    """Exact top-``k`` rows of ``X[:n]`` by inner product with ``q``.

    Returns ``(indices int64, similarities float32)``, best first; ties go to
    the lower index."""
    sims = inner_products(q, X, n)
    score = sims.astype(np.float64)
    idx = topk_order(score, score, k)
    return idx, sims[idx]


@njit(nogil=True, cache=True)
def top_candidates(sims, alive, n, want):
    """Indices of the ``want`` highest ``sims[:n]`` among rows whose ``alive``
    flag is set, best first (ties to the lower index)."""
    score = np.empty(n, np.float64)
    for i in range(n):
        score[i] = sims[i] if alive[i] != 0 else -np.inf
    return topk_order(score, score, want)

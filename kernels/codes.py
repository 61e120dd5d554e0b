"""Compact codes of float32 vectors and their scans: the cold index.

A sign code keeps one bit per component (set when the component is > 0),
packed little-end first into uint64 words: component ``j`` is bit ``j % 64``
of word ``j // 64``; the unused high bits of the last word are zero in every
code, so they never add to a distance. The Hamming distance between two
codes estimates the angle between the vectors; the scan ranks rows by it and
the caller rescores the best ``m`` exactly.

The int8 codes (one signed byte per component and a float32 scale per
vector) are here to be measured against the sign codes
(``benchmarks/cold_recall.py``).

All kernels are serial and ``nogil``: they run on the query path, beside
other searches.
"""

import numpy as np
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def _popcount(typingctx, x):
    """Set bits of a uint64: LLVM's ``ctpop``, one ``popcnt`` instruction on
    x86-64 (Numba compiles for the host CPU)."""
    if x != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


@njit(nogil=True, cache=True)
def code_words(d):
    """uint64 words in the sign code of a ``d``-component vector: ``ceil(d / 64)``."""
    return (d + 63) // 64


@njit(inline="always", cache=True)
def _pack_row(v, out_row):
    d = v.shape[0]
    for w in range(out_row.shape[0]):
        word = np.uint64(0)
        hi = min(d, 64 * w + 64)
        for j in range(64 * w, hi):
            if v[j] > 0:
                word |= np.uint64(1) << np.uint64(j - 64 * w)
        out_row[w] = word


@njit(nogil=True, cache=True)
def sign_codes(vectors):
    """Sign codes of the rows of ``vectors`` (float32 ``(n, d)``): uint64
    ``(n, ceil(d / 64))``. A NaN component gives a 0 bit (callers validate)."""
    n, d = vectors.shape
    out = np.empty((n, code_words(d)), np.uint64)
    for i in range(n):
        _pack_row(vectors[i], out[i])
    return out


@njit(nogil=True, cache=True)
def sign_code(vector):
    """The sign code of one vector (float32 ``(d,)``): uint64 ``(ceil(d / 64),)``."""
    out = np.empty(code_words(vector.shape[0]), np.uint64)
    _pack_row(vector, out)
    return out


@njit(nogil=True, cache=True)
def hamming_distances(qcode, codes):
    """Hamming distance (bits, int32) from ``qcode`` (uint64 ``(w,)``) to each
    row of ``codes`` (uint64 ``(n, w)``)."""
    n, w = codes.shape
    if qcode.shape[0] != w:
        raise ValueError("hamming_distances: the query code and the codes differ in width")
    out = np.empty(n, np.int32)
    for i in range(n):
        acc = np.uint64(0)
        for j in range(w):
            acc += _popcount(qcode[j] ^ codes[i, j])
        out[i] = np.int32(acc)
    return out


@njit(nogil=True, cache=True)
def hamming_topk(qcode, codes, m, allowed):
    """The ``m`` rows of ``codes`` nearest to ``qcode`` in Hamming distance.

    ``allowed`` (int8 or bool) is either empty (every row may be picked) or
    one flag per row (only rows whose flag is non-zero). Returns
    ``(rows int64, distances int32)`` ordered by (distance, row index): ties
    go to the lower row. Fewer than ``m`` rows come back when fewer are
    allowed; none when ``m <= 0``.

    Distances are small integers (at most ``64 w``), so the selection is a
    counting sort: one pass computes the distances and their histogram, the
    histogram gives the cut-off distance, a second pass places the rows.
    O(n + 64 w), no heap, no comparison sort."""
    n, w = codes.shape
    if qcode.shape[0] != w:
        raise ValueError("hamming_topk: the query code and the codes differ in width")
    masked = allowed.shape[0] != 0
    if masked and allowed.shape[0] != n:
        raise ValueError("hamming_topk: allowed must be empty or hold one flag per row")
    dist = np.empty(n, np.int32)
    hist = np.zeros(64 * w + 1, np.int64)
    total = 0
    for i in range(n):
        if masked and allowed[i] == 0:
            dist[i] = -1
            continue
        acc = np.uint64(0)
        for j in range(w):
            acc += _popcount(qcode[j] ^ codes[i, j])
        d = np.int64(acc)
        dist[i] = d
        hist[d] += 1
        total += 1
    take = min(m, total) if m > 0 else 0
    rows = np.empty(take, np.int64)
    dists = np.empty(take, np.int32)
    if take == 0:
        return rows, dists
    # cut: the distance at which the take-th best row lies; pos[d]: where the
    # next row of distance d goes (rows of one distance stay in index order).
    pos = np.empty(64 * w + 1, np.int64)
    cum = 0
    cut = 0
    while True:
        pos[cut] = cum
        if cum + hist[cut] >= take:
            break
        cum += hist[cut]
        cut += 1
    for i in range(n):
        d = dist[i]
        if d < 0 or d > cut:
            continue
        p = pos[d]
        if p >= take:  # only at the cut distance: its quota is full
            continue
        rows[p] = i
        dists[p] = d
        pos[d] = p + 1
    return rows, dists


@njit(nogil=True, cache=True)
def int8_codes(vectors):
    """Per-vector scalar quantisation of ``vectors`` (float32 ``(n, d)``):
    ``(codes int8 (n, d), scales float32 (n,))`` with
    ``scale = max|x| / 127`` and ``code = rint(x / scale)`` in [-127, 127]
    (computed in float64; ties to even). A zero row gets scale 0 and zero codes;
    ``codes[i] * scales[i]`` approximates row ``i`` within ``scale / 2`` per
    component."""
    n, d = vectors.shape
    codes = np.zeros((n, d), np.int8)
    scales = np.zeros(n, np.float32)
    for i in range(n):
        top = 0.0
        for j in range(d):
            a = abs(np.float64(vectors[i, j]))
            if a > top:
                top = a
        if top == 0.0:
            continue
        s = top / 127.0
        for j in range(d):
            codes[i, j] = np.int8(np.rint(np.float64(vectors[i, j]) / s))
        scales[i] = np.float32(s)
    return codes, scales


@njit(nogil=True, cache=True, fastmath=True)
def int8_inner_products(query, codes, scales, rows):
    """Approximate inner products (float32) of ``query`` (float32 ``(d,)``)
    with the quantised rows ``rows`` (int64) of ``codes``:
    ``scales[r] · Σ_j query[j] · codes[r, j]``. ``fastmath`` lets LLVM
    vectorise the reduction (the sum's order is not IEEE-exact)."""
    d = query.shape[0]
    if codes.shape[1] != d:
        raise ValueError("int8_inner_products: the query and the codes differ in dimension")
    out = np.empty(rows.shape[0], np.float32)
    for t in range(rows.shape[0]):
        r = rows[t]
        if r < 0 or r >= codes.shape[0]:
            raise IndexError("int8_inner_products: a row index is out of range")
        acc = np.float32(0.0)
        for j in range(d):
            acc += query[j] * np.float32(codes[r, j])
        out[t] = acc * scales[r]
    return out

"""Compact codes of float32 vectors and their scans: the cold index.

A sign code keeps one bit per component (set when the component is > 0),
packed little-end first into uint64 words: component ``j`` is bit ``j % 64``
of word ``j // 64``; the unused high bits of the last word are zero in every
code, so they never add to a distance. The Hamming distance between two
codes estimates the angle between the vectors; the scan ranks rows by it and
the caller rescores the best ``m`` exactly.

``sign_scores`` reads the same codes asymmetrically: the float query
against each code as a ±1 vector. It ranks far closer to the cosine than the
Hamming distance, so the cold index uses it as a second stage over the
Hamming scan's best rows (``benchmarks/cold_recall.py``).

``int8_codes`` / ``int8_scores`` are a finer code kept beside the sign
code: one int8 per component and a float32 scale per row. The cold index
reads them for the few candidates a search has left, to choose which of
those are worth reading exactly from the archive.

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
            acc += _popcount(qcode[j] ^ codes[i, j])  # type: ignore[call-arg]  # numba stub counts typingctx as an argument
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
    if w == 6 and not masked:
        # 384 dimensions (the default model), nothing masked: the six words unrolled, the query's held in
        # registers; the loop over a run-time width costs 1.5x as much (ad hoc: 272 against 179 us at 100 000)
        q0, q1, q2, q3, q4, q5 = qcode[0], qcode[1], qcode[2], qcode[3], qcode[4], qcode[5]
        for i in range(n):
            six = np.uint64(0)
            six += _popcount(q0 ^ codes[i, 0])  # type: ignore[call-arg]  # (mypy flags the first call only)
            six += _popcount(q1 ^ codes[i, 1])
            six += _popcount(q2 ^ codes[i, 2])
            six += _popcount(q3 ^ codes[i, 3])
            six += _popcount(q4 ^ codes[i, 4])
            six += _popcount(q5 ^ codes[i, 5])
            d6 = np.int64(six)
            dist[i] = d6
            hist[d6] += 1
        total = n
    else:
        for i in range(n):
            if masked and allowed[i] == 0:
                dist[i] = -1
                continue
            acc = np.uint64(0)
            for j in range(w):
                acc += _popcount(qcode[j] ^ codes[i, j])  # type: ignore[call-arg]  # numba stub counts typingctx as an argument
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
def sign_scores(query, codes, rows):
    """Asymmetric scores of the rows ``rows`` (int64) of sign ``codes``
    against the float ``query`` (float32 ``(d,)``): the inner product of the
    query with each code read as a ±1 vector, ``Σ_j query[j] · (+1 if bit j
    is set else -1)`` (float32; bits past ``d`` count for nothing).

    The same bytes as the Hamming scan, but the query keeps its magnitudes,
    so it ranks much closer to the cosine (``benchmarks/cold_recall.py``).
    Computed with one table per code byte (``d/8 × 256`` partial sums built
    once per call): a row costs one table look-up per byte of its code."""
    d = query.shape[0]
    n, w = codes.shape
    if w != code_words(d):
        raise ValueError("sign_scores: the query and the codes differ in width")
    nb = 8 * w
    table = np.zeros((nb, 256), np.float32)
    total = np.float32(0.0)
    for p in range(nb):
        for t in range(8):  # bytes b in [2^t, 2^(t+1)) have t as their highest bit
            j = 8 * p + t
            x = query[j] if j < d else np.float32(0.0)
            for b in range(1 << t, 1 << (t + 1)):
                table[p, b] = table[p, b - (1 << t)] + x
    for j in range(d):
        total += query[j]
    out = np.empty(rows.shape[0], np.float32)
    for t in range(rows.shape[0]):
        r = rows[t]
        if r < 0 or r >= n:
            raise IndexError("sign_scores: a row index is out of range")
        acc = np.float32(0.0)
        for k in range(w):
            word = codes[r, k]
            for s in range(8):
                acc += table[8 * k + s, np.int64((word >> np.uint64(8 * s)) & np.uint64(255))]
        out[t] = np.float32(2.0) * acc - total
    return out


# ---------------------------------------------------------------------------
# int8 codes: the cold index's second stage


@njit(nogil=True, cache=True)
def int8_codes(vectors):
    """Scalar int8 codes of the rows of ``vectors`` (float32 ``(n, d)``):
    ``(codes int8 (n, d), scales float32 (n,))``.

    Row ``i``'s scale is ``s = float32(max_j |v_j| / 127)`` (the quotient
    in float64, rounded once), or 1 when that is 0 (an all-zero row, or one
    so small that the scale underflows); its code is ``q_j = rint(v_j / s)``
    (float64 quotient, ties to even) clipped to [-127, 127], so ``s · q_j``
    is within ``s / 2`` of ``v_j``. A NaN component gives 0 (callers
    validate)."""
    n, d = vectors.shape
    codes = np.empty((n, d), np.int8)
    scales = np.empty(n, np.float32)
    for i in range(n):
        top = 0.0
        for j in range(d):
            a = abs(np.float64(vectors[i, j]))
            if a > top:
                top = a
        s = np.float32(top / 127.0)
        if not s > 0:
            s = np.float32(1.0)
        scales[i] = s
        s64 = np.float64(s)
        for j in range(d):
            r = np.rint(np.float64(vectors[i, j]) / s64)
            if r > 127.0:
                r = 127.0
            elif r < -127.0:
                r = -127.0
            elif r != r:
                r = 0.0
            codes[i, j] = np.int8(r)
    return codes, scales


@njit(nogil=True, cache=True)
def int8_scores(query, codes, scales):
    """Approximate inner products of the float ``query`` (float32 ``(d,)``)
    with rows stored as int8 ``codes`` (``(n, d)``) and their float32
    ``scales`` (``(n,)``): ``scales[i] · Σ_j query[j] · codes[i, j]``, the
    sum in float64, the result float32. For unit rows and a unit query, the
    cosine to within ``Σ_j |query[j]| · scales[i] / 2`` (about 0.01 for
    random unit vectors at 384 dimensions; the errors mostly cancel, ~0.0003
    typically): close enough to pick the few candidates worth reading
    exactly."""
    n, d = codes.shape
    if query.shape[0] != d:
        raise ValueError("int8_scores: the query and the codes differ in width")
    if scales.shape[0] != n:
        raise ValueError("int8_scores: one scale per code is needed")
    q = np.empty(d, np.float64)
    for j in range(d):
        q[j] = query[j]
    out = np.empty(n, np.float32)
    for i in range(n):
        acc = 0.0
        for j in range(d):
            acc += q[j] * np.float64(codes[i, j])
        out[i] = np.float32(np.float64(scales[i]) * acc)
    return out

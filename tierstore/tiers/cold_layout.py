"""The cold tier's layout by meaning: which archive object each record goes in.

A cold search reads the exact vectors of ~100 candidates, the memories whose
codes best match the query: similar memories. Archive batches follow due
times, so those candidates land in most of a namespace's objects (~64 of 100
at 100 000 archived memories, ``docs/benchmarks.md``, "Cold search cost").
:func:`layout_groups` orders a namespace's vectors so that similar ones sit
together: a tree of bisections, each part split near the median of
its vectors' projections on their principal direction (the widest gap
near the median, so that a group of similar vectors stays whole) (power iteration on a
sample), until a part fits one object; within an object the same splits go
on down to :data:`LEAF_RECORDS`, so a query's candidates in one object lie in
few byte ranges too. :func:`order_rows` is the within-object order alone, for
an archive batch written by a sweep.

Pure functions of the vectors (float32, unit rows) and a fixed seed: the
same vectors always give the same layout. No state is kept beyond the
catalog's record of which objects a layout wrote (``migrator.lay_out``).
"""

from __future__ import annotations

import numpy as np

from tierstore.errors import InvalidInputError

# Records per archive object written by a layout; a part is split until it
# holds at most this many (so objects hold between half and all of it).
OBJECT_RECORDS = 1000
# Parts of an object are split down to this many records (the order within it).
LEAF_RECORDS = 32
# Rows the principal direction of a part is estimated from, and the power
# iterations that estimate it (a sample keeps the cost O(n · d) per level).
# 2048 rows put a query's 100 nearest in 6 objects of 1000 (p50, 100 000
# clustered vectors), 512 rows in 9.
SAMPLE_ROWS = 2048
POWER_ITERATIONS = 8
# The same within an object, where the order matters less than which object a record is in.
LEAF_SAMPLE_ROWS = 256
SEED = 31
_BLOCK = 2048  # rows gathered at a time by _project
# A part is split at the widest gap among the middle CUT_SPAN of its projections.
CUT_SPAN = 0.4


def layout_groups(vectors: np.ndarray, object_records: int = OBJECT_RECORDS) -> list[np.ndarray]:
    """The rows of ``vectors`` (``(n, d)``) in groups of at most
    ``object_records``, one group per archive object, each in its record
    order (int64 row positions); neighbouring groups are neighbouring parts
    of the space. Every row is in exactly one group."""
    X = _checked(vectors)
    if isinstance(object_records, bool) or not isinstance(object_records, int) or object_records < 1:
        raise InvalidInputError(f"object_records must be a positive integer, got {object_records!r}")
    rng = np.random.default_rng(SEED)
    groups: list[np.ndarray] = []
    for part in _split(X, np.arange(X.shape[0], dtype=np.int64), object_records, rng, SAMPLE_ROWS):
        groups.append(_order(X, part, rng))
    return groups


def order_rows(vectors: np.ndarray) -> np.ndarray:
    """The row positions of ``vectors`` (``(n, d)``) in layout order (int64):
    what one archive object's records follow."""
    X = _checked(vectors)
    return _order(X, np.arange(X.shape[0], dtype=np.int64), np.random.default_rng(SEED))


def _checked(vectors: np.ndarray) -> np.ndarray:
    X = np.asarray(vectors, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] == 0:
        raise InvalidInputError(f"vectors must have shape (n, d) with d >= 1, got {X.shape}")
    if not np.isfinite(X).all():
        raise InvalidInputError("vectors contain NaN or infinite values")
    return X


def _order(X: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    parts = _split(X, rows, LEAF_RECORDS, rng, LEAF_SAMPLE_ROWS)
    return np.concatenate(parts) if parts else rows


def _split(X: np.ndarray, rows: np.ndarray, most: int, rng: np.random.Generator, sample: int) -> list[np.ndarray]:
    """``rows`` in parts of at most ``most``, in tree order (left part first);
    each direction estimated from at most ``sample`` rows."""
    out: list[np.ndarray] = []
    todo = [rows]
    while todo:
        part = todo.pop()
        if part.shape[0] <= most:
            if part.shape[0]:
                out.append(part)
            continue
        proj = _project(X, part, _direction(X, part, rng, sample))
        by = np.argsort(proj, kind="stable")  # ties (equal vectors) keep their order
        cut = _cut(proj[by])
        todo.append(part[by[cut:]])  # popped second: the right part after the left
        todo.append(part[by[:cut]])
    return out


def _cut(sorted_proj: np.ndarray) -> int:
    """Where to split projections sorted ascending: at the widest gap
    between neighbours among the middle :data:`CUT_SPAN` of them, so that a
    group of similar vectors is not cut in two where a gap separates groups
    (each part keeps at least ``(1 - CUT_SPAN) / 2`` of the rows)."""
    n = sorted_proj.shape[0]
    lo = max(1, int(n * (1.0 - CUT_SPAN) / 2))
    hi = min(n - 1, n - lo)
    if hi <= lo:
        return n // 2
    return lo + int(np.argmax(np.diff(sorted_proj[lo - 1 : hi])))


def _project(X: np.ndarray, rows: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``X[rows] @ v``, gathered in blocks of :data:`_BLOCK` rows (no
    temporary the size of the part: at 100 000 x 384 that is 150 MB a level)."""
    out = np.empty(rows.shape[0], np.float32)
    for s in range(0, rows.shape[0], _BLOCK):
        np.dot(X[rows[s : s + _BLOCK]], v, out=out[s : s + _BLOCK])
    return out


def _direction(X: np.ndarray, part: np.ndarray, rng: np.random.Generator, sample: int) -> np.ndarray:
    """The principal direction of the rows ``part`` (centred), by power
    iteration on at most ``sample`` of them."""
    chosen = part if part.shape[0] <= sample else rng.choice(part, sample, replace=False)
    S = X[chosen]  # float32: a direction to split by, not a figure
    S -= S.mean(axis=0)
    v = np.asarray(rng.standard_normal(X.shape[1], dtype=np.float32))
    for _ in range(POWER_ITERATIONS):
        v = np.asarray(S.T @ (S @ v))
        norm = float(np.linalg.norm(v))
        if norm == 0.0:  # every sampled row the same: any direction splits them
            return np.ones(X.shape[1], np.float32)
        v /= norm
    return v

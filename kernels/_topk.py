"""Top-k selection with a bounded heap: best first by (score, tiebreak, -index)."""

import numpy as np
from numba import njit


@njit(inline="always", cache=True)
def _better(score, tiebreak, a, b):
    if score[a] != score[b]:
        return score[a] > score[b]
    if tiebreak[a] != tiebreak[b]:
        return tiebreak[a] > tiebreak[b]
    return a < b


@njit(cache=True)
def topk_order(score, tiebreak, k):
    """Indices of the ``k`` best entries, best first. Entries whose score is
    -inf are excluded; fewer than ``k`` indices come back if fewer remain."""
    m = score.shape[0]
    if k <= 0:
        return np.empty(0, np.int64)
    heap = np.empty(k, np.int64)  # heap[0] is the worst kept entry
    size = 0
    for i in range(m):
        if score[i] == -np.inf:
            continue
        if size < k:
            heap[size] = i
            c = size
            size += 1
            while c > 0:
                p = (c - 1) // 2
                if _better(score, tiebreak, heap[p], heap[c]):
                    heap[p], heap[c] = heap[c], heap[p]
                    c = p
                else:
                    break
        elif _better(score, tiebreak, i, heap[0]):
            heap[0] = i
            p = 0
            while True:
                left = 2 * p + 1
                r = left + 1
                w = p
                if left < size and _better(score, tiebreak, heap[w], heap[left]):
                    w = left
                if r < size and _better(score, tiebreak, heap[w], heap[r]):
                    w = r
                if w == p:
                    break
                heap[p], heap[w] = heap[w], heap[p]
                p = w
    out = heap[:size].copy()
    # insertion sort, best first; size <= k is small
    for i in range(1, size):
        x = out[i]
        j = i - 1
        while j >= 0 and _better(score, tiebreak, x, out[j]):
            out[j + 1] = out[j]
            j -= 1
        out[j + 1] = x
    return out

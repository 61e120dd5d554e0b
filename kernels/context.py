"""Context-aware lifetimes: TTL/half-life multipliers from active context rules."""

import numpy as np
from numba import njit

from ._scalar import weight_at
from .rerank import _find_sorted


@njit(nogil=True, cache=True)
def context_multipliers(tags, n, rule_tags, rule_mult):
    """Product of ``rule_mult`` over each memory's tags found in ``rule_tags``
    (sorted int32). ``tags``: int32 ``(capacity, width)`` padded with -1; the
    first ``n`` rows are read. Memories with no matching tag get 1.0."""
    width = tags.shape[1]
    out = np.ones(n, np.float64)
    if rule_tags.shape[0] == 0:
        return out
    for i in range(n):
        m = 1.0
        for w in range(width):
            tg = tags[i, w]
            if tg < 0:
                break
            r = _find_sorted(rule_tags, tg)
            if r >= 0:
                m *= rule_mult[r]
        out[i] = m
    return out


@njit(nogil=True, cache=True)
def rescale_lifetimes(w_ref, t_ref, half_life, ttl, old_mult, new_mult, now):
    """Apply a change of context multiplier at ``now``.

    The weight is rebased at ``now`` with the old half-life (so the past is
    unchanged), then half-life and TTL are scaled by ``new_mult / old_mult``.
    Returns new ``(w_ref, t_ref, half_life, ttl)`` arrays."""
    n = w_ref.shape[0]
    w_out = np.empty(n, np.float64)
    t_out = np.empty(n, np.float64)
    h_out = np.empty(n, np.float64)
    ttl_out = np.empty(n, np.float64)
    for i in range(n):
        r = new_mult[i] / old_mult[i]
        if r == 1.0:
            w_out[i] = w_ref[i]
            t_out[i] = t_ref[i]
            h_out[i] = half_life[i]
            ttl_out[i] = ttl[i]
        else:
            w_out[i] = weight_at(w_ref[i], t_ref[i], half_life[i], now)
            t_out[i] = now
            h_out[i] = half_life[i] * r
            ttl_out[i] = ttl[i] * r
    return w_out, t_out, h_out, ttl_out

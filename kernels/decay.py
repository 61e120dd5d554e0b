"""Decayed weight and access boost.

W(t) = w_ref · 2^(-(t - t_ref)/h); an access at t_a >= t_ref makes
w_ref = W(t_a) + boost and t_ref = t_a. An access older than t_ref (two
threads read the clock in one order and record in the other) adds its boost
decayed to t_ref instead, so the result does not depend on arrival order.
"""

import math

import numpy as np
from numba import njit

from ._scalar import LN2, weight_at
from .columns import (
    F_CONF,
    F_DUE,
    F_HALF_LIFE,
    F_LAST_ACCESS,
    F_T_CONF,
    F_T_REF,
    F_TTL,
    F_TTL_ANCHOR,
    F_W_REF,
    I_ACCESS_COUNT,
    I_DIRTY,
    I_PINNED,
    I_TYPE,
    TIER_HOT,
)
from .due import _due_one


@njit(nogil=True, cache=True)
def decayed_weight(w_ref, t_ref, half_life, now):
    """W(now) for every memory. Arrays of equal length (float64); ``now`` in seconds."""
    n = w_ref.shape[0]
    out = np.empty(n, np.float64)
    for i in range(n):
        out[i] = weight_at(w_ref[i], t_ref[i], half_life[i], now)
    return out


@njit(nogil=True, cache=True)
def access_boost(w_ref, t_ref, half_life, boost, t_access):
    """New ``(w_ref, t_ref)`` after one access at ``t_access`` (seconds).

    ``boost`` is per memory. Returns two new arrays; inputs are unchanged."""
    n = w_ref.shape[0]
    w_out = np.empty(n, np.float64)
    t_out = np.empty(n, np.float64)
    for i in range(n):
        w_out[i], t_out[i] = _boosted(w_ref[i], t_ref[i], half_life[i], boost[i], t_access)
    return w_out, t_out


@njit(inline="always", cache=True)
def _boosted(w_ref, t_ref, half_life, boost, t_access):
    if t_access >= t_ref:
        return weight_at(w_ref, t_ref, half_life, t_access) + boost, t_access
    return w_ref + boost * math.exp(-LN2 * (t_ref - t_access) / half_life), t_ref


@njit(nogil=True, cache=True)
def record_accesses(slots, now, F, I, boost_by_type, refresh_by_type, deletes_by_type, thresholds, conf_half_life):  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    """Count one access at ``now`` for each slot of a hot namespace, in place.

    Updates weight state, last access, access count, the TTL anchor (types that
    refresh on read), the next due time and the dirty flag. A slot listed twice
    is counted twice. ``thresholds`` = (demote, archive, delete, delete_bar);
    ``deletes_by_type`` 0: the type is never deleted (its delete bar read as 0).
    """
    for j in range(slots.shape[0]):
        s = slots[j]
        t = I[I_TYPE, s]
        F[F_W_REF, s], F[F_T_REF, s] = _boosted(F[F_W_REF, s], F[F_T_REF, s], F[F_HALF_LIFE, s], boost_by_type[t], now)
        F[F_LAST_ACCESS, s] = max(F[F_LAST_ACCESS, s], now)
        I[I_ACCESS_COUNT, s] += 1
        if refresh_by_type[t] != 0:
            F[F_TTL_ANCHOR, s] = max(F[F_TTL_ANCHOR, s], now)
        F[F_DUE, s] = _due_one(
            TIER_HOT,
            I[I_PINNED, s],
            F[F_W_REF, s],
            F[F_T_REF, s],
            F[F_HALF_LIFE, s],
            F[F_TTL_ANCHOR, s] + F[F_TTL, s],
            F[F_CONF, s],
            F[F_T_CONF, s],
            conf_half_life,
            thresholds[0],
            thresholds[1],
            thresholds[2],
            thresholds[3] if deletes_by_type[t] != 0 else 0.0,
        )
        I[I_DIRTY, s] = 1

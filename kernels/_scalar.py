"""Scalar formulas shared by every kernel (inlined by Numba).

W(t) = w_ref · 2^(-(t - t_ref)/h) for t >= t_ref, and w_ref before t_ref (a
sweep may read the clock just before an access it races with). An access at
t_a sets w_ref = W(t_a) + boost, t_ref = t_a, which equals the seed's
W0·e^(-λt) + Σ boost·e^(-λΔt_i) with λ = ln 2 / h.

Thresholds are crossed *at or below*: a weight threshold θ when W(t) <= θ, the
confidence bar when c(t) <= bar.
"""

import math

from numba import njit

LN2 = math.log(2.0)


@njit(inline="always", cache=True)
def weight_at(w_ref, t_ref, half_life, t):
    dt = t - t_ref
    if dt < 0.0:
        dt = 0.0
    return w_ref * math.exp(-LN2 * dt / half_life)


@njit(inline="always", cache=True)
def crossing_time(w_ref, t_ref, half_life, theta):
    """First time at which W(t) <= theta: -inf if already there (W is held at
    w_ref before t_ref, so no extrapolation backwards), +inf if theta <= 0
    (a zero threshold turns its rule off)."""
    if theta <= 0.0:
        return math.inf
    if w_ref <= theta:
        return -math.inf
    return t_ref + half_life * math.log2(w_ref / theta)


@njit(inline="always", cache=True)
def confidence_at(conf, t_conf, conf_half_life, t):
    if not conf_half_life < math.inf:
        return conf
    dt = t - t_conf
    if dt < 0.0:
        dt = 0.0
    return conf * math.exp(-LN2 * dt / conf_half_life)


@njit(inline="always", cache=True)
def confidence_crossing_time(conf, t_conf, conf_half_life, bar):
    """First time at which the decayed confidence is at or below ``bar``
    (+inf if bar <= 0: a zero bar turns deletion off)."""
    if bar <= 0.0:
        return math.inf
    if conf <= bar:
        return -math.inf
    if not conf_half_life < math.inf:
        return math.inf
    if conf <= 0.0:
        return -math.inf
    return t_conf + conf_half_life * math.log2(conf / bar)

"""Single-memory lifetime arithmetic for the Python side (add, feedback, pin).

Bulk work goes through the kernels; the due time of one memory is computed by
the same kernel (on one-element arrays) so that there is one definition of it.
"""

from __future__ import annotations

import math

import numpy as np

from .kernels import due_times
from .scoring import CompiledPolicy


def weight_at(w_ref: float, t_ref: float, half_life: float, t: float) -> float:
    """W(t) = w_ref · 2^(-(t - t_ref)/half_life); times in seconds."""
    return w_ref * 2.0 ** (-max(t - t_ref, 0.0) / half_life)


def due_at(cp: CompiledPolicy, tier: int, pinned: bool, w_ref: float, t_ref: float, half_life: float,
           expires_at: float, conf: float, t_conf: float) -> float:
    """Next due time of one memory (+inf: never)."""
    out = due_times(
        np.array([tier], np.int64), np.array([1 if pinned else 0], np.int64), np.array([w_ref]),
        np.array([t_ref]), np.array([half_life]), np.array([expires_at]), np.array([conf]),
        np.array([t_conf]), cp.conf_half_life, cp.thresholds,
    )
    return float(out[0])


def feedback_signal(current: float | None, initial: float, step: float, positive: bool) -> float:
    """Move the feedback confidence signal toward 1 (positive) or 0 (negative)
    by ``step`` of the remaining distance; starts at ``initial``."""
    f = initial if current is None or math.isnan(current) else current
    f = f + step * (1.0 - f) if positive else f - step * f
    return min(1.0, max(0.0, f))

"""Single-memory lifetime arithmetic for the Python side (add, feedback, pin).

Bulk work goes through the kernels; the due time of one memory is computed by
the same kernel (on one-element arrays) so that there is one definition of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tierstore.kernels import access_boost, due_times
from tierstore.rules.scoring import CompiledPolicy


def weight_at(w_ref: float, t_ref: float, half_life: float, t: float) -> float:
    """W(t) = w_ref · 2^(-(t - t_ref)/half_life); times in seconds."""
    return w_ref * 2.0 ** (-max(t - t_ref, 0.0) / half_life)


def confidence_at(conf: float, t_conf: float, conf_half_life: float, t: float) -> float:
    """Decayed confidence c(t) = conf · 2^(-(t - t_conf)/h_c); ``h_c`` +inf: no decay."""
    if not math.isfinite(conf_half_life):
        return conf
    return conf * 2.0 ** (-max(t - t_conf, 0.0) / conf_half_life)


def due_at(
    cp: CompiledPolicy,
    tier: int,
    pinned: bool,
    deletes: bool,
    w_ref: float,
    t_ref: float,
    half_life: float,
    expires_at: float,
    conf: float,
    t_conf: float,
) -> float:
    """Next due time of one memory (+inf: never); ``deletes``: its type's
    ``sweep_deletes``."""
    out = due_times(
        np.array([tier], np.int64),
        np.array([1 if pinned else 0], np.int64),
        np.array([1 if deletes else 0], np.int64),
        np.array([w_ref]),
        np.array([t_ref]),
        np.array([half_life]),
        np.array([expires_at]),
        np.array([conf]),
        np.array([t_conf]),
        cp.conf_half_life,
        cp.thresholds,
    )
    return float(out[0])


def feedback_signal(current: float | None, initial: float, step: float, positive: bool) -> float:
    """Move the feedback confidence signal toward 1 (positive) or 0 (negative)
    by ``step`` of the remaining distance; starts at ``initial``."""
    f = initial if current is None or math.isnan(current) else current
    f = f + step * (1.0 - f) if positive else f - step * f
    return min(1.0, max(0.0, f))


@dataclass
class FeedbackOutcome:
    """New confidence and lifetime state after one feedback."""

    conf_feedback: float
    confidence: float
    t_conf: float
    w_ref: float
    t_ref: float
    half_life: float
    ttl: float


def apply_feedback(
    cp: CompiledPolicy,
    *,
    type_idx: int,
    conf_llm: float | None,
    conf_rule: float | None,
    conf_feedback: float | None,
    confidence: float,
    t_conf: float,
    w_ref: float,
    t_ref: float,
    half_life: float,
    ctx_mult: float,
    ttl_override: float | None,
    positive: bool,
    strength: float,
    implicit: bool,
    now: float,
) -> FeedbackOutcome:
    """Feedback on one memory at ``now`` (seconds).

    The feedback signal moves by ``step·strength`` (explicit or implicit step)
    toward 1 or 0, starting from ``feedback_initial`` (or the memory's
    confidence); confidence is re-fused; positive feedback resets confidence
    decay and adds ``boost·strength`` to the weight, negative scales the
    weight by ``1 - negative_weight_penalty·strength``. Half-life and TTL are
    recomputed for the new confidence; the weight is rebased at ``now``."""
    pol = cp.policy
    cpol = pol.confidence
    step = (cpol.implicit_feedback_step if implicit else cpol.feedback_step) * strength
    initial = confidence if cpol.feedback_initial is None else cpol.feedback_initial
    fb = feedback_signal(conf_feedback, initial, step, positive)
    conf = pol.fuse_confidence(conf_llm, conf_rule, fb)
    w = weight_at(w_ref, t_ref, half_life, now)
    if positive:
        w += float(cp.boost_by_type[type_idx]) * strength
        t_conf = now  # reinforced: confidence decay restarts
    else:
        w *= 1.0 - cpol.negative_weight_penalty * strength
    return FeedbackOutcome(
        conf_feedback=fb,
        confidence=conf,
        t_conf=t_conf,
        w_ref=w,
        t_ref=now,
        half_life=cp.half_life(type_idx, conf, ctx_mult),
        ttl=cp.ttl(type_idx, conf, ttl_override, ctx_mult),
    )


def access(
    cp: CompiledPolicy, type_idx: int, w_ref: float, t_ref: float, half_life: float, now: float
) -> tuple[float, float]:
    """``(w_ref, t_ref)`` after one access at ``now`` (the kernel's rule)."""
    w, t = access_boost(
        np.array([w_ref]),
        np.array([t_ref]),
        np.array([half_life]),
        np.array([cp.boost_by_type[type_idx]], np.float64),
        now,
    )
    return float(w[0]), float(t[0])

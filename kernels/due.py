"""Due times and classification for the migrator.

A memory's due time is the earliest time the migrator must act on it in its
current tier: hot: expiry or the demote crossing; warm: expiry or the archive
crossing; cold: the delete crossing (weight below ``delete`` and confidence
below the bar). Pinned memories are never due (+inf). A memory whose type the
sweep does not delete (``deletes`` 0: the policy's ``sweep_deletes``) is
archived where another would be deleted, and never due in the cold tier.

``classify`` compares ``now`` with the same crossing times, so a memory is
never "due" and then kept for a rounding difference.
"""

import math

import numpy as np
from numba import njit

from ._scalar import confidence_crossing_time, crossing_time
from .columns import (
    ACTION_ARCHIVE,
    ACTION_DELETE,
    ACTION_DEMOTE,
    ACTION_KEEP,
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
)


@njit(inline="always", cache=True)
def _delete_time(w_ref, t_ref, half_life, conf, t_conf, conf_half_life, delete, delete_bar):
    t_w = crossing_time(w_ref, t_ref, half_life, delete)
    t_c = confidence_crossing_time(conf, t_conf, conf_half_life, delete_bar)
    return max(t_w, t_c)


@njit(inline="always", cache=True)
def _since(t, t_state):
    """A crossing time of -inf (already crossed when the state was set, at
    ``t_state``) as ``t_state``: a due time is finite or +inf, never -inf,
    which the catalog could not tell from "never"."""
    return t_state if t == -math.inf else t


@njit(cache=True)
def _due_one(
    tier, pinned, w_ref, t_ref, half_life, expires_at, conf, t_conf, conf_half_life, demote, archive, delete, delete_bar
):
    if pinned != 0:
        return math.inf
    if tier == TIER_HOT:
        return min(expires_at, _since(crossing_time(w_ref, t_ref, half_life, demote), t_ref))
    if tier == TIER_WARM:
        return min(expires_at, _since(crossing_time(w_ref, t_ref, half_life, archive), t_ref))
    return max(
        _since(crossing_time(w_ref, t_ref, half_life, delete), t_ref),
        _since(confidence_crossing_time(conf, t_conf, conf_half_life, delete_bar), t_conf),
    )


@njit(nogil=True, cache=True)
def due_times(tier, pinned, deletes, w_ref, t_ref, half_life, expires_at, conf, t_conf, conf_half_life, thresholds):
    """Next due time (seconds, +inf never) of each memory. A threshold its
    weight (or confidence) was already past when that state was set counts as
    crossed at ``t_ref`` (``t_conf``), so such a memory is due at once.

    tier: int array (0 hot, 1 warm, 2 cold); pinned: int array (nonzero:
    pinned); deletes: int array (0: never deleted, the delete bar read as 0);
    float64 arrays for the rest; ``conf_half_life`` +inf for no
    confidence decay; ``thresholds`` = (demote, archive, delete, delete_bar).
    """
    n = tier.shape[0]
    out = np.empty(n, np.float64)
    for i in range(n):
        out[i] = _due_one(
            tier[i],
            pinned[i],
            w_ref[i],
            t_ref[i],
            half_life[i],
            expires_at[i],
            conf[i],
            t_conf[i],
            conf_half_life,
            thresholds[0],
            thresholds[1],
            thresholds[2],
            thresholds[3] if deletes[i] != 0 else 0.0,
        )
    return out


@njit(nogil=True, cache=True)
def classify(now, tier, pinned, deletes, w_ref, t_ref, half_life, expires_at, conf, t_conf, conf_half_life, thresholds):
    """Action for each memory at ``now``: 0 keep, 1 demote, 2 archive, 3 delete.

    Pinned: keep. Cold: delete once both weight and confidence are below their
    bars, else keep. Expired: delete if confidence is below the bar, else
    archive. Otherwise the most severe threshold crossed: delete (only below
    the confidence bar), archive, demote (hot only). ``deletes[i] == 0``: as
    with a delete bar of 0 (never deleted: archived, then kept).
    """
    demote, archive, delete = thresholds[0], thresholds[1], thresholds[2]
    n = tier.shape[0]
    out = np.empty(n, np.int8)
    for i in range(n):
        if pinned[i] != 0:
            out[i] = ACTION_KEEP
            continue
        delete_bar = thresholds[3] if deletes[i] != 0 else 0.0
        t_del = _delete_time(w_ref[i], t_ref[i], half_life[i], conf[i], t_conf[i], conf_half_life, delete, delete_bar)
        if tier[i] == TIER_COLD:
            out[i] = ACTION_DELETE if now >= t_del else ACTION_KEEP
            continue
        if now >= expires_at[i]:
            below_bar = now >= confidence_crossing_time(conf[i], t_conf[i], conf_half_life, delete_bar)
            out[i] = ACTION_DELETE if below_bar else ACTION_ARCHIVE
        elif now >= t_del:
            out[i] = ACTION_DELETE
        elif now >= crossing_time(w_ref[i], t_ref[i], half_life[i], archive):
            out[i] = ACTION_ARCHIVE
        elif tier[i] == TIER_HOT and now >= crossing_time(w_ref[i], t_ref[i], half_life[i], demote):
            out[i] = ACTION_DEMOTE
        else:
            out[i] = ACTION_KEEP
    return out

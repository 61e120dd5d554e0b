"""Fused rerank: filters, masking, five normalised factors, score, top-k.

Factors (raw -> normalised to [0, 1]):

* similarity: cosine -> clipped to [0, 1]
* recency: 2^(-(now - last_access)/recency_half_life) -> floor + (1-floor)·raw
* confidence: decayed confidence -> floor + (1-floor)·raw
* context: (1 + bonus·matched_query_tags)·Π rule multipliers of the memory's
  tags -> raw / ctx_max, capped at 1 (ctx_max: largest raw value possible for
  the query, so a neutral memory and a favoured one stay comparable)
* weight: W(now) -> floor + (1-floor)·min(1, W / W0 of the type)

A type whose ``w0_by_type`` entry is negative (``-W0``) is ranked without
its use: recency and weight are 1 (raw and normalised) and confidence is the
one last stated (``F_CONF``, not decayed); the confidence filter still reads
the decayed value.

Score: product of the normalised factors, or Σ weight_f·factor_f with the
weights summing to 1; times ``1 - P_SUPERSEDED_DEMOTION`` for a superseded
memory (per-memory TTL 0). Ties go to the higher raw similarity, then the lower
candidate index. Excluded: dead slots, types not allowed, confidence below
the minimum, masked tags.
"""

import math

import numpy as np
from numba import njit

from ._scalar import confidence_at, weight_at
from ._topk import topk_order
from .columns import (
    A_CONF_HALF_LIFE,
    A_HEADER,
    A_THRESHOLDS,
    F_CONF,
    F_CREATED,
    F_HALF_LIFE,
    F_LAST_ACCESS,
    F_T_CONF,
    F_T_REF,
    F_TTL_OVERRIDE,
    F_W_REF,
    I_ALIVE,
    I_TYPE,
    MODE_PRODUCT,
    NP,
    NRF,
    NRI,
    P_CONF_HALF_LIFE,
    P_CONTEXT_BONUS,
    P_CTX_MAX,
    P_DISTANCE,
    P_FLOOR,
    P_MIN_CONF,
    P_MODE,
    P_NOW,
    P_RECENCY_HALF_LIFE,
    P_RESOLVE,
    P_RESOLVE_CONF_MARGIN,
    P_RESOLVE_MARGIN,
    P_RESOLVE_MIN_GAP,
    P_RESOLVE_TAG_MARGIN,
    P_SUPERSEDED_DEMOTION,
    P_WEIGHTS,
    Q_HEADER,
    Q_NMASKS,
    Q_NQ_TAGS,
    Q_NRULES,
    Q_NTYPES,
    QUERY_N2_MAX,
    QUERY_N2_MIN,
    R_BEFORE,
    R_F,
    R_I,
    R_NORM,
    R_RAW,
    R_SCORE,
    R_SLOT,
    R_TTL_OVERRIDE,
    SNAPSHOT_F,
    SNAPSHOT_I,
)
from .decay import record_accesses
from .flat import squared_length
from .resolve import resolve_rows

LN2 = math.log(2.0)
# the F rows the rerank reads, in the order it loads them
_LOAD_ROWS = (F_CONF, F_T_CONF, F_LAST_ACCESS, F_W_REF, F_T_REF, F_HALF_LIFE, F_TTL_OVERRIDE)
_NLOAD = len(_LOAD_ROWS)
# rows of the scoring scratch array
_W_SCORE = 0
_W_TIEBREAK = 1
_W_NORM = 2
_W_RAW = 7
_W_LOAD = 12  # the loaded _LOAD_ROWS values
_NW = _W_LOAD + _NLOAD


@njit(inline="always", cache=True)
def _find_sorted(arr, x):
    """Index of x in the sorted array arr, or -1."""
    lo = 0
    hi = arr.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if arr[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    if lo < arr.shape[0] and arr[lo] == x:
        return lo
    return -1


@njit(nogil=True, cache=True)
def _score_candidates(
    cand,
    cand_scores,
    F,
    I,  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    tags,
    params,
    now,
    min_conf,
    type_allowed,
    w0_by_type,
    q_tags,
    rule_tags,
    rule_mult,
    mask_tags,
    sim_scale,
):
    """Score every candidate (arguments as :func:`fused_rerank`; ``now`` and
    ``min_conf`` in place of ``params[P_NOW]`` and ``params[P_MIN_CONF]``; each
    candidate's similarity multiplied by ``sim_scale``, one over the query's
    length, so that the query need not be normalised). Returns one
    float64 array ``(_NW, m)``: rows ``_W_SCORE`` (-inf: excluded),
    ``_W_TIEBREAK``, ``_W_NORM`` + f and ``_W_RAW`` + f, and scratch rows.
    One allocation for all of it, and one for the int scratch: this runs once
    per search."""
    m = cand.shape[0]
    conf_hl = params[P_CONF_HALF_LIFE]
    ctx_max = params[P_CTX_MAX]
    product = params[P_MODE] == MODE_PRODUCT
    rec_hl = params[P_RECENCY_HALF_LIFE]
    floor = params[P_FLOOR]
    bonus = params[P_CONTEXT_BONUS]
    distance = params[P_DISTANCE] != 0.0
    kept_if_superseded = 1.0 - params[P_SUPERSEDED_DEMOTION]
    width = tags.shape[1]

    # Load first, then compute: the candidates' slots are scattered over
    # columns much larger than the caches, and loads in a branch-free loop are
    # independent, so the memory system overlaps their misses; in the scoring
    # loop below they would wait on each other's branches.
    cap = F.shape[1]
    W = np.zeros((_NW, m))
    G = W[_W_LOAD:]
    S = np.zeros((4, m), np.int64)
    slot = S[0]
    alive = S[1]
    typ = S[2]
    first_tag = S[3]
    for j in range(m):
        s = np.int64(cand[j])
        slot[j] = s if 0 <= s < cap else -1
        first_tag[j] = -1
    for j in range(m):
        if slot[j] >= 0:
            alive[j] = I[I_ALIVE, slot[j]]
    for j in range(m):
        if slot[j] >= 0:
            typ[j] = I[I_TYPE, slot[j]]
    if width > 0:
        for j in range(m):
            if slot[j] >= 0:
                first_tag[j] = tags[slot[j], 0]
    for r in range(_NLOAD):
        row = _LOAD_ROWS[r]
        for j in range(m):
            if slot[j] >= 0:
                G[r, j] = F[row, slot[j]]

    score = W[_W_SCORE]
    tiebreak = W[_W_TIEBREAK]
    score[:] = -np.inf
    for j in range(m):
        s = slot[j]
        if s < 0 or alive[j] == 0:
            continue
        t = typ[j]
        if type_allowed[t] == 0:
            continue
        c = confidence_at(G[0, j], G[1, j], conf_hl, now)
        if c < min_conf:
            continue
        masked = False
        overlap = 0
        mult = 1.0
        if first_tag[j] >= 0:
            for w in range(width):
                tg = tags[s, w]
                if tg < 0:
                    break
                if mask_tags.shape[0] > 0 and _find_sorted(mask_tags, tg) >= 0:
                    masked = True
                    break
                if q_tags.shape[0] > 0 and _find_sorted(q_tags, tg) >= 0:
                    overlap += 1
                if rule_tags.shape[0] > 0:
                    r = _find_sorted(rule_tags, tg)
                    if r >= 0:
                        mult *= rule_mult[r]
        if masked:
            continue
        sim = np.float64(cand_scores[j])
        if distance:
            sim = 1.0 - sim
        sim *= sim_scale
        ctx = (1.0 + bonus * overlap) * mult
        w0 = w0_by_type[t]
        if w0 < 0.0:  # a type ranked without its use
            w0 = -w0
            rec = 1.0
            wt = w0
            c = G[0, j]
        else:
            rec = math.exp(-LN2 * max(now - G[2, j], 0.0) / rec_hl)
            wt = weight_at(G[3, j], G[4, j], G[5, j], now)
        n_sim = min(max(sim, 0.0), 1.0)
        n_rec = floor + (1.0 - floor) * rec
        n_conf = floor + (1.0 - floor) * min(max(c, 0.0), 1.0)
        n_ctx = min(ctx / ctx_max, 1.0)
        n_wt = floor + (1.0 - floor) * min(wt / w0, 1.0)
        if product:
            sc = n_sim * n_rec * n_conf * n_ctx * n_wt
        else:
            sc = (
                params[P_WEIGHTS] * n_sim
                + params[P_WEIGHTS + 1] * n_rec
                + params[P_WEIGHTS + 2] * n_conf
                + params[P_WEIGHTS + 3] * n_ctx
                + params[P_WEIGHTS + 4] * n_wt
            )
        if G[6, j] == 0.0:  # superseded
            sc *= kept_if_superseded
        W[_W_NORM, j] = n_sim
        W[_W_NORM + 1, j] = n_rec
        W[_W_NORM + 2, j] = n_conf
        W[_W_NORM + 3, j] = n_ctx
        W[_W_NORM + 4, j] = n_wt
        W[_W_RAW, j] = sim
        W[_W_RAW + 1, j] = rec
        W[_W_RAW + 2, j] = c
        W[_W_RAW + 3, j] = ctx
        W[_W_RAW + 4, j] = wt
        score[j] = sc
        tiebreak[j] = sim
    return W


@njit(nogil=True, cache=True)
def fused_rerank(
    cand,
    cand_scores,
    F,
    I,  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    tags,
    params,
    type_allowed,
    w0_by_type,
    q_tags,
    rule_tags,
    rule_mult,
    mask_tags,
    k,
):
    """Rank candidate slots of one namespace; return the best ``k``.

    cand: slot of each candidate (int64, negative = none; or hnswlib's uint64 labels);
    cand_scores: cosine of each candidate, or inner-product distance (1 - cos)
    when ``params[P_DISTANCE]`` is 1; F, I: the namespace's columns (see
    :mod:`.columns`); tags: int32 ``(capacity, width)`` tag ids padded with -1;
    params: see ``P_*``; type_allowed: uint8 per type; w0_by_type: initial
    weight per type; q_tags, rule_tags, mask_tags: sorted int32 tag ids;
    rule_mult: multiplier of each ``rule_tags`` entry.

    Returns ``(pick, score, norm, raw)``: indices into ``cand`` best first,
    their scores, and their normalised and raw factors ``(len(pick), 5)``.
    """
    W = _score_candidates(
        cand,
        cand_scores,
        F,
        I,
        tags,
        params,
        params[P_NOW],
        params[P_MIN_CONF],
        type_allowed,
        w0_by_type,
        q_tags,
        rule_tags,
        rule_mult,
        mask_tags,
        1.0,
    )
    pick = topk_order(W[_W_SCORE], W[_W_TIEBREAK], k)
    m = pick.shape[0]
    score = np.empty(m)
    norm = np.empty((m, 5))
    raw = np.empty((m, 5))
    for i in range(m):
        j = pick[i]
        score[i] = W[_W_SCORE, j]
        for f in range(5):
            norm[i, f] = W[_W_NORM + f, j]
            raw[i, f] = W[_W_RAW + f, j]
    return pick, score, norm, raw


def pack_query(params, w0_by_type, q_tags, rule_tags, rule_mult, mask_tags):
    """The query inputs of :func:`fused_rerank` (bar the type filter) packed
    for :func:`rank_and_gather`: ``(qf float64, qi int32)`` in the layout of
    ``Q_*`` in :mod:`.columns`. Plain numpy, done once per query context."""
    nt, nq, nr, nm = len(w0_by_type), len(q_tags), len(rule_tags), len(mask_tags)
    if len(rule_mult) != nr or len(params) < NP:
        raise ValueError("pack_query: rule_mult must match rule_tags, params must hold NP entries")
    qf = np.empty(Q_HEADER + nt + nr, np.float64)
    qf[:NP] = params[:NP]
    qf[Q_NTYPES], qf[Q_NQ_TAGS], qf[Q_NRULES], qf[Q_NMASKS] = nt, nq, nr, nm
    qf[Q_HEADER : Q_HEADER + nt] = w0_by_type
    qf[Q_HEADER + nt :] = rule_mult
    qi = np.concatenate(
        [np.asarray(q_tags, np.int32), np.asarray(rule_tags, np.int32), np.asarray(mask_tags, np.int32)]
    )
    return qf, qi


@njit(nogil=True, cache=True)
def rank_and_gather(q, labels, distances, F, I, tags, qf, qi, type_allowed, now, min_conf, k):  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    """:func:`fused_rerank`, then a copy of the picked candidates' columns (the
    snapshot a search keeps after it releases the namespace's lock), in one
    call and packed: the hot search path, where each array crossing into
    Python costs time.
    ``labels``, ``distances``: the candidates and their scores as
    :func:`fused_rerank`'s ``cand`` and ``cand_scores``, either 1-D or as
    hnswlib's ``knn_query`` returns them for one query, ``(1, m)`` (C order).
    ``q``: the query as given to the candidate search, not necessarily
    normalised: the candidates' similarities are divided by its length.
    ``qf``, ``qi``: the parameters, initial weights and tag sets as
    :func:`pack_query` packs them (only read); ``now`` (seconds) and
    ``min_conf`` ([0, 1]) replace the parameters' ``P_NOW`` and ``P_MIN_CONF``.

    Returns ``(rf, ri, n2)``: float64 ``(NRF, m)`` and int64 ``(NRI, m)``,
    column ``j`` for the j-th best candidate: score, normalised and raw
    factors and the ``SNAPSHOT_F`` rows of its ``F`` column; its slot, the
    ``SNAPSHOT_I`` rows of its ``I`` column and, in ``R_BEFORE``, the slot
    of the hit query-time resolution placed it before (-1: none; layout:
    ``R_*`` in :mod:`.columns`); and ``q``'s squared length. With
    ``P_RESOLVE`` set, the picked hits come in :func:`.resolve.resolve_rows`'
    order (margins and gap from ``P_RESOLVE_*``), else best first. When that lies outside
    ``[QUERY_N2_MIN, QUERY_N2_MAX]`` (zero, NaN and inf included) nothing is
    ranked (``m`` = 0): the caller validates and normalises the query and
    searches again. Checking the query here, where its bytes are still in
    cache from the candidate search, is what saves the hot path a separate
    pass over it."""
    n2 = squared_length(q)
    if not QUERY_N2_MIN <= n2 <= QUERY_N2_MAX:
        return np.empty((NRF, 0)), np.empty((NRI, 0), np.int64), n2
    cand = labels.reshape(labels.size)
    cand_scores = distances.reshape(distances.size)
    nt = np.int64(qf[Q_NTYPES])
    nq = np.int64(qf[Q_NQ_TAGS])
    nr = np.int64(qf[Q_NRULES])
    nm = np.int64(qf[Q_NMASKS])
    W = _score_candidates(
        cand,
        cand_scores,
        F,
        I,
        tags,
        qf,
        now,
        min_conf,
        type_allowed,
        qf[Q_HEADER : Q_HEADER + nt],
        qi[:nq],
        qi[nq : nq + nr],
        qf[Q_HEADER + nt : Q_HEADER + nt + nr],
        qi[nq + nr : nq + nr + nm],
        1.0 / math.sqrt(n2),
    )
    pick = topk_order(W[_W_SCORE], W[_W_TIEBREAK], k)
    m = pick.shape[0]
    rf = np.empty((NRF, m))
    ri = np.empty((NRI, m), np.int64)
    ri[R_BEFORE] = -1
    if qf[P_RESOLVE] != 0.0 and m > 1:  # query-time resolution among the picked (kernels.resolve)
        slots = np.empty(m, np.int64)
        sims = np.empty(m)
        created = np.empty(m)
        conf = np.empty(m)
        types = np.empty(m, np.int64)
        for j in range(m):
            s = np.int64(cand[pick[j]])
            slots[j] = s
            sims[j] = W[_W_RAW, pick[j]]
            conf[j] = W[_W_RAW + 2, pick[j]]
            created[j] = F[F_CREATED, s]
            types[j] = I[I_TYPE, s]
        order, before = resolve_rows(
            sims,
            created,
            conf,
            types,
            tags,
            slots,
            qf[P_RESOLVE_MARGIN],
            qf[P_RESOLVE_TAG_MARGIN],
            qf[P_RESOLVE_MIN_GAP],
            qf[P_RESOLVE_CONF_MARGIN],
        )
        pick = pick[order]
        for j in range(m):
            b = before[order[j]]
            if b >= 0:
                ri[R_BEFORE, j] = slots[b]
    for j in range(m):
        ri[R_SLOT, j] = np.int64(cand[pick[j]])
        rf[R_SCORE, j] = W[_W_SCORE, pick[j]]
    for f in range(5):
        for j in range(m):
            rf[R_NORM + f, j] = W[_W_NORM + f, pick[j]]
            rf[R_RAW + f, j] = W[_W_RAW + f, pick[j]]
    for r in range(len(SNAPSHOT_F)):  # one row at a time: independent loads
        row = SNAPSHOT_F[r]
        for j in range(m):
            rf[R_F + r, j] = F[row, ri[R_SLOT, j]]
    for r in range(len(SNAPSHOT_I)):
        row = SNAPSHOT_I[r]
        for j in range(m):
            ri[R_I + r, j] = I[row, ri[R_SLOT, j]]
    return rf, ri, n2


def pack_access(thresholds, conf_half_life, boost_by_type, refresh_by_type, deletes_by_type):
    """The access parameters of :func:`.decay.record_accesses` in one float64
    array for :func:`rank_and_record` (layout ``A_*`` in :mod:`.columns`).
    Plain numpy, done once per policy."""
    nt = len(boost_by_type)
    if len(thresholds) != 4 or len(refresh_by_type) != nt or len(deletes_by_type) != nt:
        raise ValueError("pack_access: 4 thresholds, and one boost, refresh and delete flag per type")
    out = np.empty(A_HEADER + 3 * nt, np.float64)
    out[A_THRESHOLDS : A_THRESHOLDS + 4] = thresholds
    out[A_CONF_HALF_LIFE] = conf_half_life
    out[A_HEADER : A_HEADER + nt] = boost_by_type
    out[A_HEADER + nt : A_HEADER + 2 * nt] = refresh_by_type
    out[A_HEADER + 2 * nt :] = deletes_by_type
    return out


@njit(nogil=True, cache=True)
def rank_and_record(q, labels, distances, F, I, tags, qf, qi, type_allowed, now, min_conf, k, record_min, access):  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    """:func:`rank_and_gather`, then, when ``0 <= record_min <= m`` (``m``
    hits picked, at least one), one access at ``now`` counted for each picked
    hit (:func:`.decay.record_accesses`, its parameters packed by
    :func:`pack_access` in ``access``; the caller holds the namespace's access
    lock). The picked hits' columns in ``rf``/``ri`` are read before the
    access, as a search that records afterwards sees them. One call where two
    would each cross into Python after the candidate search, with its caches
    cold.

    Returns ``(rf, ri, n2, superseded)``: :func:`rank_and_gather`'s values and
    how many picked hits are superseded (their ``R_TTL_OVERRIDE`` is 0)."""
    rf, ri, n2 = rank_and_gather(q, labels, distances, F, I, tags, qf, qi, type_allowed, now, min_conf, k)
    m = ri.shape[1]
    if m > 0 and 0 <= record_min <= m:
        nt = (access.shape[0] - A_HEADER) // 3
        record_accesses(
            ri[R_SLOT],
            now,
            F,
            I,
            access[A_HEADER : A_HEADER + nt],
            access[A_HEADER + nt : A_HEADER + 2 * nt],
            access[A_HEADER + 2 * nt :],
            access[A_THRESHOLDS : A_THRESHOLDS + 4],
            access[A_CONF_HALF_LIFE],
        )
    superseded = 0
    for j in range(m):
        if rf[R_TTL_OVERRIDE, j] == 0.0:
            superseded += 1
    return rf, ri, n2, superseded

"""Plain-Python reference implementations of every public kernel.

Written from the documented formulas (``docs``/DESIGN §3–§4 and the kernels'
docstrings), not from the kernel code: pure Python ``math`` over per-element
Python floats, no Numba, nothing imported from the kernel modules except the
column constants. The property tests in ``tests/kernels/test_kernels.py`` compare each
kernel with its ``ref_<name>`` here. Slow by design; never used by the engine.

Units: times and half-lives in seconds (POSIX seconds, ``+inf``: never);
confidences, similarities and normalised factors in [0, 1]; weights are
dimensionless (``W0`` of a type is its initial weight).

Conventions shared by the kernels (and assumed here):

* ``W(t) = w_ref · 2^(-(t - t_ref)/h)`` (= ``w_ref·e^(-λ(t - t_ref))``,
  ``λ = ln 2 / h``); before ``t_ref`` the weight is ``w_ref`` (no growth
  backwards in time). The same holds for the decayed confidence
  ``c(t) = conf · 2^(-(t - t_conf)/h_c)`` (``h_c = +inf``: no decay).
* A weight threshold ``θ > 0`` is crossed when ``W <= θ``; a threshold
  ``<= 0`` is never crossed. A confidence is below the bar when ``c < bar``.
* Thresholds are ``(demote, archive, delete, delete_bar)`` with
  ``demote > archive > delete``.
"""

from __future__ import annotations

import math

import numpy as np

from .columns import (
    ACTION_ARCHIVE,
    ACTION_DELETE,
    ACTION_DEMOTE,
    ACTION_KEEP,
    F_CONF,
    F_DUE,
    F_HALF_LIFE,
    F_LAST_ACCESS,
    F_T_CONF,
    F_T_REF,
    F_TTL,
    F_TTL_ANCHOR,
    F_TTL_OVERRIDE,
    F_W_REF,
    I_ACCESS_COUNT,
    I_ALIVE,
    I_DIRTY,
    I_PINNED,
    I_TYPE,
    MODE_PRODUCT,
    P_CONF_HALF_LIFE,
    P_CONTEXT_BONUS,
    P_CTX_MAX,
    P_DISTANCE,
    P_FLOOR,
    P_MIN_CONF,
    P_MODE,
    P_NOW,
    P_RECENCY_HALF_LIFE,
    P_SUPERSEDED_DEMOTION,
    P_WEIGHTS,
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
)

__all__ = [
    "ref_access_boost",
    "ref_classify",
    "ref_context_multipliers",
    "ref_decayed_weight",
    "ref_due_times",
    "ref_flat_topk",
    "ref_fused_rerank",
    "ref_inner_products",
    "ref_record_accesses",
    "ref_rescale_lifetimes",
    "ref_top_candidates",
    "weight",
    "confidence",
    "weight_crossing",
    "confidence_crossing",
]


# ---------------------------------------------------------------------------
# scalar formulas


def weight(w_ref: float, t_ref: float, half_life: float, t: float) -> float:
    """``W(t) = w_ref · 2^(-max(t - t_ref, 0)/h)``; times and ``h`` in seconds."""
    w_ref, t_ref, half_life, t = float(w_ref), float(t_ref), float(half_life), float(t)
    elapsed = max(t - t_ref, 0.0)
    return w_ref * 2.0 ** (-elapsed / half_life)


def confidence(conf: float, t_conf: float, conf_half_life: float, t: float) -> float:
    """``c(t) = conf · 2^(-max(t - t_conf, 0)/h_c)``, or ``conf`` when ``h_c`` is +inf."""
    conf, t_conf, conf_half_life, t = float(conf), float(t_conf), float(conf_half_life), float(t)
    if math.isinf(conf_half_life):
        return conf
    elapsed = max(t - t_conf, 0.0)
    return conf * 2.0 ** (-elapsed / conf_half_life)


def weight_crossing(w_ref: float, t_ref: float, half_life: float, theta: float) -> float:
    """Time (s) at which ``W`` reaches ``θ``: ``t_ref + h·log2(w_ref/θ)`` (DESIGN §3).

    ``+inf`` if ``θ <= 0`` (never crossed); ``-inf`` if ``w_ref <= θ`` (already
    there: ``W`` is held at ``w_ref`` before ``t_ref``, never extrapolated back)."""
    w_ref, t_ref, half_life, theta = float(w_ref), float(t_ref), float(half_life), float(theta)
    if theta <= 0.0:
        return math.inf
    if w_ref <= theta:
        return -math.inf
    ratio = w_ref / theta
    if ratio == 0.0:  # underflow (subnormal w_ref): log2(0) = -inf
        return -math.inf
    return t_ref + half_life * math.log2(ratio)


def confidence_crossing(conf: float, t_conf: float, conf_half_life: float, bar: float) -> float:
    """Time (s) from which the decayed confidence is at or below ``bar``.

    ``+inf`` if ``bar <= 0`` or (``conf > bar`` and no decay); ``-inf`` if
    ``conf <= bar`` already; else ``t_conf + h_c·log2(conf/bar)``."""
    conf, t_conf, conf_half_life, bar = float(conf), float(t_conf), float(conf_half_life), float(bar)
    if bar <= 0.0:
        return math.inf
    if conf <= bar:
        return -math.inf
    if math.isinf(conf_half_life):
        return math.inf
    ratio = conf / bar
    if ratio == 0.0:
        return -math.inf
    return t_conf + conf_half_life * math.log2(ratio)


def _f(a) -> list[float]:
    return [float(x) for x in np.asarray(a).ravel().tolist()]


def _i(a) -> list[int]:
    return [int(x) for x in np.asarray(a).ravel().tolist()]


# ---------------------------------------------------------------------------
# decay


def ref_decayed_weight(w_ref, t_ref, half_life, now) -> np.ndarray:
    """``W(now)`` per memory (float64): ``w_ref · 2^(-(now - t_ref)/h)``, no growth before ``t_ref``."""
    out = [weight(w, t, h, now) for w, t, h in zip(_f(w_ref), _f(t_ref), _f(half_life))]
    return np.array(out, np.float64)


def _access(w_ref: float, t_ref: float, half_life: float, boost: float, t_a: float) -> tuple[float, float]:
    """One access at ``t_a`` adds ``boost·e^(-λ(t - t_a))`` to ``W(t)`` for ``t >= t_a``.

    In order (``t_a >= t_ref``): ``(W(t_a) + boost, t_a)``. An access older than
    the reference time is folded in without moving ``t_ref``:
    ``(w_ref + boost·2^(-(t_ref - t_a)/h), t_ref)``, so that the result is the
    seed's ``W0·e^(-λt) + Σ boost·e^(-λΔt_i)`` whatever the order of the calls."""
    if t_a >= t_ref:
        return weight(w_ref, t_ref, half_life, t_a) + boost, t_a
    return w_ref + boost * 2.0 ** (-(t_ref - t_a) / half_life), t_ref


def ref_access_boost(w_ref, t_ref, half_life, boost, t_access):
    """New ``(w_ref, t_ref)`` (float64 arrays) after one access at ``t_access`` (s); see :func:`_access`."""
    w_out, t_out = [], []
    for w, t, h, b in zip(_f(w_ref), _f(t_ref), _f(half_life), _f(boost)):
        nw, nt = _access(w, t, h, b, float(t_access))
        w_out.append(nw)
        t_out.append(nt)
    return np.array(w_out, np.float64), np.array(t_out, np.float64)


def ref_record_accesses(slots, now, F, I, boost_by_type, refresh_by_type, deletes_by_type, thresholds, conf_half_life):  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    """One access at ``now`` per listed slot (twice if listed twice), on copies.

    Per access: weight state as :func:`ref_access_boost` with the type's boost,
    ``last_access = max(last_access, now)``, ``access_count += 1``, TTL anchor
    ``= max(anchor, now)`` for types that refresh on read, ``due`` = the hot-tier
    due time (:func:`ref_due_times`) with ``expires_at = anchor + ttl`` and the
    type's ``deletes_by_type``, dirty = 1.
    Returns the updated ``(F, I)``; the inputs are unchanged."""
    F = np.array(F, np.float64, copy=True)
    I = np.array(I, np.int64, copy=True)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    now = float(now)
    boost = _f(boost_by_type)
    refresh = _i(refresh_by_type)
    deletes = _i(deletes_by_type)
    th = _f(thresholds)
    for s in _i(slots):
        t = int(I[I_TYPE, s])
        w, tr = _access(float(F[F_W_REF, s]), float(F[F_T_REF, s]), float(F[F_HALF_LIFE, s]), boost[t], now)
        F[F_W_REF, s] = w
        F[F_T_REF, s] = tr
        F[F_LAST_ACCESS, s] = max(float(F[F_LAST_ACCESS, s]), now)
        I[I_ACCESS_COUNT, s] += 1
        if refresh[t] != 0:
            F[F_TTL_ANCHOR, s] = max(float(F[F_TTL_ANCHOR, s]), now)
        F[F_DUE, s] = _due(
            TIER_HOT,
            int(I[I_PINNED, s]),
            int(deletes[t]),
            w,
            tr,
            float(F[F_HALF_LIFE, s]),
            float(F[F_TTL_ANCHOR, s]) + float(F[F_TTL, s]),
            float(F[F_CONF, s]),
            float(F[F_T_CONF, s]),
            float(conf_half_life),
            th,
        )
        I[I_DIRTY, s] = 1
    return F, I


# ---------------------------------------------------------------------------
# due times and classification


def _due(tier, pinned, deletes, w_ref, t_ref, half_life, expires_at, conf, t_conf, conf_half_life, th) -> float:
    demote, archive, delete = th[0], th[1], th[2]
    bar = th[3] if deletes != 0 else 0.0  # a type the sweep never deletes: no confidence bar
    if pinned != 0:
        return math.inf

    # a threshold already crossed when the state was set (-inf) is due from then on
    def since(t: float, t_state: float) -> float:
        return t_state if t == -math.inf else t

    if tier == TIER_HOT:
        return min(expires_at, since(weight_crossing(w_ref, t_ref, half_life, demote), t_ref))
    if tier == TIER_WARM:
        return min(expires_at, since(weight_crossing(w_ref, t_ref, half_life, archive), t_ref))
    # cold: deleted once the weight is below `delete` AND the confidence below the bar
    return max(
        since(weight_crossing(w_ref, t_ref, half_life, delete), t_ref),
        since(confidence_crossing(conf, t_conf, conf_half_life, bar), t_conf),
    )


def ref_due_times(tier, pinned, deletes, w_ref, t_ref, half_life, expires_at, conf, t_conf, conf_half_life, thresholds):
    """Next due time (s, +inf never) per memory.

    pinned: +inf. hot: ``min(expires_at, t_ref + h·log2(w_ref/demote))``;
    warm: the same with ``archive``; cold: ``max(t_ref + h·log2(w_ref/delete),
    first time c(t) < bar)``. A crossing already behind the state (``w_ref <=
    θ``, ``conf <= bar``) counts at ``t_ref`` (``t_conf``). ``deletes`` 0: the
    bar is 0 for that memory (never deleted; never due in the cold tier)."""
    th = _f(thresholds)
    rows = zip(
        _i(tier), _i(pinned), _i(deletes), _f(w_ref), _f(t_ref), _f(half_life), _f(expires_at), _f(conf), _f(t_conf)
    )
    out = [_due(tr, p, d, w, t, h, e, c, tc, float(conf_half_life), th) for tr, p, d, w, t, h, e, c, tc in rows]
    return np.array(out, np.float64)


def ref_classify(
    now, tier, pinned, deletes, w_ref, t_ref, half_life, expires_at, conf, t_conf, conf_half_life, thresholds
):
    """Action per memory at ``now`` (int8): 0 keep, 1 demote, 2 archive, 3 delete.

    Evaluated on the decayed values ``W = W(now)``, ``c = c(now)`` (not on
    crossing times): below(θ) is ``θ > 0 and W <= θ``; low_conf is ``c <= bar``.
    pinned → keep; cold → delete if below(delete) and low_conf, else keep;
    ``now >= expires_at`` → delete if low_conf else archive; below(delete) and
    low_conf → delete; below(archive) → archive; hot and below(demote) → demote;
    else keep; ``deletes`` 0: low_conf is never true (the type is never deleted).
    Equal to the crossing-time form (up to rounding at the boundary)."""
    now = float(now)
    demote, archive, delete, bar_if_deleted = _f(thresholds)[:4]
    out = []
    rows = zip(
        _i(tier), _i(pinned), _i(deletes), _f(w_ref), _f(t_ref), _f(half_life), _f(expires_at), _f(conf), _f(t_conf)
    )
    for tr, p, d, w, t, h, e, c0, tc in rows:
        bar = bar_if_deleted if d != 0 else 0.0
        if p != 0:
            out.append(ACTION_KEEP)
            continue
        W = weight(w, t, h, now)
        c = confidence(c0, tc, conf_half_life, now)

        def below(theta: float) -> bool:
            return theta > 0.0 and W <= theta  # noqa: B023 (called in this iteration only)

        low_conf = bar > 0.0 and c <= bar
        delete_now = below(delete) and low_conf
        if tr == TIER_COLD:
            out.append(ACTION_DELETE if delete_now else ACTION_KEEP)
        elif now >= e:
            out.append(ACTION_DELETE if low_conf else ACTION_ARCHIVE)
        elif delete_now:
            out.append(ACTION_DELETE)
        elif below(archive):
            out.append(ACTION_ARCHIVE)
        elif tr == TIER_HOT and below(demote):
            out.append(ACTION_DEMOTE)
        else:
            out.append(ACTION_KEEP)
    return np.array(out, np.int8)


# ---------------------------------------------------------------------------
# exact search


def ref_squared_length(v) -> float:
    return math.fsum(float(x) * float(x) for x in np.asarray(v).tolist())


def ref_inner_products(q, X, n) -> np.ndarray:
    """``X[:n] @ q`` (cosines for normalised rows), summed exactly (``math.fsum``) and rounded to float32."""
    qv = _f(q)
    out = []
    for i in range(int(n)):
        row = _f(X[i])
        out.append(math.fsum(a * b for a, b in zip(row, qv)))
    return np.array(out, np.float32)


def ref_flat_topk(q, X, n, k):
    """Top-``k`` rows of ``X[:n]`` by float32 cosine with ``q``: ``(indices int64,
    similarities float32)``, best first, ties to the lower index."""
    sims = ref_inner_products(q, X, n)
    s = [float(x) for x in sims.tolist()]
    order = sorted(range(len(s)), key=lambda i: (-s[i], i))[: max(int(k), 0)]
    return np.array(order, np.int64), np.array([s[i] for i in order], np.float32)


def ref_top_candidates(sims, alive, n, want) -> np.ndarray:
    """Indices (int64) of the ``want`` highest ``sims[:n]`` among rows with
    ``alive != 0``, best first, ties to the lower index."""
    s = [float(x) for x in np.asarray(sims)[: int(n)].tolist()]
    live = _i(np.asarray(alive)[: int(n)])
    rows = [i for i in range(int(n)) if live[i] != 0]
    rows.sort(key=lambda i: (-s[i], i))
    return np.array(rows[: max(int(want), 0)], np.int64)


# ---------------------------------------------------------------------------
# fused rerank


def ref_fused_rerank(
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
    """Best ``k`` candidates: ``(pick int64, score float64, norm (len, 5), raw (len, 5))``.

    Excluded: negative or out-of-range slot, dead slot, type not allowed, decayed confidence
    ``c < min_conf``, any tag (up to the first -1) in ``mask_tags``.
    Raw factors: sim = cosine (``1 - distance`` when P_DISTANCE is 1);
    recency = ``2^(-max(now - last_access, 0)/recency_half_life)``; c;
    context = ``(1 + bonus·|memory tags ∩ q_tags|)·Π rule_mult[tag]``; W(now).
    Normalised (floor f): sim clipped to [0, 1]; ``f + (1-f)·recency``;
    ``f + (1-f)·clip(c, 0, 1)``; ``min(context/ctx_max, 1)``;
    ``f + (1-f)·min(W/W0[type], 1)``. A type with a negative W0 (``-W0``)
    is ranked without use: recency and W are 1 and W0, c is ``F_CONF`` as
    stated (the ``min_conf`` filter still uses the decayed c). Score: product of the five normalised
    factors (P_MODE 0), or ``Σ weights[i]·norm[i]`` (P_MODE 1), times
    ``1 - P_SUPERSEDED_DEMOTION`` for a superseded memory (F_TTL_OVERRIDE
    0). Order: score
    descending, then raw sim descending, then lower candidate index."""
    p = _f(params)
    now = p[P_NOW]
    conf_hl = p[P_CONF_HALF_LIFE]
    min_conf = p[P_MIN_CONF]
    ctx_max = p[P_CTX_MAX]
    product = p[P_MODE] == MODE_PRODUCT
    rec_hl = p[P_RECENCY_HALF_LIFE]
    floor = p[P_FLOOR]
    bonus = p[P_CONTEXT_BONUS]
    distance = p[P_DISTANCE] != 0.0
    weights = p[P_WEIGHTS : P_WEIGHTS + 5]
    allowed = _i(type_allowed)
    w0 = _f(w0_by_type)
    qset = set(_i(q_tags))
    mset = set(_i(mask_tags))
    rules = dict(zip(_i(rule_tags), _f(rule_mult)))
    tags = np.asarray(tags)

    rows = []  # (score, sim, j, norm, raw)
    for j, (s, cs) in enumerate(zip(_i(cand), _f(cand_scores))):
        if s < 0 or s >= F.shape[1] or int(I[I_ALIVE, s]) == 0:
            continue
        typ = int(I[I_TYPE, s])
        if allowed[typ] == 0:
            continue
        c = confidence(F[F_CONF, s], F[F_T_CONF, s], conf_hl, now)
        if c < min_conf:
            continue
        mem_tags = []
        for tg in _i(tags[s]):
            if tg < 0:
                break
            mem_tags.append(tg)
        if any(tg in mset for tg in mem_tags):
            continue
        overlap = sum(1 for tg in mem_tags if tg in qset)
        mult = 1.0
        for tg in mem_tags:
            mult *= rules.get(tg, 1.0)
        sim = 1.0 - cs if distance else cs
        ctx = (1.0 + bonus * overlap) * mult
        w0_t = w0[typ]
        if w0_t < 0:  # ranked without use: recency and weight 1, confidence as stated
            rec, wt, c, w0_t = 1.0, -w0_t, float(F[F_CONF, s]), -w0_t
        else:
            rec = 2.0 ** (-max(now - float(F[F_LAST_ACCESS, s]), 0.0) / rec_hl)
            wt = weight(F[F_W_REF, s], F[F_T_REF, s], F[F_HALF_LIFE, s], now)
        raw = [sim, rec, c, ctx, wt]
        norm = [
            min(max(sim, 0.0), 1.0),
            floor + (1.0 - floor) * rec,
            floor + (1.0 - floor) * min(max(c, 0.0), 1.0),
            min(ctx / ctx_max, 1.0),
            floor + (1.0 - floor) * min(wt / w0_t, 1.0),
        ]
        if product:
            score = math.prod(norm)
        else:
            score = math.fsum(wf * nf for wf, nf in zip(weights, norm))
        if float(F[F_TTL_OVERRIDE, s]) == 0.0:
            score *= 1.0 - p[P_SUPERSEDED_DEMOTION]
        rows.append((score, sim, j, norm, raw))
    rows.sort(key=lambda r: (-r[0], -r[1], r[2]))
    rows = rows[: max(int(k), 0)]
    pick = np.array([r[2] for r in rows], np.int64)
    scores = np.array([r[0] for r in rows], np.float64)
    norms = np.array([r[3] for r in rows], np.float64).reshape(len(rows), 5)
    raws = np.array([r[4] for r in rows], np.float64).reshape(len(rows), 5)
    return pick, scores, norms, raws


# ---------------------------------------------------------------------------
# context


def ref_context_multipliers(tags, n, rule_tags, rule_mult) -> np.ndarray:
    """Per memory (first ``n`` rows): ``Π rule_mult[r]`` over its tags (up to the
    first -1) that appear in ``rule_tags``; 1.0 when none match."""
    rules = dict(zip(_i(rule_tags), _f(rule_mult)))
    out = []
    for i in range(int(n)):
        m = 1.0
        for tg in _i(tags[i]):
            if tg < 0:
                break
            m *= rules.get(tg, 1.0)
        out.append(m)
    return np.array(out, np.float64)


def ref_rescale_lifetimes(w_ref, t_ref, half_life, ttl, old_mult, new_mult, now):
    """Context multiplier ``old -> new`` at ``now`` (s), ``r = new/old``:
    ``w_ref = W(now)`` under the old half-life, ``t_ref = now``,
    ``half_life·r``, ``ttl·r`` (inf stays inf). Returns four float64 arrays."""
    now = float(now)
    outs: tuple[list[float], list[float], list[float], list[float]] = ([], [], [], [])
    for w, t, h, ttl_i, om, nm in zip(_f(w_ref), _f(t_ref), _f(half_life), _f(ttl), _f(old_mult), _f(new_mult)):
        r = nm / om
        outs[0].append(weight(w, t, h, now))
        outs[1].append(now)
        outs[2].append(h * r)
        outs[3].append(ttl_i * r)
    return tuple(np.array(o, np.float64) for o in outs)


def ref_gather_picks(cand, pick, F, I):  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    """``(slots, F[:, slots].T, I[:, slots].T)`` with ``slots = cand[pick]``
    (int64): what ``rank_and_gather`` copies for the picks."""
    slots = [int(cand[int(j)]) for j in _i(pick)]
    Fp = np.array([[float(F[r, s]) for r in range(F.shape[0])] for s in slots], np.float64).reshape(
        len(slots), F.shape[0]
    )
    Ip = np.array([[int(I[r, s]) for r in range(I.shape[0])] for s in slots], np.int64).reshape(len(slots), I.shape[0])
    return np.array(slots, np.int64), Fp, Ip


# ---------------------------------------------------------------------------
# cold index codes


def ref_sign_codes(vectors) -> np.ndarray:
    """uint64 ``(n, ceil(d/64))``: bit ``j % 64`` of word ``j // 64`` of row
    ``i`` is set when ``vectors[i, j] > 0``; the other bits are zero."""
    rows = np.asarray(vectors)
    n, d = rows.shape
    w = (d + 63) // 64
    out = []
    for i in range(n):
        words = [0] * w
        for j, x in enumerate(_f(rows[i])):
            if x > 0:
                words[j // 64] |= 1 << (j % 64)
        out.append(words)
    return np.array(out, np.uint64).reshape(n, w)


def ref_sign_code(vector) -> np.ndarray:
    """The sign code of one vector: uint64 ``(ceil(d/64),)``."""
    return ref_sign_codes(np.asarray(vector).reshape(1, -1))[0]


def ref_hamming_distances(qcode, codes) -> np.ndarray:
    """Differing bits between ``qcode`` and each row of ``codes`` (int32)."""
    q = [int(x) for x in np.asarray(qcode).tolist()]
    out = []
    for row in np.asarray(codes).tolist():
        out.append(sum(bin(int(a) ^ b).count("1") for a, b in zip(row, q)))
    return np.array(out, np.int32)


def ref_hamming_topk(qcode, codes, m, allowed):
    """``(rows int64, distances int32)``: the ``m`` allowed rows (``allowed``
    empty: every row; else rows whose flag is non-zero) sorted by (distance,
    row index)."""
    dist = [int(x) for x in ref_hamming_distances(qcode, codes).tolist()]
    flags = _i(allowed)
    rows = [i for i in range(len(dist)) if not flags or flags[i] != 0]
    rows.sort(key=lambda i: (dist[i], i))
    rows = rows[: max(int(m), 0)]
    return np.array(rows, np.int64), np.array([dist[i] for i in rows], np.int32)


def ref_sign_scores(query, codes, rows) -> np.ndarray:
    """For each ``r`` in ``rows``: ``Σ_{j<d} query[j] · (+1 if bit j of code
    r is set else -1)``, ``d = len(query)``, summed exactly and rounded to float32."""
    q = _f(query)
    out = []
    for r in _i(rows):
        words = [int(x) for x in np.asarray(codes)[r].tolist()]
        out.append(math.fsum(x if (words[j // 64] >> (j % 64)) & 1 else -x for j, x in enumerate(q)))
    return np.array(out, np.float32)


def ref_int8_codes(vectors) -> tuple[np.ndarray, np.ndarray]:
    """``(codes int8 (n, d), scales float32 (n,))``: per row, ``s = max|v_j| / 127``
    rounded to float32 (1 when that is 0), and ``q_j = round(v_j / s)`` (ties
    to even, Python's ``round``) clipped to [-127, 127]; NaN gives 0."""
    rows = np.asarray(vectors)
    n, d = rows.shape
    codes, scales = [], []
    for i in range(n):
        v = _f(rows[i])
        top = max((abs(x) for x in v if not math.isnan(x)), default=0.0)
        s = float(np.float32(top / 127.0))
        if not s > 0:
            s = 1.0
        scales.append(s)
        codes.append([0 if math.isnan(x) else max(-127, min(127, round(x / s))) for x in v])
    return np.array(codes, np.int8).reshape(n, d), np.array(scales, np.float32)


def ref_int8_scores(query, codes, scales) -> np.ndarray:
    """``scales[i] · Σ_j query[j] · codes[i, j]`` per row, summed exactly and rounded to float32."""
    q = _f(query)
    out = []
    for row, s in zip(np.asarray(codes).tolist(), _f(scales)):
        out.append(s * math.fsum(x * c for x, c in zip(q, row)))
    return np.array(out, np.float32)


# ---------------------------------------------------------------------------
# query-time resolution


def ref_resolve_order(sims, created, conf, types, tags, margin, tag_margin, min_gap, conf_margin):
    """Reference for :func:`kernels.resolve.resolve_order`: hits placed in rank
    order, each just before the first placed hit it replaces (same type,
    created at least ``min_gap`` later, confidence at least the other's minus
    ``conf_margin``, similarity at least the other's minus the margin:
    ``tag_margin`` when they share a tag and ``tag_margin >= margin``, else
    ``margin``; a negative margin never holds; never when both carry tags and
    share none)."""
    tag_sets = [set(row) for row in _tag_rows(tags)]

    def replaces(j: int, i: int) -> bool:
        if int(types[j]) != int(types[i]) or float(created[j]) - float(created[i]) < min_gap:
            return False
        if float(conf[j]) < float(conf[i]) - conf_margin:
            return False
        if tag_sets[j] and tag_sets[i] and not tag_sets[j] & tag_sets[i]:
            return False  # both tagged, none in common
        m = tag_margin if tag_margin >= margin and tag_sets[j] & tag_sets[i] else margin
        return m >= 0.0 and float(sims[j]) >= float(sims[i]) - m

    placed: list[int] = []
    before = [-1] * len(sims)
    for j in range(len(sims)):
        at = next((p for p, i in enumerate(placed) if replaces(j, i)), None)
        if at is None:
            placed.append(j)
        else:
            before[j] = placed[at]
            placed.insert(at, j)
    return np.array(placed, np.int64), np.array(before, np.int64)


def _tag_rows(tags):
    """Each row's ids up to the first -1 (the padding)."""
    out = []
    for row in np.asarray(tags).tolist():
        ids = []
        for t in row:
            if t < 0:
                break
            ids.append(t)
        out.append(ids)
    return out

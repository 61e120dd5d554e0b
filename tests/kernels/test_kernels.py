"""The Numba kernels against the plain-Python reference (tierstore.kernels.reference).

Property tests (hypothesis) compare every kernel with its ``ref_*`` twin on
generated columns; example tests pin specific behaviour (the seed's weight
formula, classification rules, due-time boundaries, rerank filters and modes,
exact top-k order). Times are POSIX seconds around 1.7e9.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tierstore.kernels import (
    ACTION_ARCHIVE,
    ACTION_DELETE,
    ACTION_DEMOTE,
    ACTION_KEEP,
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
    access_boost,
    classify,
    context_multipliers,
    decayed_weight,
    due_times,
    flat_topk,
    fused_rerank,
    inner_products,
    pack_query,
    record_accesses,
    rescale_lifetimes,
    squared_length,
    top_candidates,
)
from tierstore.kernels import columns as C
from tierstore.kernels import reference as R

T0 = 1.7e9
LN2 = math.log(2.0)
E32 = np.empty(0, np.int32)
E64 = np.empty(0, np.float64)

# deadline=None: the first call of a kernel may compile (or load Numba's cache).
# 100 examples per property keep the file at ~15 s once compiled; the same
# properties were also run with 3000 examples each while writing them.
PROPS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# ---------------------------------------------------------------------------
# strategies

times = st.floats(T0 - 1e8, T0 + 1e8)
half_lives = st.one_of(
    st.sampled_from([60.0, 3600.0, 86400.0, 1e8]),
    st.floats(math.log10(60.0), 8.0).map(lambda u: 10.0**u),
)
conf_half_lives = st.one_of(st.just(math.inf), st.floats(4.0, 9.0).map(lambda u: 10.0**u))
weights_st = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 50.0]), st.floats(0.0, 50.0))
confs = st.one_of(st.sampled_from([0.0, 0.3, 1.0]), st.floats(0.0, 1.0))


@st.composite
def thresholds_st(draw):
    """demote > archive > delete > 0; the confidence bar in [0, 1]."""
    delete = draw(st.floats(1e-4, 0.5))
    archive = delete * draw(st.floats(1.01, 10.0))
    demote = archive * draw(st.floats(1.01, 10.0))
    bar = draw(st.one_of(st.sampled_from([0.0, 0.3, 1.0]), st.floats(1e-3, 1.0)))
    return np.array([demote, archive, delete, bar], np.float64)


@st.composite
def age_st(draw, h):
    """How long ago (s): 0, a multiple of the half-life, or an absolute span."""
    return draw(
        st.one_of(
            st.just(0.0),
            st.floats(0.0, 25.0).map(lambda v: min(v * h, 2e8)),
            st.floats(0.0, 1e8),
        )
    )


@st.composite
def lifecycle_st(draw, ordered=True, max_n=12):
    """Columns for due_times/classify. ``ordered``: t_ref and t_conf are <= now."""
    now = draw(times)
    th = draw(thresholds_st())
    conf_hl = draw(conf_half_lives)
    n = draw(st.integers(1, max_n))
    rows = []
    for _ in range(n):
        h = draw(half_lives)
        tier = draw(st.sampled_from([TIER_HOT, TIER_WARM, TIER_COLD]))
        pinned = int(draw(st.integers(0, 4)) == 0)
        deletes = int(draw(st.integers(0, 3)) != 0)  # 0: a type the sweep never deletes
        w_ref = draw(st.one_of(weights_st, st.sampled_from([float(th[0]), float(th[1]), float(th[2])])))
        if ordered:
            t_ref = now - draw(age_st(h))
            t_conf = now - draw(st.one_of(st.just(0.0), st.floats(0.0, 1e8)))
        else:
            t_ref = draw(times)
            t_conf = draw(times)
        expires = draw(st.one_of(st.just(math.inf), st.just(now), st.floats(-1e6, 1e6).map(lambda d, now=now: now + d)))
        conf = draw(st.one_of(confs, st.just(float(th[3]))))
        rows.append((tier, pinned, deletes, w_ref, t_ref, h, expires, conf, t_conf))
    cols = list(zip(*rows))
    args = (
        np.array(cols[0], np.int64),
        np.array(cols[1], np.int64),
        np.array(cols[2], np.int64),
        *(np.array(c, np.float64) for c in cols[3:]),
    )
    # args: tier, pinned, deletes, w_ref, t_ref, half_life, expires_at, conf, t_conf
    return now, args, conf_hl, th


def _unit_rows(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    norms = np.linalg.norm(a, axis=-1, keepdims=True)
    a = np.where(norms > 0, a / np.where(norms > 0, norms, 1.0), 0.0)
    if a.ndim == 1:
        if not np.any(a):
            a[0] = 1.0
    else:
        zero = ~np.any(a, axis=1)
        a[zero, 0] = 1.0
    return a.astype(np.float32)


# ---------------------------------------------------------------------------
# helpers


def close(a: float, b: float, rtol: float = 1e-9, atol: float = 1e-12) -> bool:
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return a == b
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def assert_times_close(kernel, ref):
    """Due/crossing times: same infinities, else within 1e-6 s + 1e-12 relative."""
    for i, (a, b) in enumerate(zip(np.asarray(kernel).tolist(), np.asarray(ref).tolist())):
        assert close(a, b, rtol=1e-12, atol=1e-6), (i, a, b)


def assert_topk_equivalent(k_idx, k_val, k_tie, ref_score: dict, k: int, rtol: float, atol: float):
    """Kernel top-k against reference scores of every eligible entry.

    k_idx/k_val/k_tie: kernel picks, their kernel scores and tiebreak values.
    ref_score: {index: reference score} for every eligible entry.
    The kernel's own order must be exact (score desc, tiebreak desc, index asc);
    against the reference, order and selection may differ only between entries
    whose reference scores are equal within tolerance."""
    k_idx = [int(x) for x in k_idx]
    k_val = [float(x) for x in k_val]
    k_tie = [float(x) for x in k_tie]
    want = max(0, min(k, len(ref_score)))
    assert len(k_idx) == want, (k_idx, want)
    assert len(set(k_idx)) == len(k_idx), k_idx
    for i in k_idx:
        assert i in ref_score, f"kernel picked ineligible entry {i}"
    for a in range(len(k_idx) - 1):
        key_a = (k_val[a], k_tie[a], -k_idx[a])
        key_b = (k_val[a + 1], k_tie[a + 1], -k_idx[a + 1])
        assert key_a > key_b, ("kernel order", a, key_a, key_b)
    for i, v in zip(k_idx, k_val):
        assert close(v, ref_score[i], rtol, atol), (i, v, ref_score[i])

    def tol(x, y):
        return atol + rtol * max(abs(x), abs(y))

    if k_idx:
        worst = min(ref_score[i] for i in k_idx)
        for j, s in ref_score.items():
            if j not in k_idx:
                assert s <= worst + tol(s, worst), ("better entry left out", j, s, worst)
        for a, b in zip(k_idx, k_idx[1:]):
            sa, sb = ref_score[a], ref_score[b]
            assert sa >= sb - tol(sa, sb), ("reference order", a, b, sa, sb)


# ---------------------------------------------------------------------------
# decay


@PROPS
@given(
    st.integers(1, 16).flatmap(
        lambda n: st.tuples(
            st.lists(weights_st, min_size=n, max_size=n),
            st.lists(times, min_size=n, max_size=n),
            st.lists(half_lives, min_size=n, max_size=n),
            times,
        )
    )
)
def test_decayed_weight_matches_reference(case):
    w, t, h, now = case
    w, t, h = (np.array(x, np.float64) for x in (w, t, h))
    got = decayed_weight(w, t, h, now)
    want = R.ref_decayed_weight(w, t, h, now)
    assert got.dtype == np.float64 and got.shape == w.shape
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)
    # no growth before t_ref, decay after it
    for i in range(len(w)):
        if now <= t[i]:
            assert got[i] == w[i]
        else:
            assert got[i] <= w[i]


@PROPS
@given(
    st.integers(1, 16).flatmap(
        lambda n: st.tuples(
            st.lists(
                st.tuples(
                    weights_st,
                    st.one_of(st.just(0.0), st.floats(0.0, 1e8), st.floats(-1e6, 0.0)),
                    half_lives,
                    st.floats(0.0, 5.0),
                ),
                min_size=n,
                max_size=n,
            ),
            times,
        )
    )
)
def test_access_boost_matches_reference(case):
    rows, t_access = case
    w = np.array([r[0] for r in rows])
    t = np.array([t_access - r[1] for r in rows])  # negative age: the access is older than t_ref
    h = np.array([r[2] for r in rows])
    b = np.array([r[3] for r in rows])
    w_in, t_in = w.copy(), t.copy()
    gw, gt = access_boost(w, t, h, b, t_access)
    rw, rt = R.ref_access_boost(w, t, h, b, t_access)
    np.testing.assert_allclose(gw, rw, rtol=1e-9, atol=1e-300)
    assert np.array_equal(gt, rt)
    assert np.array_equal(w, w_in) and np.array_equal(t, t_in)  # inputs unchanged


def test_weight_after_two_accesses_matches_seed_formula():
    """W0·e^(-λ(t-t0)) + Σ boost·e^(-λ(t - t_i)), λ = ln2/h, by hand."""
    h, w0, boost = 86400.0 * 3, 1.0, 0.5
    lam = LN2 / h
    t0 = T0
    t1, t2, t3 = t0 + 3600.0 * 7, t0 + 86400.0 * 2.5, t0 + 86400.0 * 10
    w, t = np.array([w0]), np.array([t0])
    hh, bb = np.array([h]), np.array([boost])
    w, t = access_boost(w, t, hh, bb, t1)
    w, t = access_boost(w, t, hh, bb, t2)
    got = decayed_weight(w, t, hh, t3)[0]
    want = w0 * math.exp(-lam * (t3 - t0)) + boost * math.exp(-lam * (t3 - t1)) + boost * math.exp(-lam * (t3 - t2))
    assert abs(got - want) <= 1e-9 * want
    # the same through record_accesses (in place on columns), type 0 boosts by 0.5
    F = np.zeros((C.NF, 1))
    I = np.zeros((C.NI, 1), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F[C.F_W_REF, 0], F[C.F_T_REF, 0], F[C.F_HALF_LIFE, 0] = w0, t0, h
    F[C.F_CONF, 0], F[C.F_T_CONF, 0], F[C.F_TTL, 0], F[C.F_TTL_ANCHOR, 0] = 0.9, t0, math.inf, t0
    th = np.array([0.3, 0.1, 0.01, 0.3])
    for ta in (t1, t2):
        record_accesses(
            np.array([0], np.int64),
            ta,
            F,
            I,
            np.array([boost]),
            np.zeros(1, np.uint8),
            np.ones(1, np.uint8),
            th,
            math.inf,
        )
    got2 = decayed_weight(F[C.F_W_REF], F[C.F_T_REF], F[C.F_HALF_LIFE], t3)[0]
    assert abs(got2 - want) <= 1e-9 * want
    assert I[C.I_ACCESS_COUNT, 0] == 2


def test_out_of_order_accesses_give_the_seed_sum():
    """Two searches may read the clock in one order and record in the other: an
    access older than t_ref adds its boost decayed to t_ref (order-independent sum)."""
    h, boost = 3600.0, 0.5
    t0, t1, t2, t3 = T0, T0 + 600.0, T0 + 1800.0, T0 + 7200.0
    hh, bb = np.array([h]), np.array([boost])
    w, t = np.array([1.0]), np.array([t0])
    w, t = access_boost(w, t, hh, bb, t2)  # recorded first
    w, t = access_boost(w, t, hh, bb, t1)  # older access recorded second
    got = decayed_weight(w, t, hh, t3)[0]
    lam = LN2 / h
    want = math.exp(-lam * (t3 - t0)) + boost * math.exp(-lam * (t3 - t1)) + boost * math.exp(-lam * (t3 - t2))
    ref_w, ref_t = R.ref_access_boost(*R.ref_access_boost([1.0], [t0], [h], [boost], t2), [h], [boost], t1)
    assert abs(R.ref_decayed_weight(ref_w, ref_t, [h], t3)[0] - want) <= 1e-9 * want  # the reference is right
    assert abs(got - want) <= 1e-9 * want
    assert t[0] == t2  # the reference time stays at the latest access
    # record_accesses: same sum; last access and TTL anchor do not move backwards
    F = np.zeros((C.NF, 1))
    I = np.zeros((C.NI, 1), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F[C.F_W_REF, 0], F[C.F_T_REF, 0], F[C.F_HALF_LIFE, 0] = 1.0, t0, h
    F[C.F_CONF, 0], F[C.F_T_CONF, 0], F[C.F_TTL, 0], F[C.F_TTL_ANCHOR, 0] = 0.9, t0, 86400.0, t0
    th = np.array([0.3, 0.1, 0.01, 0.3])
    for ta in (t2, t1):
        record_accesses(np.array([0], np.int64), ta, F, I, bb, np.ones(1, np.uint8), np.ones(1, np.uint8), th, math.inf)
    assert abs(decayed_weight(F[C.F_W_REF], F[C.F_T_REF], F[C.F_HALF_LIFE], t3)[0] - want) <= 1e-9 * want
    assert F[C.F_LAST_ACCESS, 0] == F[C.F_TTL_ANCHOR, 0] == F[C.F_T_REF, 0] == t2
    assert I[C.I_ACCESS_COUNT, 0] == 2


@st.composite
def hot_namespace_st(draw):
    cap = draw(st.integers(1, 10))
    ntypes = draw(st.integers(1, 3))
    now = draw(times)
    th = draw(thresholds_st())
    conf_hl = draw(conf_half_lives)
    F = np.zeros((C.NF, cap))
    I = np.zeros((C.NI, cap), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    for s in range(cap):
        h = draw(half_lives)
        F[C.F_HALF_LIFE, s] = h
        F[C.F_W_REF, s] = draw(weights_st)
        # some reference times, last accesses and anchors after now: out-of-order accesses
        F[C.F_T_REF, s] = now - draw(st.one_of(age_st(h), st.floats(-1e5, 0.0)))
        F[C.F_CREATED, s] = F[C.F_T_REF, s] - draw(st.floats(0.0, 1e6))
        F[C.F_LAST_ACCESS, s] = now - draw(st.floats(-1e5, 1e8))
        F[C.F_CONF, s] = draw(confs)
        F[C.F_T_CONF, s] = now - draw(st.floats(0.0, 1e8))
        F[C.F_TTL, s] = draw(st.one_of(st.just(math.inf), st.floats(60.0, 1e8)))
        F[C.F_TTL_ANCHOR, s] = now - draw(st.floats(-1e5, 1e8))
        F[C.F_DUE, s] = draw(times)
        F[C.F_CTX_MULT, s] = 1.0
        F[C.F_CONF_LLM :, s] = np.nan
        I[C.I_TYPE, s] = draw(st.integers(0, ntypes - 1))
        I[C.I_ACCESS_COUNT, s] = draw(st.integers(0, 100))
        I[C.I_PINNED, s] = int(draw(st.integers(0, 4)) == 0)
        I[C.I_ALIVE, s] = 1
    slots = draw(st.lists(st.integers(0, cap - 1), min_size=0, max_size=2 * cap))
    boost = np.array(draw(st.lists(st.floats(0.0, 5.0), min_size=ntypes, max_size=ntypes)))
    refresh = np.array(draw(st.lists(st.integers(0, 1), min_size=ntypes, max_size=ntypes)), np.uint8)
    deletes = np.array(draw(st.lists(st.integers(0, 1), min_size=ntypes, max_size=ntypes)), np.uint8)
    return np.array(slots, np.int64), now, F, I, boost, refresh, deletes, th, conf_hl


@PROPS
@given(hot_namespace_st())
def test_record_accesses_matches_reference(case):
    slots, now, F, I, boost, refresh, deletes, th, conf_hl = case  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    rF, rI = R.ref_record_accesses(slots, now, F, I, boost, refresh, deletes, th, conf_hl)
    kF, kI = F.copy(), I.copy()
    record_accesses(slots, now, kF, kI, boost, refresh, deletes, th, conf_hl)
    assert np.array_equal(kI, rI)
    rows = [r for r in range(C.NF) if r != C.F_DUE]
    np.testing.assert_allclose(kF[rows], rF[rows], rtol=1e-9, atol=1e-300, equal_nan=True)
    assert_times_close(kF[C.F_DUE], rF[C.F_DUE])
    untouched = sorted(set(range(F.shape[1])) - set(slots.tolist()))
    assert np.array_equal(kF[:, untouched], F[:, untouched], equal_nan=True)
    assert np.array_equal(kI[:, untouched], I[:, untouched])


def test_record_accesses_counts_duplicates_refreshes_ttl_and_keeps_pinned_never_due():
    now, h = T0 + 1000.0, 3600.0
    F = np.zeros((C.NF, 3))
    I = np.zeros((C.NI, 3), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F[C.F_W_REF], F[C.F_T_REF], F[C.F_HALF_LIFE] = 1.0, now - h, h
    F[C.F_TTL], F[C.F_TTL_ANCHOR] = 7200.0, now - 5000.0
    F[C.F_CONF], F[C.F_T_CONF] = 0.9, now
    I[C.I_TYPE] = [0, 1, 1]
    I[C.I_PINNED, 2] = 1
    th = np.array([0.3, 0.1, 0.01, 0.3])
    boost = np.array([0.5, 0.25])
    refresh = np.array([0, 1], np.uint8)
    record_accesses(np.array([0, 0, 1, 2], np.int64), now, F, I, boost, refresh, np.ones(2, np.uint8), th, math.inf)
    assert I[C.I_ACCESS_COUNT].tolist() == [2, 1, 1]
    assert F[C.F_W_REF, 0] == pytest.approx(0.5 + 0.5 + 0.5, rel=1e-12)  # W(now)=0.5, two boosts
    assert F[C.F_W_REF, 1] == pytest.approx(0.5 + 0.25, rel=1e-12)
    assert F[C.F_T_REF].tolist() == [now] * 3 and F[C.F_LAST_ACCESS].tolist() == [now] * 3
    assert F[C.F_TTL_ANCHOR].tolist() == [now - 5000.0, now, now]  # type 1 refreshes on read
    # slot 0: expires at now - 5000 + 7200 = now + 2200, demote crossing now + h·log2(1.5/0.3) later
    assert F[C.F_DUE, 0] == now + 2200.0
    assert F[C.F_DUE, 1] == pytest.approx(min(now + 7200.0, now + h * math.log2(0.75 / 0.3)), abs=1e-6)
    assert F[C.F_DUE, 2] == math.inf
    assert I[C.I_DIRTY].tolist() == [1, 1, 1]


# ---------------------------------------------------------------------------
# due times and classification


@PROPS
@given(lifecycle_st(ordered=False))
def test_due_times_matches_reference(case):
    _, args, conf_hl, th = case
    got = due_times(*args, conf_hl, th)
    assert got.dtype == np.float64
    assert_times_close(got, R.ref_due_times(*args, conf_hl, th))
    pinned = args[1]
    assert all(got[i] == math.inf for i in range(len(got)) if pinned[i])


# reference actions sampled within ±1 ms of now: rounding between the kernel's
# crossing times and the reference's decayed values may move a boundary by ~1e-6 s
_NEAR = [k * 2.5e-4 for k in range(-4, 5)]


@PROPS
@given(lifecycle_st(ordered=True))
def test_classify_matches_reference(case):
    now, args, conf_hl, th = case
    got = classify(now, *args, conf_hl, th)
    assert got.dtype == np.int8
    ref_now = R.ref_classify(now, *args, conf_hl, th)
    near = [R.ref_classify(now + d, *args, conf_hl, th) for d in _NEAR]
    for i in range(len(got)):
        options = {int(a[i]) for a in near}
        if len(options) == 1:
            assert got[i] == ref_now[i], (i, int(got[i]), int(ref_now[i]))
        else:  # exactly on a boundary: either side is right
            assert int(got[i]) in options, (i, int(got[i]), options)


@PROPS
@given(lifecycle_st(ordered=False))
def test_classify_pinned_is_always_keep(case):
    now, args, conf_hl, th = case
    args = list(args)
    args[1] = np.ones_like(args[1])
    for t in (now, now - 1e9, now + 1e9, math.inf):
        assert np.all(classify(t, *args, conf_hl, th) == ACTION_KEEP)


@PROPS
@given(lifecycle_st(ordered=False))
def test_due_time_is_the_first_actionable_time(case):
    """Never -inf; actionable at due, not at due - 1 s unless a threshold was
    already crossed when its state was set (then it is actionable from then
    on), and the reference agrees just after due."""
    _, args, conf_hl, th = case
    due = due_times(*args, conf_hl, th)
    tier, pinned, deletes, w_ref, t_ref, h, _, conf, t_conf = args
    assert not np.any(due == -math.inf)
    for i in range(len(due)):
        d = float(due[i])
        if pinned[i] or not math.isfinite(d) or not d - 1.0 < d:
            continue
        one = tuple(a[i : i + 1] for a in args)
        assert classify(d, *one, conf_hl, th)[0] != ACTION_KEEP, (i, d, int(tier[i]))
        crossed_at_state = (
            any(R.weight_crossing(w_ref[i], t_ref[i], h[i], x) == -math.inf for x in th[:3])
            or R.confidence_crossing(conf[i], t_conf[i], conf_hl, th[3] if deletes[i] else 0.0) == -math.inf
        )
        if not crossed_at_state:
            assert classify(d - 1.0, *one, conf_hl, th)[0] == ACTION_KEEP, (i, d, int(tier[i]))
        assert R.ref_classify(d + 1e-3, *one, conf_hl, th)[0] != ACTION_KEEP, (i, d, int(tier[i]))


def _one(tier, w_ref, t_ref, h, expires, conf, t_conf, pinned=0, deletes=1):
    return (
        np.array([tier], np.int64),
        np.array([pinned], np.int64),
        np.array([deletes], np.int64),
        np.array([w_ref]),
        np.array([t_ref]),
        np.array([h]),
        np.array([expires]),
        np.array([conf]),
        np.array([t_conf]),
    )


TH = np.array([0.3, 0.1, 0.01, 0.3])  # demote, archive, delete, confidence bar


def test_a_threshold_crossed_when_the_state_was_set_makes_the_memory_due_then():
    """Weight (or confidence) already past a threshold at t_ref (t_conf), e.g.
    after negative feedback: due at that time, finite, so the catalog's due
    index (which stores +inf, never, as NULL) returns it to the next sweep."""
    now, h = T0, 3600.0
    cases = [
        (_one(TIER_HOT, 0.25, now, h, now + 7200.0, 0.9, now - 50.0), now),  # below demote (0.3)
        (_one(TIER_HOT, 0.25, now, h, now - 10.0, 0.9, now), now - 10.0),  # expired earlier still
        (_one(TIER_WARM, 0.05, now - 5.0, h, math.inf, 0.9, now), now - 5.0),  # below archive (0.1)
        (_one(TIER_COLD, 0.005, now - 5.0, h, math.inf, 0.2, now - 9.0), now - 5.0),  # both bars, the later
        (_one(TIER_COLD, 0.005, now - 9.0, h, math.inf, 0.2, now - 5.0), now - 5.0),
    ]
    for args, want in cases:
        got = due_times(*args, math.inf, TH)
        assert got[0] == want, (args, got)
        assert R.ref_due_times(*args, math.inf, TH)[0] == want
        assert classify(want, *args, math.inf, TH)[0] != ACTION_KEEP
    # one bar crossed at the state, the other later: the later crossing decides
    args = _one(TIER_COLD, 1.0, now, h, math.inf, 0.2, now)
    assert due_times(*args, math.inf, TH)[0] == pytest.approx(now + h * math.log2(1.0 / 0.01))


def test_classify_cold_deletes_only_below_both_bars():
    now, h = T0, 3600.0
    low_w = (1.0, now - 10 * h)  # W = 1/1024 < delete
    high_w = (1.0, now)
    cases = [
        (low_w, 0.9, ACTION_KEEP),  # weight below, confidence above
        (high_w, 0.1, ACTION_KEEP),  # confidence below, weight above
        (low_w, 0.1, ACTION_DELETE),  # both below
        (low_w, 0.3, ACTION_DELETE),  # thresholds are crossed at or below: exactly at the bar counts
    ]
    for (w, t), conf, want in cases:
        got = classify(now, *_one(TIER_COLD, w, t, h, now - 1.0, conf, now), math.inf, TH)[0]
        assert got == want, ((w, t), conf, got, want)  # expiry (now - 1) never matters in cold
    # a decaying confidence gets there on its own: 0.6 -> 0.3 after one confidence half-life
    args = _one(TIER_COLD, 1.0, now - 10 * h, h, math.inf, 0.6, now)
    assert classify(now + 86400.0 - 1.0, *args, 86400.0, TH)[0] == ACTION_KEEP
    assert classify(now + 86400.0 + 1.0, *args, 86400.0, TH)[0] == ACTION_DELETE


def test_classify_expiry_archives_or_deletes_below_the_confidence_bar():
    now, h = T0, 86400.0
    for tier in (TIER_HOT, TIER_WARM):
        fresh = (1.0, now)  # W = 1, no weight threshold crossed
        assert classify(now, *_one(tier, *fresh, h, now, 0.9, now), math.inf, TH)[0] == ACTION_ARCHIVE
        assert classify(now, *_one(tier, *fresh, h, now, 0.1, now), math.inf, TH)[0] == ACTION_DELETE
        assert classify(now, *_one(tier, *fresh, h, now + 1.0, 0.1, now), math.inf, TH)[0] == ACTION_KEEP
        assert classify(now, *_one(tier, *fresh, h, now - 1.0, 0.9, now), math.inf, TH)[0] == ACTION_ARCHIVE
        # pinned and expired: kept
        args = _one(tier, *fresh, h, now - 1.0, 0.1, now, pinned=1)
        assert classify(now, *args, math.inf, TH)[0] == ACTION_KEEP


def test_a_type_never_deleted_is_archived_and_then_kept():
    """deletes = 0 (the type's sweep_deletes off): where another memory would
    be deleted it is archived, and once cold it is never due again."""
    now, h = T0, 3600.0
    gone = (1.0, now - 10 * h)  # W = 1/1024: below every weight threshold
    for tier in (TIER_HOT, TIER_WARM):
        deleted = _one(tier, *gone, h, math.inf, 0.1, now)
        kept = _one(tier, *gone, h, math.inf, 0.1, now, deletes=0)
        assert classify(now, *deleted, math.inf, TH)[0] == ACTION_DELETE
        assert classify(now, *kept, math.inf, TH)[0] == ACTION_ARCHIVE
        expired = _one(tier, 1.0, now, h, now - 1.0, 0.1, now, deletes=0)  # expired, confidence below the bar
        assert classify(now, *expired, math.inf, TH)[0] == ACTION_ARCHIVE
    cold = _one(TIER_COLD, *gone, h, math.inf, 0.1, now, deletes=0)
    assert classify(now + 1e9, *cold, 86400.0, TH)[0] == ACTION_KEEP
    assert due_times(*cold, 86400.0, TH)[0] == math.inf
    assert R.ref_due_times(*cold, 86400.0, TH)[0] == math.inf
    # the same memory of a type that is deleted: due at once
    assert due_times(*_one(TIER_COLD, *gone, h, math.inf, 0.1, now), 86400.0, TH)[0] == now


def test_classify_weight_thresholds_hot_and_warm():
    now, h = T0, 3600.0
    inf = math.inf
    # W(now) = 2^-k for age k·h: k=1 -> 0.5 (keep), k=2 -> 0.25 (demote in hot), k=4 -> 0.0625 (archive),
    # k=8 -> 0.0039 below delete: archive unless confidence is below the bar, then delete
    expected = {
        1: (ACTION_KEEP, ACTION_KEEP),
        2: (ACTION_DEMOTE, ACTION_KEEP),
        4: (ACTION_ARCHIVE, ACTION_ARCHIVE),
        8: (ACTION_ARCHIVE, ACTION_ARCHIVE),
    }
    for k, (hot_want, warm_want) in expected.items():
        assert classify(now, *_one(TIER_HOT, 1.0, now - k * h, h, inf, 0.9, now), inf, TH)[0] == hot_want
        assert classify(now, *_one(TIER_WARM, 1.0, now - k * h, h, inf, 0.9, now), inf, TH)[0] == warm_want
    for tier in (TIER_HOT, TIER_WARM):
        assert classify(now, *_one(tier, 1.0, now - 8 * h, h, inf, 0.1, now), inf, TH)[0] == ACTION_DELETE


def test_due_time_boundary_is_inclusive():
    """A hot memory due at t is not actionable at t - 1 and is actionable at t."""
    t_ref, h = T0, 3600.0
    args = _one(TIER_HOT, 0.6, t_ref, h, math.inf, 0.9, t_ref)  # 0.6 -> 0.3 (demote) after one half-life
    due = due_times(*args, math.inf, TH)[0]
    assert due == pytest.approx(t_ref + h, abs=1e-6)
    assert classify(due - 1.0, *args, math.inf, TH)[0] == ACTION_KEEP
    assert classify(due, *args, math.inf, TH)[0] == ACTION_DEMOTE
    # expiry first: due is the expiry time, and at exactly that time the memory is expired
    args = _one(TIER_WARM, 0.6, t_ref, h, t_ref + 100.0, 0.9, t_ref)
    due = due_times(*args, math.inf, TH)[0]
    assert due == t_ref + 100.0
    assert classify(due - 1.0, *args, math.inf, TH)[0] == ACTION_KEEP
    assert classify(due, *args, math.inf, TH)[0] == ACTION_ARCHIVE
    # cold: due when both the weight (delete) and the decaying confidence (bar) are below
    args = _one(TIER_COLD, 0.02, t_ref, h, math.inf, 0.6, t_ref)
    due = due_times(*args, 86400.0, TH)[0]
    assert due == pytest.approx(max(t_ref + h, t_ref + 86400.0), abs=1e-6)
    assert classify(due - 1.0, *args, 86400.0, TH)[0] == ACTION_KEEP
    assert classify(due, *args, 86400.0, TH)[0] == ACTION_DELETE
    # pinned: never due
    assert due_times(*_one(TIER_HOT, 0.0, t_ref, h, t_ref, 0.0, t_ref, pinned=1), 86400.0, TH)[0] == math.inf


def test_classify_agrees_with_decayed_weight_when_t_ref_is_after_now():
    now, h = T0, 86400.0
    args = _one(TIER_HOT, 0.2, now + h, h, math.inf, 0.9, now)  # e.g. an access recorded with a later clock
    assert decayed_weight(args[3], args[4], args[5], now)[0] == 0.2  # below demote (0.3) now
    assert classify(now, *args, math.inf, TH)[0] == ACTION_DEMOTE


# ---------------------------------------------------------------------------
# exact search


@st.composite
def vectors_st(draw, max_n=24, max_d=96):
    n_rows = draw(st.integers(1, max_n))
    n = draw(st.integers(0, n_rows))
    d = draw(st.integers(1, max_d))
    elems = st.floats(-1.0, 1.0, width=32)
    X = draw(hnp.arrays(np.float32, (n_rows, d), elements=elems))
    if draw(st.booleans()) and n_rows > 1:  # duplicate rows: exact ties
        src = draw(st.lists(st.integers(0, n_rows - 1), min_size=n_rows, max_size=n_rows))
        X = X[src]
    q = draw(hnp.arrays(np.float32, (d,), elements=elems))
    k = draw(st.integers(0, n_rows + 2))
    return _unit_rows(q), np.ascontiguousarray(_unit_rows(X)), n, k


@PROPS
@given(vectors_st())
def test_inner_products_matches_reference(case):
    q, X, n, _ = case
    got = inner_products(q, X, n)
    assert got.dtype == np.float32 and got.shape == (n,)
    np.testing.assert_allclose(got, R.ref_inner_products(q, X, n), rtol=0, atol=1e-5)


@PROPS
@given(
    st.lists(
        st.one_of(
            st.floats(width=32, allow_nan=False, allow_infinity=False), st.sampled_from([0.0, 1.0, -1.0, 3e38, -3e38])
        ),
        max_size=64,
    )
)
def test_squared_length_matches_reference(xs):
    """Accumulated in float64, so no finite float32 vector overflows it."""
    v = np.array(xs, np.float32)
    got = squared_length(v)
    want = R.ref_squared_length(v)
    assert math.isfinite(got)
    assert got == pytest.approx(want, rel=1e-12, abs=0.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_squared_length_is_not_finite_for_nan_or_inf(bad):
    v = np.array([1.0, bad, 2.0], np.float32)
    assert not math.isfinite(squared_length(v))


@PROPS
@given(vectors_st())
def test_flat_topk_matches_reference(case):
    q, X, n, k = case
    idx, sims = flat_topk(q, X, n, k)
    assert idx.dtype == np.int64 and sims.dtype == np.float32
    ref_idx, ref_sims = R.ref_flat_topk(q, X, n, k)
    assert len(idx) == len(ref_idx) == max(0, min(k, n))
    assert np.array_equal(sims, inner_products(q, X, n)[idx])
    np.testing.assert_allclose(np.sort(sims), np.sort(ref_sims), rtol=0, atol=2e-5)
    exact = {i: math.fsum(float(a) * float(b) for a, b in zip(X[i], q)) for i in range(n)}
    assert_topk_equivalent(idx, sims, sims, exact, k, rtol=0.0, atol=2e-5)


@PROPS
@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.sampled_from([-0.25, 0.25]), min_size=16, max_size=16), min_size=n, max_size=n),
            st.lists(st.sampled_from([-0.25, 0.25]), min_size=16, max_size=16),
            st.integers(0, n + 1),
        )
    )
)
def test_flat_topk_equals_numpy_argsort_on_exact_vectors(case):
    """Unit vectors with entries ±1/4: every dot product is exact (multiples of 1/8),
    so ties are real and must go to the lower index, exactly like a stable argsort."""
    rows, qv, k = case
    X = np.array(rows, np.float32)
    q = np.array(qv, np.float32)
    n = X.shape[0]
    idx, sims = flat_topk(q, X, n, k)
    scores = X @ q
    want = np.argsort(-scores, kind="stable")[:k]
    assert idx.tolist() == want.tolist()
    assert sims.tolist() == scores[want].tolist()


@PROPS
@given(vectors_st(), st.data())
def test_top_candidates_matches_reference(case, data):
    q, X, n, want = case
    sims = inner_products(q, X, X.shape[0])  # float32, as in the hot and warm tiers
    alive = np.array(data.draw(st.lists(st.integers(0, 1), min_size=X.shape[0], max_size=X.shape[0])), np.int64)
    got = top_candidates(sims, alive, n, want)
    assert got.dtype == np.int64
    ref = R.ref_top_candidates(sims, alive, n, want)
    assert got.tolist() == ref.tolist()  # same float32 scores: exact, ties to the lower index
    assert all(alive[i] != 0 and i < n for i in got.tolist())


def test_top_candidates_example():
    sims = np.array([0.5, 0.9, 0.5, 0.7, 0.9, 1.0], np.float32)
    alive = np.array([1, 1, 1, 0, 1, 1], np.int64)
    assert top_candidates(sims, alive, 5, 3).tolist() == [1, 4, 0]  # 3 is dead, 5 is past n
    assert top_candidates(sims, alive, 5, 10).tolist() == [1, 4, 0, 2]
    assert top_candidates(sims, np.ones(6, np.int64), 6, 0).tolist() == []


def test_flat_topk_reads_only_first_n_rows_and_breaks_ties_low_index():
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], np.float32)
    q = np.array([1.0, 0.0], np.float32)
    idx, sims = flat_topk(q, X, 4, 3)
    assert idx.tolist() == [1, 3, 0]  # row 4 is past n; 0 and 2 tie, 0 wins
    assert sims.tolist() == [1.0, 1.0, 0.0]
    assert flat_topk(q, X, 4, 0)[0].shape == (0,)
    assert flat_topk(q, X, 4, 10)[0].tolist() == [1, 3, 0, 2]


# ---------------------------------------------------------------------------
# fused rerank

TAG_UNIVERSE = st.integers(0, 11)
sorted_tags = st.lists(TAG_UNIVERSE, max_size=5, unique=True).map(lambda xs: np.array(sorted(xs), np.int32))


@st.composite
def rerank_st(draw, max_cap=16):
    cap = draw(st.integers(1, max_cap))
    ntypes = draw(st.integers(1, 3))
    now = draw(times)
    width = draw(st.integers(0, 4))
    F = np.zeros((C.NF, cap))
    I = np.zeros((C.NI, cap), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    tags = np.full((cap, width), -1, np.int32)
    for s in range(cap):
        h = draw(half_lives)
        F[C.F_HALF_LIFE, s] = h
        F[C.F_W_REF, s] = draw(weights_st)
        F[C.F_T_REF, s] = now - draw(age_st(h))
        F[C.F_LAST_ACCESS, s] = now - draw(st.one_of(st.just(0.0), st.floats(-1e4, 1e8)))
        F[C.F_CONF, s] = draw(confs)
        F[C.F_T_CONF, s] = now - draw(st.one_of(st.just(0.0), st.floats(0.0, 1e8)))
        I[C.I_TYPE, s] = draw(st.integers(0, ntypes - 1))
        I[C.I_ALIVE, s] = int(draw(st.integers(0, 5)) != 0)
        F[C.F_TTL_OVERRIDE, s] = draw(st.sampled_from([math.nan, math.nan, 0.0, 3600.0]))  # 0: superseded
        row = draw(st.lists(TAG_UNIVERSE, max_size=width, unique=True))
        tags[s, : len(row)] = row
    if cap > 1 and draw(st.booleans()):  # copies of slot 0: equal scores, broken by sim then index
        for s in draw(st.lists(st.integers(1, cap - 1), max_size=cap, unique=True)):
            F[:, s], I[:, s], tags[s] = F[:, 0], I[:, 0], tags[0]
    slots = draw(st.permutations(list(range(cap))))
    slots = slots[: draw(st.integers(0, cap))]
    kind = draw(st.sampled_from(["exact", "hnsw", "numpy"]))
    distance = kind == "hnsw"
    if kind == "hnsw":  # hnswlib: uint64 labels, float32 distances 1 - cos
        cand = np.array(slots, np.uint64)
    else:
        holes = draw(st.lists(st.integers(0, len(slots)), max_size=3))
        for pos in sorted(holes, reverse=True):
            slots.insert(pos, -1)  # negative: no candidate
        cand = np.array(slots, np.int64)
    cos = draw(
        st.lists(
            st.one_of(st.sampled_from([-0.5, 0.0, 0.5, 1.0]), st.floats(-1.0, 1.0, width=32)),
            min_size=len(cand),
            max_size=len(cand),
        )
    )
    cos = np.array(cos, np.float64)
    if distance:
        cand_scores = (1.0 - cos).astype(np.float32)
    elif kind == "exact":
        cand_scores = cos.astype(np.float32)
    else:
        cand_scores = cos
    q_tags = draw(sorted_tags)
    rule_tags = draw(sorted_tags)
    rule_mult = np.array(
        draw(st.lists(st.one_of(st.just(1.0), st.floats(0.1, 5.0)), min_size=len(rule_tags), max_size=len(rule_tags))),
        np.float64,
    )
    mask_tags = draw(st.one_of(st.just(E32), sorted_tags))
    bonus = draw(st.one_of(st.just(0.2), st.floats(0.0, 1.0)))
    p = np.zeros(C.NP)
    p[C.P_NOW] = now
    p[C.P_CONF_HALF_LIFE] = draw(conf_half_lives)
    p[C.P_MIN_CONF] = draw(st.one_of(st.just(0.0), confs))
    p[C.P_CTX_MAX] = (1.0 + bonus * len(q_tags)) * max(1.0, math.prod(m for m in rule_mult if m > 1.0))
    p[C.P_MODE] = draw(st.sampled_from([C.MODE_PRODUCT, C.MODE_WEIGHTED_SUM]))
    p[C.P_RECENCY_HALF_LIFE] = draw(half_lives)
    p[C.P_FLOOR] = draw(st.one_of(st.just(0.02), st.floats(0.0, 0.5)))
    p[C.P_CONTEXT_BONUS] = bonus
    p[C.P_DISTANCE] = 1.0 if distance else 0.0
    p[C.P_SUPERSEDED_DEMOTION] = draw(st.sampled_from([0.0, 0.5, 1.0]))
    raw_w = draw(st.lists(st.floats(0.0, 1.0), min_size=5, max_size=5).filter(lambda ws: sum(ws) > 1e-3))
    p[C.P_WEIGHTS : C.P_WEIGHTS + 5] = np.array(raw_w) / sum(raw_w)
    type_allowed = np.array(draw(st.lists(st.integers(0, 1), min_size=ntypes, max_size=ntypes)), np.uint8)
    if draw(st.booleans()):
        type_allowed[:] = 1
    w0 = np.array(draw(st.lists(st.floats(0.1, 5.0), min_size=ntypes, max_size=ntypes)), np.float64)
    # a negative W0: the type is ranked without its use (recency, weight, confidence decay)
    w0 *= np.array(draw(st.lists(st.sampled_from([1.0, 1.0, -1.0]), min_size=ntypes, max_size=ntypes)))
    k = draw(st.integers(0, len(cand) + 2))
    return (cand, cand_scores, F, I, tags, p, type_allowed, w0, q_tags, rule_tags, rule_mult, mask_tags, k)


def _excluded(args, j) -> bool:
    """Independent statement of the filters (not the reference's code)."""
    cand, _, F, I, tags, p, type_allowed, _, _, _, _, mask_tags, _ = args  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    s = int(cand[j])
    if s < 0 or I[C.I_ALIVE, s] == 0 or type_allowed[I[C.I_TYPE, s]] == 0:
        return True
    c = F[C.F_CONF, s]
    if math.isfinite(p[C.P_CONF_HALF_LIFE]):
        c = c * 0.5 ** (max(p[C.P_NOW] - F[C.F_T_CONF, s], 0.0) / p[C.P_CONF_HALF_LIFE])
    if c < p[C.P_MIN_CONF]:
        return True
    row = tags[s].tolist()
    row = row[: row.index(-1)] if -1 in row else row
    return bool(set(row) & set(mask_tags.tolist()))


@pytest.mark.slow
@PROPS
@given(rerank_st())
def test_fused_rerank_matches_reference(args):
    pick, score, norm, raw = fused_rerank(*args)
    m = len(args[0])
    assert pick.dtype == np.int64 and score.dtype == np.float64
    assert norm.shape == raw.shape == (len(pick), 5)
    p = args[5]
    # never an excluded candidate
    for j in pick.tolist():
        assert 0 <= j < m and not _excluded(args, j), j
    # the score is the documented combination of the returned normalised factors
    assert np.all((norm >= 0.0) & (norm <= 1.0 + 1e-12))
    for i in range(len(pick)):
        # times 1 - demotion for a superseded memory (per-memory TTL 0)
        kept = 1.0 - p[C.P_SUPERSEDED_DEMOTION] if args[2][C.F_TTL_OVERRIDE, int(args[0][pick[i]])] == 0.0 else 1.0
        if p[C.P_MODE] == C.MODE_PRODUCT:
            assert close(score[i], kept * float(np.prod(norm[i])), rtol=1e-12, atol=0.0)
        else:
            assert close(score[i], kept * float(np.dot(p[C.P_WEIGHTS : C.P_WEIGHTS + 5], norm[i])), 1e-12, 1e-15)
    # against the reference: every eligible candidate ranked
    r_pick, r_score, r_norm, r_raw = R.ref_fused_rerank(*args[:-1], m)
    eligible = {j for j in range(m) if not _excluded(args, j)}
    assert set(r_pick.tolist()) == eligible  # the reference's filters agree with the stated ones
    ref_score = dict(zip(r_pick.tolist(), r_score.tolist()))
    row_of = {j: i for i, j in enumerate(r_pick.tolist())}
    assert_topk_equivalent(pick, score, raw[:, 0], ref_score, args[-1], rtol=1e-9, atol=1e-12)
    for i, j in enumerate(pick.tolist()):
        np.testing.assert_allclose(norm[i], r_norm[row_of[j]], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(raw[i], r_raw[row_of[j]], rtol=1e-9, atol=1e-300)
    # a type ranked without use: recency and weight neutral, confidence as stated (independent of the reference)
    floor = p[C.P_FLOOR]
    for i, j in enumerate(pick.tolist()):
        s = int(args[0][j])
        if args[7][args[3][C.I_TYPE, s]] < 0:
            assert close(norm[i, 1], 1.0, 1e-12, 0.0) and close(norm[i, 4], 1.0, 1e-12, 0.0) and raw[i, 1] == 1.0
            assert raw[i, 2] == args[2][C.F_CONF, s]
            assert close(norm[i, 2], floor + (1.0 - floor) * min(max(args[2][C.F_CONF, s], 0.0), 1.0), 1e-12, 1e-15)
    # without near-ties the answer is exactly the reference's
    ss = sorted(ref_score.values(), reverse=True)
    if all(a - b > 1e-9 * max(abs(a), abs(b), 1e-3) for a, b in zip(ss, ss[1:])):
        assert pick.tolist() == r_pick[: args[-1]].tolist()


def _rerank_columns(n, now):
    F = np.zeros((C.NF, n))
    I = np.zeros((C.NI, n), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F[C.F_W_REF], F[C.F_T_REF], F[C.F_HALF_LIFE] = 1.0, now, 86400.0
    F[C.F_LAST_ACCESS] = now
    F[C.F_CONF], F[C.F_T_CONF] = 0.9, now
    I[C.I_ALIVE] = 1
    return F, I


def _params(
    now, mode, floor=0.02, min_conf=0.0, ctx_max=1.0, bonus=0.2, distance=0.0, weights=(0.55, 0.15, 0.15, 0.10, 0.05)
):
    p = np.zeros(C.NP)
    p[C.P_NOW], p[C.P_CONF_HALF_LIFE], p[C.P_MIN_CONF], p[C.P_CTX_MAX] = now, math.inf, min_conf, ctx_max
    p[C.P_MODE], p[C.P_RECENCY_HALF_LIFE], p[C.P_FLOOR], p[C.P_CONTEXT_BONUS] = mode, 7 * 86400.0, floor, bonus
    p[C.P_DISTANCE] = distance
    p[C.P_WEIGHTS : C.P_WEIGHTS + 5] = weights
    return p


def test_fused_rerank_excludes_dead_filtered_low_confidence_and_masked():
    now = T0
    F, I = _rerank_columns(7, now)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    I[C.I_ALIVE, 0] = 0  # dead
    I[C.I_TYPE, 1] = 1  # type not allowed
    F[C.F_CONF, 2] = 0.2  # below min_confidence 0.5
    tags = np.full((7, 3), -1, np.int32)
    tags[3, :2] = [4, 9]  # 9 is masked
    tags[4, :1] = [4]  # fine
    tags[5, :3] = [-1, 9, 9]  # padding first: no tags at all, so not masked
    F[C.F_CONF, 6], F[C.F_T_CONF, 6] = 0.6, now - 86400.0  # decays to 0.3 < 0.5 at now
    cand = np.array([0, 1, 2, 3, 4, -1, 5, 6], np.int64)
    sims = np.full(8, 0.5, np.float32)
    p = _params(now, C.MODE_PRODUCT, min_conf=0.5)
    p[C.P_CONF_HALF_LIFE] = 86400.0
    allowed = np.array([1, 0], np.uint8)
    pick, score, norm, raw = fused_rerank(
        cand, sims, F, I, tags, p, allowed, np.ones(2), E32, E32, E64, np.array([9], np.int32), 10
    )
    assert sorted(cand[pick].tolist()) == [4, 5]
    assert np.all(score > 0)
    # the same candidates without the filters all come back (the filters, not the data, excluded them)
    p[C.P_MIN_CONF] = 0.0
    pick, *_ = fused_rerank(cand, sims, F, I, tags, p, np.ones(2, np.uint8), np.ones(2), E32, E32, E64, E32, 10)
    assert sorted(cand[pick].tolist()) == [1, 2, 3, 4, 5, 6]


def test_fused_rerank_scores_in_both_modes():
    now = T0
    F, I = _rerank_columns(3, now)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F[C.F_LAST_ACCESS, 1] = now - 7 * 86400.0  # recency 0.5
    F[C.F_W_REF, 2], F[C.F_T_REF, 2] = 4.0, now - 86400.0  # W = 2 -> capped at W0 = 1
    tags = np.full((3, 2), -1, np.int32)
    tags[0] = [3, 5]  # context tag 3 (bonus) and rule tag 5 (×2)
    q_tags, rule_tags, rule_mult = np.array([3], np.int32), np.array([5], np.int32), np.array([2.0])
    ctx_max = (1 + 0.2 * 1) * 2.0
    cand = np.array([0, 1, 2], np.int64)
    sims = np.array([0.8, 0.9, -0.1], np.float32)
    f = 0.1
    w = (0.4, 0.2, 0.2, 0.1, 0.1)
    sim = [float(np.float32(0.8)), float(np.float32(0.9)), 0.0]
    rec = [1.0, f + (1 - f) * 0.5, 1.0]
    conf = f + (1 - f) * 0.9
    ctx = [1.0, 1.0 / ctx_max, 1.0 / ctx_max]
    wt = [1.0, 1.0, 1.0]
    for mode in (C.MODE_PRODUCT, C.MODE_WEIGHTED_SUM):
        p = _params(now, mode, floor=f, ctx_max=ctx_max, weights=w)
        pick, score, norm, raw = fused_rerank(
            cand, sims, F, I, tags, p, np.ones(1, np.uint8), np.ones(1), q_tags, rule_tags, rule_mult, E32, 3
        )
        got = dict(zip(pick.tolist(), score.tolist()))
        for j in range(3):
            factors = (sim[j], rec[j], conf, ctx[j], wt[j])
            want = math.prod(factors) if mode == C.MODE_PRODUCT else sum(a * b for a, b in zip(w, factors))
            assert got[j] == pytest.approx(want, rel=1e-12), (mode, j)
        assert raw[pick.tolist().index(0), 3] == pytest.approx(1.2 * 2.0)
        assert raw[pick.tolist().index(2), 4] == pytest.approx(2.0, rel=1e-12)
        assert raw[pick.tolist().index(2), 0] == pytest.approx(-0.1, rel=1e-6)  # raw sim is unclipped
        # best first: in both modes 0 (context-favoured) beats 1 (older) beats 2 (negative cosine)
        assert pick.tolist() == sorted(got, key=lambda j: -got[j]) == [0, 1, 2]


def test_fused_rerank_decayed_to_nothing_orders_by_similarity():
    """Weight and recency underflow to 0; the floor keeps every score above 0 and
    the order is by similarity (ties: higher raw similarity, then lower index)."""
    now = T0
    n = 7
    F, I = _rerank_columns(n, now)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F[C.F_T_REF] = now - 1e8
    F[C.F_HALF_LIFE] = 60.0
    F[C.F_LAST_ACCESS] = now - 1e8
    sims = np.array([0.1, 0.9, 0.5, 0.3, 0.7, 0.5, -0.2], np.float32)
    cand = np.arange(n, dtype=np.int64)
    tags = np.full((n, 1), -1, np.int32)
    for mode in (C.MODE_PRODUCT, C.MODE_WEIGHTED_SUM):
        p = _params(now, mode)
        p[C.P_RECENCY_HALF_LIFE] = 60.0
        pick, score, norm, raw = fused_rerank(
            cand, sims, F, I, tags, p, np.ones(1, np.uint8), np.ones(1), E32, E32, E64, E32, n
        )
        assert np.all(raw[:, 1] == 0.0) and np.all(raw[:, 4] == 0.0)
        assert np.all(norm[:, 1] == 0.02) and np.all(norm[:, 4] == 0.02)
        assert pick.tolist() == [1, 4, 2, 5, 3, 0, 6]
        assert np.all(score[:-1] > 0)
        assert score[-1] >= 0 and (mode == C.MODE_PRODUCT) == (score[-1] == 0.0)
    # distance mode (hnswlib: 1 - cos as float32) ranks the same
    p = _params(now, C.MODE_PRODUCT, distance=1.0)
    p[C.P_RECENCY_HALF_LIFE] = 60.0
    dist = (1.0 - sims.astype(np.float64)).astype(np.float32)
    pick, *_ = fused_rerank(
        cand.astype(np.uint64), dist, F, I, tags, p, np.ones(1, np.uint8), np.ones(1), E32, E32, E64, E32, 4
    )
    assert pick.tolist() == [1, 4, 2, 5]


def test_fused_rerank_ties_go_to_higher_raw_similarity_then_lower_index():
    now = T0
    F, I = _rerank_columns(4, now)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    cand = np.array([3, 2, 1, 0], np.int64)
    sims = np.array([-0.5, -0.2, -0.5, 0.4], np.float32)  # norm sim 0 for the three negatives
    p = _params(now, C.MODE_PRODUCT)
    pick, score, _, _ = fused_rerank(
        cand, sims, F, I, np.full((4, 1), -1, np.int32), p, np.ones(1, np.uint8), np.ones(1), E32, E32, E64, E32, 4
    )
    assert pick.tolist() == [3, 1, 0, 2]
    assert score[1] == score[2] == score[3] == 0.0


# ---------------------------------------------------------------------------
# context


@PROPS
@given(
    st.integers(1, 12).flatmap(
        lambda cap: st.tuples(
            st.lists(
                st.lists(st.one_of(TAG_UNIVERSE, st.just(-1)), min_size=4, max_size=4), min_size=cap, max_size=cap
            ),
            st.integers(0, cap),
            sorted_tags.flatmap(
                lambda rt: st.tuples(st.just(rt), st.lists(st.floats(0.1, 10.0), min_size=len(rt), max_size=len(rt)))
            ),
        )
    )
)
def test_context_multipliers_matches_reference(case):
    rows, n, (rule_tags, mult) = case
    tags = np.array(rows, np.int32)
    rule_mult = np.array(mult, np.float64)
    got = context_multipliers(tags, n, rule_tags, rule_mult)
    assert got.dtype == np.float64 and got.shape == (n,)
    np.testing.assert_allclose(got, R.ref_context_multipliers(tags, n, rule_tags, rule_mult), rtol=1e-12)


def test_context_multipliers_example():
    tags = np.array([[1, 3, -1], [2, -1, -1], [-1, 1, 3], [3, 1, 1], [1, 1, 1]], np.int32)
    rule_tags, rule_mult = np.array([1, 3], np.int32), np.array([2.0, 0.5])
    got = context_multipliers(tags, 4, rule_tags, rule_mult)
    assert got.tolist() == [1.0, 1.0, 1.0, 2.0]  # row 2: nothing before the padding; row 4: past n
    assert context_multipliers(tags, 5, E32, E64).tolist() == [1.0] * 5


@PROPS
@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.lists(
                st.tuples(
                    weights_st,
                    half_lives,
                    st.floats(0.0, 1e8),
                    st.one_of(st.just(math.inf), st.floats(60.0, 1e8)),
                    st.sampled_from([0.5, 1.0, 2.0]),
                    st.one_of(st.sampled_from([0.5, 1.0, 2.0]), st.floats(0.1, 10.0)),
                ),
                min_size=n,
                max_size=n,
            ),
            times,
        )
    )
)
def test_rescale_lifetimes_matches_reference(case):
    rows, now = case
    w, h, age, ttl, old, new = (np.array(c, np.float64) for c in zip(*rows))
    t = now - age
    got = rescale_lifetimes(w, t, h, ttl, old, new, now)
    want = R.ref_rescale_lifetimes(w, t, h, ttl, old, new, now)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12)  # half-life
    np.testing.assert_allclose(got[3], want[3], rtol=1e-12)  # ttl (inf stays inf)
    for i in range(len(w)):
        if new[i] != old[i]:  # rebased at now
            assert close(got[0][i], want[0][i], 1e-9, 1e-300) and got[1][i] == want[1][i] == now
        # the weight from now on is the same function either way (an unchanged multiplier may skip the rebase)
        for dt in (0.0, 0.5 * want[2][i], 3.0 * want[2][i]):
            a = R.weight(got[0][i], got[1][i], got[2][i], now + dt)
            b = R.weight(want[0][i], want[1][i], want[2][i], now + dt)
            assert close(a, b, 1e-9, 1e-300), (i, dt, a, b)
        # the past is unchanged: at now the weight is what it was before the rescale
        assert close(R.weight(got[0][i], got[1][i], got[2][i], now), R.weight(w[i], t[i], h[i], now), 1e-9, 1e-300)


def test_rescale_lifetimes_example():
    now, h = T0, 3600.0
    w, t, hh, ttl = np.array([2.0, 2.0]), np.array([now - h, now - h]), np.array([h, h]), np.array([100.0, math.inf])
    nw, nt, nh, nttl = rescale_lifetimes(w, t, hh, ttl, np.array([1.0, 2.0]), np.array([2.0, 1.0]), now)
    assert nw.tolist() == pytest.approx([1.0, 1.0], rel=1e-12)
    assert nt.tolist() == [now, now]
    assert nh.tolist() == [2 * h, h / 2]
    assert nttl.tolist() == [200.0, math.inf]
    # one doubled half-life later the weight has halved
    assert decayed_weight(nw, nt, nh, now + 2 * h)[0] == pytest.approx(0.5, rel=1e-12)


@pytest.mark.slow
@PROPS
@given(rerank_st())
def test_rank_and_gather_is_rerank_then_gather_packed(args):
    """The hot path's one-call kernel returns exactly what fused_rerank
    returns and the picks' columns (as the plain-Python gather has them), in
    the packed layout of columns.R_*, and leaves the (read-only) parameter
    vector as it was."""
    from tierstore.kernels import rank_and_gather

    cand, cand_scores, F, I, tags, p, type_allowed, w0, q_tags, rule_tags, rule_mult, mask_tags, k = args  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    pick, score, norm, raw = fused_rerank(*args)
    slots, Fp, Ip = R.ref_gather_picks(cand, pick, F, I)
    base = p.copy()
    base[C.P_NOW] = -1.0  # replaced by the scalar arguments
    base[C.P_MIN_CONF] = 7.0
    base.flags.writeable = False
    q = np.zeros(8, np.float32)
    q[3] = 1.0  # unit length: similarities as given
    qf, qi = pack_query(base, w0, q_tags, rule_tags, rule_mult, mask_tags)
    qf.flags.writeable = qi.flags.writeable = False
    rf, ri, n2 = rank_and_gather(q, cand, cand_scores, F, I, tags, qf, qi, type_allowed, p[C.P_NOW], p[C.P_MIN_CONF], k)
    assert n2 == 1.0
    # hnswlib's (1, m) result rows, passed as they come, rank the same
    rf2, ri2, _ = rank_and_gather(
        q, cand[None], cand_scores[None], F, I, tags, qf, qi, type_allowed, p[C.P_NOW], p[C.P_MIN_CONF], k
    )
    np.testing.assert_array_equal(rf2, rf)
    np.testing.assert_array_equal(ri2, ri)
    assert base[C.P_NOW] == -1.0 and base[C.P_MIN_CONF] == 7.0
    assert qf[C.P_NOW] == -1.0 and qf[C.P_MIN_CONF] == 7.0
    assert rf.shape == (C.NRF, len(pick)) and ri.shape == (C.NRI, len(pick))
    np.testing.assert_array_equal(ri[C.R_SLOT], slots)
    np.testing.assert_array_equal(rf[C.R_SCORE], score)
    np.testing.assert_array_equal(rf[C.R_NORM : C.R_NORM + 5].T, norm)
    np.testing.assert_array_equal(rf[C.R_RAW : C.R_RAW + 5].T, raw)
    np.testing.assert_array_equal(rf[C.R_F :].T, Fp[:, list(C.SNAPSHOT_F)])
    np.testing.assert_array_equal(ri[C.R_I : C.R_BEFORE].T, Ip[:, list(C.SNAPSHOT_I)])
    assert (ri[C.R_BEFORE] == -1).all()  # resolution off (P_RESOLVE 0): nothing placed before another


@pytest.mark.slow
@PROPS
@given(rerank_st(), st.sampled_from(["never", "any", "k", "more than k"]), st.data())
def test_rank_and_record_is_rank_and_gather_then_the_picks_accesses(args, when, data):
    """The hot path's kernel with access recording: rank_and_gather's result,
    computed before the accesses; then, when at least ``record_min`` hits were
    picked, one access per picked hit exactly as the plain-Python
    record_accesses has it (nothing when -1 or more than were picked); and the
    count of picked hits that are superseded."""
    from tierstore.kernels import pack_access, rank_and_gather, rank_and_record

    cand, cand_scores, F, I, tags, p, type_allowed, w0, q_tags, rule_tags, rule_mult, mask_tags, k = args  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    nt = len(w0)
    boost = np.array(data.draw(st.lists(st.floats(0.0, 5.0), min_size=nt, max_size=nt)))
    refresh = np.array(data.draw(st.lists(st.integers(0, 1), min_size=nt, max_size=nt)), np.uint8)
    deletes = np.array(data.draw(st.lists(st.integers(0, 1), min_size=nt, max_size=nt)), np.uint8)
    th = np.array([0.3, 0.1, 0.01, 0.3])
    conf_hl = p[C.P_CONF_HALF_LIFE]
    access = pack_access(th, conf_hl, boost, refresh, deletes)
    q = np.zeros(8, np.float32)
    q[3] = 1.0
    qf, qi = pack_query(p, w0, q_tags, rule_tags, rule_mult, mask_tags)
    now, min_conf = p[C.P_NOW], p[C.P_MIN_CONF]
    rf, ri, n2 = rank_and_gather(q, cand, cand_scores, F.copy(), I.copy(), tags, qf, qi, type_allowed, now, min_conf, k)
    m = ri.shape[1]
    record_min = {"never": -1, "any": 0, "k": k, "more than k": k + 1}[when]
    kF, kI = F.copy(), I.copy()
    got = rank_and_record(
        q, cand, cand_scores, kF, kI, tags, qf, qi, type_allowed, now, min_conf, k, record_min, access
    )
    np.testing.assert_array_equal(got[0], rf)
    np.testing.assert_array_equal(got[1], ri)
    assert got[2] == n2
    assert got[3] == int((rf[C.R_TTL_OVERRIDE] == 0.0).sum())
    if m > 0 and 0 <= record_min <= m:
        wF, wI = R.ref_record_accesses(ri[C.R_SLOT], now, F, I, boost, refresh, deletes, th, conf_hl)
    else:
        wF, wI = F, I
    assert np.array_equal(kI, wI)
    rows = [r for r in range(C.NF) if r != C.F_DUE]
    np.testing.assert_allclose(kF[rows], wF[rows], rtol=1e-9, atol=1e-300, equal_nan=True)
    assert_times_close(kF[C.F_DUE], wF[C.F_DUE])


@pytest.mark.slow
@PROPS
@given(rerank_st(), st.data())
def test_rank_and_gather_resolves_as_the_reference_does(args, data):
    """With P_RESOLVE set, the picks come in the order the plain-Python
    resolution gives fused_rerank's picks, and R_BEFORE names the slot each
    was placed before."""
    from tierstore.kernels import rank_and_gather

    cand, cand_scores, F, I, tags, p, type_allowed, w0, q_tags, rule_tags, rule_mult, mask_tags, k = args  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F = F.copy()
    F[C.F_CREATED] = data.draw(
        st.lists(st.sampled_from([0.0, 10.0, 7200.0, 86400.0]), min_size=F.shape[1], max_size=F.shape[1])
    )
    args = (cand, cand_scores, F, I, tags, p, type_allowed, w0, q_tags, rule_tags, rule_mult, mask_tags, k)
    margin = data.draw(st.sampled_from([-1.0, 0.0, 0.1, 0.5]))
    tag_margin = data.draw(st.sampled_from([-1.0, 0.3, 1.0]))
    gap = data.draw(st.sampled_from([0.0, 3600.0]))
    conf_margin = data.draw(st.sampled_from([0.0, 0.1]))
    pick, score, norm, raw = fused_rerank(*args)
    base = p.copy()
    base[C.P_RESOLVE], base[C.P_RESOLVE_MARGIN], base[C.P_RESOLVE_TAG_MARGIN] = 1.0, margin, tag_margin
    base[C.P_RESOLVE_MIN_GAP], base[C.P_RESOLVE_CONF_MARGIN] = gap, conf_margin
    q = np.zeros(8, np.float32)
    q[3] = 1.0
    qf, qi = pack_query(base, w0, q_tags, rule_tags, rule_mult, mask_tags)
    rf, ri, _ = rank_and_gather(q, cand, cand_scores, F, I, tags, qf, qi, type_allowed, p[C.P_NOW], p[C.P_MIN_CONF], k)
    slots = np.array([int(cand[j]) for j in pick.tolist()], np.int64)
    picked_tags = tags[slots] if len(slots) else np.full((0, tags.shape[1]), -1, np.int32)
    order, before = R.ref_resolve_order(
        raw[:, 0],
        F[C.F_CREATED, slots],
        raw[:, 2],
        I[C.I_TYPE, slots],
        picked_tags,
        margin,
        tag_margin,
        gap,
        conf_margin,
    )
    assert ri[C.R_SLOT].tolist() == slots[order].tolist()
    np.testing.assert_array_equal(rf[C.R_SCORE], score[order])
    assert ri[C.R_BEFORE].tolist() == [int(slots[before[j]]) if before[j] >= 0 else -1 for j in order.tolist()]


@pytest.mark.slow
@PROPS
@given(rerank_st(), st.integers(-4, 16), st.data())
def test_rank_and_gather_divides_similarities_by_the_query_length(args, e, data):
    """A query of length c = 2^e (inside the band the kernel takes as given):
    hnswlib's distances 1 - c·cos, or the exact path's inner products c·cos,
    rank exactly as fused_rerank ranks the cosines. (Cosines on a grid of
    1/64 and c a power of two keep every step exact in float32.)"""
    from tierstore.kernels import rank_and_gather

    cand, _, F, I, tags, p, type_allowed, w0, q_tags, rule_tags, rule_mult, mask_tags, k = args  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    cos = np.array(data.draw(st.lists(st.integers(-64, 64), min_size=len(cand), max_size=len(cand))), np.float64) / 64
    c = 2.0**e
    scaled = (1.0 - c * cos) if p[C.P_DISTANCE] else c * cos
    plain = p.copy()
    plain[C.P_DISTANCE] = 0.0
    pick, score, norm, raw = fused_rerank(
        cand, cos.astype(np.float32), F, I, tags, plain, type_allowed, w0, q_tags, rule_tags, rule_mult, mask_tags, k
    )
    q = np.zeros(5, np.float32)
    q[1] = c
    qf, qi = pack_query(p, w0, q_tags, rule_tags, rule_mult, mask_tags)
    rf, ri, n2 = rank_and_gather(
        q, cand, scaled.astype(np.float32), F, I, tags, qf, qi, type_allowed, p[C.P_NOW], p[C.P_MIN_CONF], k
    )
    assert n2 == c * c
    assert C.QUERY_N2_MIN <= n2 <= C.QUERY_N2_MAX
    np.testing.assert_array_equal(ri[C.R_SLOT], R.ref_gather_picks(cand, pick, F, I)[0])
    np.testing.assert_array_equal(rf[C.R_SCORE], score)
    np.testing.assert_array_equal(rf[C.R_NORM : C.R_NORM + 5].T, norm)
    np.testing.assert_array_equal(rf[C.R_RAW : C.R_RAW + 5].T, raw)


@pytest.mark.parametrize(
    "q",
    [
        np.zeros(4, np.float32),
        np.array([1.0, np.nan, 0.0, 0.0], np.float32),
        np.array([np.inf, 0.0, 0.0, 0.0], np.float32),
        np.array([0.0, 2.0**-5, 0.0, 0.0], np.float32),  # length 1/32: below the band
        np.array([0.0, 0.0, 2.0**17, 0.0], np.float32),  # above
        np.array([1e30, 1e30, 0.0, 0.0], np.float32),  # finite, but its float32 dot products would overflow
    ],
    ids=["zero", "nan", "inf", "tiny", "huge", "overflow"],
)
def test_rank_and_gather_ranks_nothing_for_a_query_outside_the_band(q):
    """The kernel returns no picks and the query's squared length (computed
    in float64) for a query it cannot rank as given; the caller then
    validates and normalises it."""
    from tierstore.kernels import rank_and_gather

    F = np.ones((C.NF, 3))
    I = np.ones((C.NI, 3), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    I[C.I_TYPE] = 0
    p = np.zeros(C.NP)
    p[C.P_CTX_MAX] = p[C.P_RECENCY_HALF_LIFE] = p[C.P_WEIGHTS] = 1.0
    p[C.P_CONF_HALF_LIFE] = math.inf
    p[C.P_MODE] = C.MODE_WEIGHTED_SUM
    cand = np.arange(3, dtype=np.int64)
    qf, qi = pack_query(p, np.ones(1), E32, E32, E64, E32)
    tags = np.full((3, 1), -1, np.int32)
    rf, ri, n2 = rank_and_gather(
        q, cand, np.full(3, 0.5, np.float32), F, I, tags, qf, qi, np.ones(1, np.uint8), 1.0, 0.0, 3
    )
    assert rf.shape == (C.NRF, 0) and ri.shape == (C.NRI, 0)
    want = sum(float(x) ** 2 for x in q.tolist())
    assert (math.isnan(n2) and math.isnan(want)) or n2 == want
    # the same kernel ranks all three for a unit query
    assert rank_and_gather(
        np.array([0.0, 1.0, 0.0, 0.0], np.float32),
        cand,
        np.full(3, 0.5, np.float32),
        F,
        I,
        tags,
        qf,
        qi,
        np.ones(1, np.uint8),
        1.0,
        0.0,
        3,
    )[1].shape == (C.NRI, 3)


def test_pack_query_layout():
    p = np.arange(C.NP, dtype=np.float64)
    qf, qi = pack_query(
        p,
        np.array([0.5, 2.0]),
        np.array([1, 4], np.int32),
        np.array([3], np.int32),
        np.array([1.5]),
        np.array([7, 8, 9], np.int32),
    )
    assert qf[: C.NP].tolist() == p.tolist()
    assert qf[C.Q_NTYPES : C.Q_HEADER].tolist() == [2, 2, 1, 3]
    assert qf[C.Q_HEADER :].tolist() == [0.5, 2.0, 1.5]
    assert qi.dtype == np.int32 and qi.tolist() == [1, 4, 3, 7, 8, 9]
    with pytest.raises(ValueError, match="rule_mult"):
        pack_query(p, np.ones(1), E32, np.array([3], np.int32), E64, E32)


def test_fused_rerank_skips_out_of_range_slots():
    """A candidate slot past the columns' end is no candidate (as a negative one),
    in the kernel and in the reference."""
    F = np.zeros((C.NF, 3))
    F[C.F_CONF] = 1.0
    F[C.F_W_REF] = 1.0
    F[C.F_HALF_LIFE] = 100.0
    I = np.zeros((C.NI, 3), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    I[C.I_ALIVE] = 1
    tags = np.full((3, 2), -1, np.int32)
    p = np.zeros(C.NP)
    p[C.P_CONF_HALF_LIFE] = math.inf
    p[C.P_CTX_MAX] = 1.0
    p[C.P_RECENCY_HALF_LIFE] = 100.0
    p[C.P_WEIGHTS] = 1.0
    p[C.P_MODE] = C.MODE_WEIGHTED_SUM
    cand = np.array([3, 1, 2**40, -1, 0], np.int64)
    sims = np.array([0.9, 0.5, 0.8, 0.7, 0.1], np.float32)
    args = (cand, sims, F, I, tags, p, np.ones(1, np.uint8), np.ones(1), E32, E32, E64, E32, 5)
    pick, *_ = fused_rerank(*args)
    assert pick.tolist() == [1, 4]
    assert R.ref_fused_rerank(*args)[0].tolist() == [1, 4]


# ---------------------------------------------------------------------------
# query-time resolution


@st.composite
def resolve_st(draw):
    m = draw(st.integers(0, 8))
    width = draw(st.integers(0, 3))
    sims = np.array(
        draw(st.lists(st.sampled_from([0.9, 0.85, 0.8, 0.7, 0.5]) | st.floats(-1, 1), min_size=m, max_size=m)),
        np.float64,
    )
    created = np.array(
        draw(st.lists(st.sampled_from([0.0, 100.0, 3600.0, 86400.0]) | st.floats(0, 1e7), min_size=m, max_size=m)),
        np.float64,
    )
    conf = np.array(draw(st.lists(st.sampled_from([0.95, 0.5]) | confs, min_size=m, max_size=m)), np.float64)
    types = np.array(draw(st.lists(st.integers(0, 1), min_size=m, max_size=m)), np.int64)
    tags = np.full((m, width), -1, np.int32)
    for r in range(m):
        row = draw(st.lists(st.integers(0, 3), max_size=width, unique=True))
        tags[r, : len(row)] = row
    margin = draw(st.sampled_from([-1.0, 0.0, 0.1, 0.3]))
    tag_margin = draw(st.sampled_from([-1.0, 0.1, 0.3, 1.0]))
    min_gap = draw(st.sampled_from([0.0, 3600.0]))
    conf_margin = draw(st.sampled_from([0.0, 0.1, 1.0]))
    return sims, created, conf, types, tags, margin, tag_margin, min_gap, conf_margin


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(resolve_st())
def test_resolve_order_matches_reference(args):
    from tierstore.kernels import resolve_order

    order, before = resolve_order(*args)
    ref_order, ref_before = R.ref_resolve_order(*args)
    assert order.tolist() == ref_order.tolist()
    assert before.tolist() == ref_before.tolist()
    assert sorted(order.tolist()) == list(range(len(args[0])))  # a permutation: nothing dropped


def test_resolve_order_puts_the_newer_statement_first_and_keeps_the_rest():
    from tierstore.kernels import resolve_order

    # 0: old value (sim .82), 1: unrelated better hit of another type, 2: new value (sim .78, a day later)
    sims = np.array([0.82, 0.80, 0.78])
    created = np.array([0.0, 10.0, 86400.0])
    conf = np.array([0.9, 0.9, 0.9])
    types = np.array([0, 1, 0], np.int64)
    tags = np.full((3, 0), -1, np.int32)
    order, before = resolve_order(sims, created, conf, types, tags, 0.1, 0.3, 3600.0, 0.1)
    assert order.tolist() == [2, 0, 1] and before.tolist() == [-1, -1, 0]
    # outside the margin, within the gap, a guess, or resolution off: unchanged
    for args in ((0.03, 0.03, 3600.0, 0.1), (0.1, 0.3, 2 * 86400.0, 0.1), (-1.0, -1.0, 3600.0, 0.1)):
        assert resolve_order(sims, created, conf, types, tags, *args)[0].tolist() == [0, 1, 2]
    guess = np.array([0.9, 0.9, 0.45])
    assert resolve_order(sims, created, guess, types, tags, 0.1, 0.3, 3600.0, 0.1)[0].tolist() == [0, 1, 2]
    # a shared tag widens the margin
    far = np.array([0.82, 0.80, 0.6])
    tagged = np.array([[7], [-1], [7]], np.int32)
    assert resolve_order(far, created, conf, types, tagged, 0.1, 0.3, 3600.0, 0.1)[0].tolist() == [2, 0, 1]
    assert resolve_order(far, created, conf, types, tags[:, :0].reshape(3, 0), 0.1, 0.3, 3600.0, 0.1)[0].tolist() == [
        0,
        1,
        2,
    ]


def test_a_superseded_memory_is_demoted_by_the_parameter():
    now = 1e6
    F = np.zeros((C.NF, 2))
    I = np.zeros((C.NI, 2), np.int32)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    F[C.F_LAST_ACCESS], F[C.F_CONF], F[C.F_T_CONF], F[C.F_HALF_LIFE] = now, 0.9, now, 86400.0
    F[C.F_W_REF], F[C.F_T_REF] = 1.0, now
    F[C.F_TTL_OVERRIDE] = [math.nan, 0.0]  # slot 1 superseded
    I[C.I_ALIVE] = 1
    tags = np.full((2, 0), -1, np.int32)
    p = _params(now, C.MODE_WEIGHTED_SUM)
    cand, cos = np.array([0, 1], np.int64), np.array([0.8, 0.8], np.float32)
    args = (np.ones(1, np.uint8), np.ones(1), E32, E32, np.empty(0), E32, 2)
    _, plain, _, _ = fused_rerank(cand, cos, F, I, tags, p, *args)
    assert plain[0] == plain[1]
    p[C.P_SUPERSEDED_DEMOTION] = 0.5
    pick, demoted, _, _ = fused_rerank(cand, cos, F, I, tags, p, *args)
    assert pick.tolist() == [0, 1] and demoted[1] == pytest.approx(0.5 * demoted[0])


def test_resolve_order_leaves_two_statements_tagged_apart():
    """Both tagged, no tag in common: the caller said they are about different
    things, as the automatic rule's tag veto has it."""
    from tierstore.kernels import resolve_order

    sims, created = np.array([0.82, 0.80]), np.array([0.0, 86400.0])
    conf, types = np.array([0.9, 0.9]), np.array([0, 0], np.int64)
    apart = np.array([[1], [2]], np.int32)
    one_untagged = np.array([[1], [-1]], np.int32)
    assert resolve_order(sims, created, conf, types, apart, 0.1, 0.3, 3600.0, 0.1)[0].tolist() == [0, 1]
    assert resolve_order(sims, created, conf, types, one_untagged, 0.1, 0.3, 3600.0, 0.1)[0].tolist() == [1, 0]

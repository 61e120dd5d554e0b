"""The cold index's code kernels (``kernels/codes.py``) against their
plain-Python twins in ``tierstore.kernels.reference``.

Property tests draw matrices of any width (including 0, 1, 63, 64, 65 and
other non-multiples of 64), empty inputs, repeated rows (so that distances
tie) and masks; ``m`` runs from below zero to past the number of rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tierstore.kernels import (
    code_words,
    hamming_distances,
    hamming_topk,
    int8_codes,
    int8_scores,
    sign_code,
    sign_codes,
    sign_scores,
)
from tierstore.kernels import reference as R

# deadline=None: the first call of a kernel may compile (or load Numba's cache).
PROPS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

NO_MASK = np.empty(0, np.int8)

dims = st.one_of(st.sampled_from([0, 1, 2, 63, 64, 65, 127, 128, 129, 384]), st.integers(0, 200))
# Components: exact zeros and signed zeros (neither sets a bit), tiny and large values.
components = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30]),
    st.floats(-1e6, 1e6, width=32),
)


@st.composite
def matrices(draw, max_rows: int = 24, d=None):
    d = draw(dims) if d is None else d
    n = draw(st.integers(0, max_rows))
    return draw(hnp.arrays(np.float32, (n, d), elements=components))


@st.composite
def tied_codes(draw):
    """``(query code, codes)``: rows drawn from a small pool of vectors, so
    that many distances are equal, and a query that is sometimes one of them."""
    d = draw(dims)
    pool = draw(hnp.arrays(np.float32, (draw(st.integers(1, 4)), d), elements=st.sampled_from([-1.0, 1.0])))
    n = draw(st.integers(0, 30))
    which = draw(st.lists(st.integers(0, len(pool) - 1), min_size=n, max_size=n))
    X = pool[which] if n else np.zeros((0, d), np.float32)
    q = draw(hnp.arrays(np.float32, (d,), elements=st.sampled_from([-1.0, 0.0, 1.0])))
    return sign_code(q), sign_codes(np.ascontiguousarray(X))


@st.composite
def masks(draw, n: int):
    kind = draw(st.sampled_from(["none", "int8", "bool"]))
    if kind == "none":
        return NO_MASK
    flags = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return np.array(flags, np.int8 if kind == "int8" else np.bool_)


# ---------------------------------------------------------------------------
# sign codes


@pytest.mark.slow
@PROPS
@given(matrices())
def test_sign_codes_match_reference(X):
    got = sign_codes(X)
    assert got.dtype == np.uint64 and got.shape == (X.shape[0], code_words(X.shape[1]))
    assert np.array_equal(got, R.ref_sign_codes(X))
    for i in range(X.shape[0]):
        assert np.array_equal(sign_code(X[i]), got[i])
        assert np.array_equal(sign_code(X[i]), R.ref_sign_code(X[i]))


@PROPS
@given(matrices())
def test_unused_high_bits_are_zero(X):
    d = X.shape[1]
    codes = sign_codes(X)
    if d % 64 and len(codes):
        assert not (codes[:, -1] >> np.uint64(d % 64)).any()
    # so a code's population count is the number of positive components
    assert np.bitwise_count(codes).sum(axis=1).tolist() == (X > 0).sum(axis=1).tolist()


def test_sign_code_bit_layout():
    v = np.zeros(130, np.float32)
    v[[0, 5, 63, 64, 129]] = 1.0
    v[[1, 70]] = -1.0
    assert sign_code(v).tolist() == [(1 << 0) | (1 << 5) | (1 << 63), 1 | 0, 1 << 1]
    assert code_words(0) == 0 and code_words(1) == 1 and code_words(64) == 1 and code_words(65) == 2


def test_opposite_vectors_differ_in_every_bit():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(50, 384)).astype(np.float32)
    assert hamming_distances(sign_code(-X[0]), sign_codes(X[:1])).tolist() == [384]
    assert hamming_distances(sign_code(X[0]), sign_codes(X[:1])).tolist() == [0]


# ---------------------------------------------------------------------------
# Hamming scan


@PROPS
@given(
    st.one_of(
        tied_codes(),
        st.builds(
            lambda X, q: (sign_code(q), sign_codes(X)),
            matrices(d=70),
            hnp.arrays(np.float32, (70,), elements=components),
        ),
    )
)
def test_hamming_distances_match_reference_and_numpy(case):
    q, codes = case
    got = hamming_distances(q, codes)
    assert got.dtype == np.int32 and got.shape == (codes.shape[0],)
    assert np.array_equal(got, R.ref_hamming_distances(q, codes))
    assert got.tolist() == np.bitwise_count(codes ^ q).sum(axis=1).tolist()


@PROPS
@given(tied_codes(), st.data())
def test_hamming_topk_matches_reference(case, data):
    q, codes = case
    n = codes.shape[0]
    m = data.draw(st.integers(-2, n + 3), label="m")
    allowed = data.draw(masks(n), label="allowed")
    rows, dist = hamming_topk(q, codes, m, allowed)
    assert rows.dtype == np.int64 and dist.dtype == np.int32
    ref_rows, ref_dist = R.ref_hamming_topk(q, codes, m, allowed)
    assert rows.tolist() == ref_rows.tolist()  # ties go to the lower row
    assert dist.tolist() == ref_dist.tolist()
    assert dist.tolist() == hamming_distances(q, codes)[rows].tolist()
    n_allowed = n if len(allowed) == 0 else int(np.count_nonzero(allowed))
    assert len(rows) == max(0, min(m, n_allowed))


def test_hamming_topk_unrolled_width_agrees_with_the_general_loop():
    # 384 dimensions unmasked take an unrolled path; an all-true mask takes the general loop: same answer,
    # and both the reference's, on rows with many ties (each row drawn twice)
    rng = np.random.default_rng(11)
    X = rng.normal(size=(1500, 384)).astype(np.float32)
    codes = sign_codes(np.concatenate([X, X[::-1]]))
    assert codes.shape[1] == 6
    everyone = np.ones(codes.shape[0], np.bool_)
    for q in (sign_code(X[3]), sign_code(rng.normal(size=384).astype(np.float32))):
        for m in (1, 10, 999, 3000, 3500):
            rows, dist = hamming_topk(q, codes, m, NO_MASK)
            rows_g, dist_g = hamming_topk(q, codes, m, everyone)
            ref_rows, ref_dist = R.ref_hamming_topk(q, codes, m, NO_MASK)
            assert rows.tolist() == rows_g.tolist() == ref_rows.tolist()
            assert dist.tolist() == dist_g.tolist() == ref_dist.tolist()


def test_hamming_topk_ties_and_order_example():
    # Rows 1 and 3 tie at distance 0, rows 0, 2 and 4 at distance 1.
    codes = np.array([[0b01], [0b00], [0b10], [0b00], [0b01]], np.uint64)
    q = np.array([0], np.uint64)
    rows, dist = hamming_topk(q, codes, 4, NO_MASK)
    assert rows.tolist() == [1, 3, 0, 2] and dist.tolist() == [0, 0, 1, 1]
    rows, dist = hamming_topk(q, codes, 10, np.array([1, 0, 1, 1, 1], np.int8))
    assert rows.tolist() == [3, 0, 2, 4] and dist.tolist() == [0, 1, 1, 1]
    rows, _ = hamming_topk(q, codes, 3, np.array([False, True, False, False, True]))
    assert rows.tolist() == [1, 4]


def test_hamming_topk_empty_inputs():
    for codes in (np.zeros((0, 2), np.uint64), np.zeros((5, 2), np.uint64)):
        q = np.zeros(2, np.uint64)
        for m in (0, -1):
            rows, dist = hamming_topk(q, codes, m, NO_MASK)
            assert rows.shape == (0,) and dist.shape == (0,)
    rows, _ = hamming_topk(np.zeros(2, np.uint64), np.zeros((5, 2), np.uint64), 3, np.zeros(5, np.int8))
    assert rows.shape == (0,)  # nothing allowed


def test_hamming_kernels_refuse_mismatched_shapes():
    codes = np.zeros((3, 2), np.uint64)
    with pytest.raises(ValueError, match="width"):
        hamming_topk(np.zeros(1, np.uint64), codes, 2, NO_MASK)
    with pytest.raises(ValueError, match="width"):
        hamming_distances(np.zeros(3, np.uint64), codes)
    with pytest.raises(ValueError, match="one flag per row"):
        hamming_topk(np.zeros(2, np.uint64), codes, 2, np.ones(2, np.int8))


# ---------------------------------------------------------------------------
# asymmetric scores


@st.composite
def score_cases(draw):
    d = draw(dims.filter(lambda d: d > 0))
    n = draw(st.integers(1, 12))
    X = draw(hnp.arrays(np.float32, (n, d), elements=components))
    q = draw(hnp.arrays(np.float32, (d,), elements=st.floats(-1, 1, width=32)))
    rows = np.array(draw(st.lists(st.integers(0, n - 1), max_size=12)), np.int64)
    return q, sign_codes(X), rows


@pytest.mark.slow
@PROPS
@given(score_cases())
def test_sign_scores_match_reference(case):
    q, codes, rows = case
    got = sign_scores(q, codes, rows)
    assert got.dtype == np.float32 and got.shape == rows.shape
    ref = R.ref_sign_scores(q, codes, rows)
    # float32 table sums: |error| <= (d + 2) · eps32 · Σ|q_j| (each term enters one partial sum)
    bound = (len(q) + 2) * 6e-8 * float(np.abs(q.astype(np.float64)).sum()) + 1e-7
    assert np.abs(got.astype(np.float64) - ref.astype(np.float64)).max(initial=0.0) <= bound


def test_sign_scores_example_and_order():
    q = np.array([0.5, -0.25, 0.125] + [0.0] * 67, np.float32)  # d = 70: two words
    X = np.zeros((3, 70), np.float32)
    X[0, :3] = [1, -1, 1]  # agrees with q everywhere q is non-zero
    X[1, :3] = [-1, 1, -1]  # disagrees everywhere
    X[2, :3] = [1, 1, 1]
    X[2, 69] = 1  # a bit where q is 0 changes nothing
    got = sign_scores(q, sign_codes(X), np.array([0, 1, 2, 2], np.int64))
    assert got.tolist() == [0.875, -0.875, 0.375, 0.375]
    # ranking by the score is ranking by q · sign(x)
    rng = np.random.default_rng(5)
    Y = rng.normal(size=(200, 384)).astype(np.float32)
    qq = rng.normal(size=384).astype(np.float32)
    s = sign_scores(qq, sign_codes(Y), np.arange(200, dtype=np.int64))
    np.testing.assert_allclose(s, np.where(Y > 0, 1.0, -1.0) @ qq.astype(np.float64), rtol=0, atol=2e-4)


def test_sign_scores_edge_cases():
    codes = sign_codes(np.ones((2, 5), np.float32))
    q = np.ones(5, np.float32)
    assert sign_scores(q, codes, np.empty(0, np.int64)).shape == (0,)
    assert sign_scores(q, codes[:0], np.empty(0, np.int64)).shape == (0,)
    with pytest.raises(IndexError):
        sign_scores(q, codes, np.array([2]))
    with pytest.raises(IndexError):
        sign_scores(q, codes, np.array([-1]))
    with pytest.raises(ValueError, match="width"):
        sign_scores(np.ones(65, np.float32), codes, np.array([0]))


# ---------------------------------------------------------------------------
# int8 codes

# Finite components, from exact zeros and subnormals (a scale that underflows) to large values.
finite = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 1e-38, 3e38, -3e38]),
    st.floats(-1e6, 1e6, width=32),
)


@st.composite
def int8_cases(draw):
    d = draw(dims)
    n = draw(st.integers(0, 12))
    X = draw(hnp.arrays(np.float32, (n, d), elements=finite))
    q = draw(hnp.arrays(np.float32, (d,), elements=st.floats(-1, 1, width=32)))
    return X, q


@PROPS
@given(int8_cases())
def test_int8_codes_match_reference(case):
    X, _ = case
    codes, scales = int8_codes(X)
    assert codes.dtype == np.int8 and codes.shape == X.shape
    assert scales.dtype == np.float32 and scales.shape == (X.shape[0],)
    ref_codes, ref_scales = R.ref_int8_codes(X)
    assert np.array_equal(codes, ref_codes)
    assert np.array_equal(scales, ref_scales)
    assert (scales > 0).all() and (codes >= -127).all()
    # each component within half a step of its decoded value (the step: the row's scale)
    for i in range(X.shape[0]):
        if np.isfinite(np.float64(scales[i]) * 127) and scales[i] >= np.finfo(np.float32).tiny:
            err = np.abs(X[i].astype(np.float64) - np.float64(scales[i]) * codes[i])
            assert err.max(initial=0.0) <= 0.5 * np.float64(scales[i]) * (1 + 1e-6)


@PROPS
@given(int8_cases())
def test_int8_scores_match_reference(case):
    X, q = case
    codes, scales = int8_codes(X)
    got = int8_scores(q, codes, scales)
    assert got.dtype == np.float32 and got.shape == (X.shape[0],)
    ref = R.ref_int8_scores(q, codes, scales)
    # float64 sums rounded once to float32: a relative float32 step, or less than the smallest normal
    # (equal where both overflow float32)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        assert ((g == r) | (np.abs(g - r) <= 2**-23 * np.abs(r) + 1e-37)).all()


def test_int8_code_examples():
    X = np.array([[0.5, -1.0, 0.25, 0.0], [0.0, 0.0, 0.0, 0.0], [127.0, -63.5, 0.5, 1.5]], np.float32)
    codes, scales = int8_codes(X)
    assert scales.tolist() == [np.float32(1.0 / 127.0), 1.0, 1.0]
    assert codes.tolist() == [[64, -127, 32, 0], [0, 0, 0, 0], [127, -64, 0, 2]]  # ties to even: -63.5, 0.5, 1.5
    q = np.array([1.0, 0.0, -1.0, 2.0], np.float32)
    assert int8_scores(q, codes, scales).tolist() == pytest.approx([(64 - 32) / 127.0, 0.0, 127.0 + 4.0], rel=1e-6)


def test_int8_scores_estimate_unit_cosines():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(500, 384)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    q = X[0] + 0.5 * rng.normal(size=384).astype(np.float32) / np.sqrt(384)
    q = (q / np.linalg.norm(q)).astype(np.float32)
    codes, scales = int8_codes(X)
    err = np.abs(int8_scores(q, codes, scales).astype(np.float64) - X.astype(np.float64) @ q)
    bound = 0.5 * scales.astype(np.float64) * np.abs(q).sum()
    assert (err <= bound + 1e-6).all()
    assert err.max() < 0.003  # the errors mostly cancel: far inside the bound (~0.01 here)


def test_int8_scores_refuse_mismatched_shapes():
    codes, scales = int8_codes(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match="width"):
        int8_scores(np.ones(5, np.float32), codes, scales)
    with pytest.raises(ValueError, match="one scale"):
        int8_scores(np.ones(4, np.float32), codes, scales[:2])
    assert int8_scores(np.ones(4, np.float32), codes[:0], scales[:0]).shape == (0,)

"""A cold search reads the exact vectors of only the candidates that may rank.

Each archived memory's int8 code puts its cosine with the query within a
bound (:class:`tierstore.tiers.cold_index.CodeEstimates`); ranking the
candidates at the low and the high end of their bounds
(:meth:`RowRanker.may_rank`) tells which ones can reach the best k whatever
their exact cosine. Only those are read from the archive.

What is checked: the bound holds against the exact cosine, including for
vectors whose every component sits half a step from its code (the worst
case the bound is built for); the rows ``may_rank`` keeps give the same best
k as all of them, in both cold orders, with filters and a context; and a
store's cold searches return the same hits as reading every chosen
candidate, while reading fewer vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cold_int8 import HOUR, T0, CountingStore, clustered, unit_rows

from tierstore import ManualClock, Policy, TierStore
from tierstore.core import row_ranker
from tierstore.kernels import int8_codes
from tierstore.tiers.cold_index import CodeEstimates, code_estimates, exact_count

DAY = 24 * HOUR


@dataclass
class CodesOf:
    """The one method of a ColdIndex that code_estimates reads, over given vectors' int8 codes
    (rid i: row i; rids past the end have no code)."""

    vectors: np.ndarray

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def int8_codes(self, rids):
        codes, scales = int8_codes(np.ascontiguousarray(self.vectors, np.float32))
        n = len(rids)
        out, sc, known = np.zeros((n, self.dim), np.int8), np.zeros(n, np.float32), np.zeros(n, np.bool_)
        for i, r in enumerate(rids):
            if r < len(self.vectors):
                out[i], sc[i], known[i] = codes[r], scales[r], True
        return out, sc, known


def exact_cosines(X: np.ndarray, q: np.ndarray) -> np.ndarray:
    qn = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64))
    return X.astype(np.float64) @ qn


def reference_err(X: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The bound, written out: each component of a row within half its scale of its code, so the
    estimate is within sum_j |q_j| * scale / 2 of the exact cosine."""
    qn = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64))
    scales = [np.float32(np.abs(x.astype(np.float64)).max() / 127.0) for x in X]
    return np.array([sum(abs(v) for v in qn) * float(s) / 2.0 for s in scales])


@settings(max_examples=60, deadline=None)
@given(
    dim=st.integers(2, 64),
    n=st.integers(1, 12),
    seed=st.integers(0, 2**32 - 1),
    spiky=st.booleans(),
)
def test_the_codes_bound_the_exact_cosine(dim, n, seed, spiky):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim))
    if spiky:  # one large component: a coarse scale, the others rounded hard
        X[:, 0] *= 30.0
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    q = rng.normal(size=dim).astype(np.float32)
    q /= np.linalg.norm(q)
    est = code_estimates(CodesOf(X), q, list(range(n)))  # type: ignore[arg-type]
    exact = exact_cosines(X, q)
    assert np.all(np.abs(est.approx - exact) <= est.err)
    assert np.allclose(est.err, reference_err(X, q) + 1e-5, rtol=1e-6)
    low, high = est.bounds()
    assert low.dtype == high.dtype == np.float32
    assert np.all(low <= exact) and np.all(exact <= high)
    assert np.all(low >= -1.0 - 1e-6) and np.all(high <= 1.0 + 1e-6)


def test_the_bound_is_met_where_every_component_rounds_by_half_a_step():
    """Components exactly between two codes, the query's signs along the rounding: the error is the
    bound itself (less float rounding), so a smaller bound would be wrong."""
    dim = 64
    scale = 1.0 / 127.0
    steps = np.full(dim, 10.5)
    steps[0] = 127.0  # fixes the scale at 1/127 of the largest component
    x = steps * scale
    norm = np.linalg.norm(x)
    X = (x / norm).astype(np.float32)[None, :]
    codes, scales = int8_codes(X)
    q = np.sign(X[0].astype(np.float64) - codes[0] * np.float64(scales[0]))
    q[q == 0] = 1.0
    q = (q / np.linalg.norm(q)).astype(np.float32)
    est = code_estimates(CodesOf(X), q, [0])  # type: ignore[arg-type]
    error = abs(float(est.approx[0]) - float(exact_cosines(X, q)[0]))
    assert error <= est.err[0]
    assert error >= 0.8 * (est.err[0] - 1e-5)  # the bound is tight here, not a loose constant


def test_a_missing_code_bounds_nothing_and_a_subset_keeps_its_order():
    X = unit_rows(np.random.default_rng(2), 5, 8)
    est = code_estimates(CodesOf(X), X[0], [4, 9, 1])  # type: ignore[arg-type]
    assert est.known.tolist() == [True, False, True]
    low, high = est.bounds()
    assert low[1] <= -1.0 and high[1] >= 1.0
    sub = est.of([1, 4])
    assert isinstance(sub, CodeEstimates) and sub.rids == [1, 4]
    assert sub.approx.tolist() == [est.approx[2], est.approx[0]]


# ---------------------------------------------------------------------------
# may_rank over catalog rows of archived memories

DIM = 16


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """60 archived memories of three types, stated over 20 days with confidences 0.3-1.0 and some
    tags, their catalog rows, and a store whose ranker ranks them."""
    tmp = tmp_path_factory.mktemp("bounds")
    policy = Policy.from_dict({"context": [{"when": "work", "tags": ["office"], "retrieval_multiplier": 1.5}]})
    clock = ManualClock(T0)
    store = TierStore.open(tmp / "s", dim=DIM, clock=clock, policy=policy, cold=tmp / "cold")
    X = unit_rows(np.random.default_rng(5), 60, DIM)
    rng = np.random.default_rng(6)
    for i in range(60):
        clock.set(T0 + i * DAY / 3)
        store.add(
            "u",
            f"m {i}",
            X[i],
            memory_type=("conversation", "preference", "task")[i % 3],
            confidence=float(rng.uniform(0.3, 1.0)),
            tags=["office"] if i % 4 == 0 else (),
            id=f"m{i}",
        )
    clock.set(T0 + 60 * DAY)
    while store.sweep().archived:
        pass
    cat = store.engine.catalog
    rows = cat.get_rows_by_rid([r for (r,) in cat.query("SELECT rid FROM cold_codes WHERE ns = 'u' ORDER BY rid")])
    assert len(rows) == 60
    yield store, rows, clock.now()
    store.close()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    k=st.integers(1, 10),
    width=st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.3]),
    by_relevance=st.booleans(),
    context=st.booleans(),
    min_conf=st.sampled_from([0.0, 0.5]),
    only=st.sampled_from([None, ["conversation", "task"]]),
)
def test_the_rows_that_may_rank_hold_the_best_k(archived, seed, n, k, width, by_relevance, context, min_conf, only):
    store, all_rows, now = archived
    eng = store.engine
    ranker, cp = eng.ranker, eng.compiled_policy
    rng = np.random.default_rng(seed)
    rows = [all_rows[i] for i in rng.choice(len(all_rows), n, replace=False)]
    exact = rng.uniform(-0.2, 1.0, n).astype(np.float32)
    # bounds around each exact cosine, of random (and sometimes no) width on each side
    low = (exact - width * rng.uniform(0, 1, n)).astype(np.float32)
    high = (exact + width * rng.uniform(0, 1, n)).astype(np.float32)
    ctx = cp.context(("work",) if context else ())
    allowed = cp.all_types if only is None else cp.type_allowed(only)
    opts = dict(k=k, ctx=ctx, allowed=allowed, min_conf=min_conf, now=now)
    kept = ranker.may_rank(rows, low, high, by_relevance=by_relevance, **opts)
    assert kept.shape == (n,) and kept.dtype == np.bool_
    full = ranker.rank(rows, exact.tolist(), explain=False, tier="cold", by_relevance=by_relevance, **opts)[1]
    some = [r for r, f in zip(rows, kept.tolist()) if f]
    narrowed = ranker.rank(some, exact[kept].tolist(), explain=False, tier="cold", by_relevance=by_relevance, **opts)[1]
    assert [h.hit.id for h in narrowed] == [h.hit.id for h in full]
    assert [h.hit.score for h in narrowed] == [h.hit.score for h in full]
    if width == 0.0 and len(full) == k:  # bounds with no width: the best k alone (no two scores tie here)
        assert kept.sum() == k


# ---------------------------------------------------------------------------
# a store's cold searches


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """2000 clustered 384-d conversations, all archived, and 30 queries near them."""
    tmp = tmp_path_factory.mktemp("bounds-big")
    X = clustered(2000, 384, 200, seed=3, draw_seed=1)
    Q = clustered(30, 384, 200, seed=3, draw_seed=2)
    clock = ManualClock(T0)
    store = TierStore.open(tmp / "s", dim=384, clock=clock, cold=CountingStore(tmp / "cold"))
    for start in range(0, 2000, 500):  # stated over a few days: recency and weight differ
        clock.set(T0 + start * 300.0)
        store.add_batch(
            "u",
            [
                {"content": f"note {i}", "embedding": X[i], "id": f"m{i}", "memory_type": "conversation"}
                for i in range(start, start + 500)
            ],
        )
    clock.advance(2 * DAY)
    while store.sweep().archived:
        pass
    assert store.engine.cold_index.count("u") == 2000
    yield store, Q
    store.close()


@pytest.mark.parametrize("k", [5, 10])
def test_cold_searches_read_fewer_vectors_and_return_the_same_hits(big, monkeypatch, k):
    store, Q = big
    runs = {}
    for narrow in (True, False):
        if not narrow:  # every chosen candidate read, as before the bounds
            monkeypatch.setattr(
                row_ranker.RowRanker, "may_rank", lambda self, rows, low, high, **kw: np.ones(len(rows), np.bool_)
            )
        hits, reads = [], []
        for q in Q:
            store.engine.vector_cache.clear()
            CountingStore.reads = []
            found = store.search("u", q, k=k, include_cold=True, record_access=False, explain=True)
            hits.append([(h.id, h.score, h.explain.raw["similarity"]) for h in found])
            reads.append(len(CountingStore.reads))
        runs[narrow] = hits, reads
    assert runs[True][0] == runs[False][0]
    assert all(r == exact_count(k) for r in runs[False][1])
    assert all(k <= r <= exact_count(k) for r in runs[True][1])
    assert sum(runs[True][1]) < 0.75 * sum(runs[False][1])

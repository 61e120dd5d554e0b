"""Values at the edges: stored exactly, or refused with tierstore's own error
and nothing changed (issue 13, item 5; issue 14's rough edges)."""

from __future__ import annotations

import numpy as np
import pytest

from tierstore import ManualClock, TierStore
from tierstore.errors import InvalidInputError, InvalidVectorError, TierStoreError
from tierstore.rules.validation import check_vector, check_vectors

DIM = 4
T0 = 1_700_000_000.0


@pytest.fixture
def store(tmp_path):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as s:
        s.add("n", "anchor", [1.0, 0.0, 0.0, 0.0], id="anchor")
        yield s


def _unchanged(store) -> tuple:
    st = store.stats(lifecycle=False)
    return st.total, st.by_tier["hot"], store.engine.catalog.query_one("SELECT count(*) FROM events")[0]


@pytest.mark.parametrize(
    "vec, expected",
    [
        (np.full(DIM, 3e38, np.float32), np.full(DIM, 0.5, np.float32)),  # was stored as zeros
        (np.full(DIM, 1e-45, np.float32), np.full(DIM, 0.5, np.float32)),  # was stored with length 0.943
        (np.array([3.4e38, -3.4e38, 0, 0], np.float32), np.array([2**-0.5, -(2**-0.5), 0, 0], np.float32)),
        ([1e-40, 0.0, 0.0, 0.0], np.array([1, 0, 0, 0], np.float32)),
        ([3, 4, 0, 0], np.array([0.6, 0.8, 0, 0], np.float32)),  # integers are numbers
    ],
)
def test_extreme_vectors_are_stored_as_their_exact_direction(store, vec, expected):
    mid = store.add("n", "x", vec)
    got = store.get("n", mid).embedding
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert abs(float(np.dot(got.astype(np.float64), got.astype(np.float64))) - 1.0) < 1e-6
    # as a query too (the rerank kernel's fallback path): the memory itself is found, at similarity 1
    hits = store.search("n", vec, k=2, record_access=False, explain=True)
    assert mid in [h.id for h in hits]
    assert abs(hits[0].explain.raw["similarity"] - 1.0) < 1e-5


@pytest.mark.parametrize(
    "vec, match",
    [
        ([1e200, 1, 1, 1], "beyond float32's range"),
        (["1.5", "1", "1", "1"], "real numbers, got strings"),
        (np.array([1 + 1j, 1, 1, 1]), "complex"),
        ([True, False, True, True], "booleans"),
        ([1.0, None, 0.0, 0.0], "non-numbers"),
        ([0.0, 0.0, 0.0, 0.0], "zero length"),
        ([float("nan"), 1, 1, 1], "NaN"),
    ],
)
def test_vectors_that_cannot_be_stored_are_refused_and_change_nothing(store, vec, match):
    before = _unchanged(store)
    with pytest.raises(InvalidVectorError, match=match):
        store.add("n", "x", vec)
    with pytest.raises(InvalidVectorError, match=match):
        store.search("n", vec)
    assert _unchanged(store) == before


def test_check_vectors_uses_the_same_rules():
    out = check_vectors(np.array([[3e38] * DIM, [1e-45] * DIM], np.float32), DIM)
    np.testing.assert_allclose(out, 0.5, rtol=1e-6)
    with pytest.raises(InvalidVectorError, match="strings"):
        check_vectors([["1"] * DIM], DIM)
    with pytest.raises(InvalidVectorError, match=r"\[1\] has zero length"):
        check_vectors([[1.0] * DIM, [0.0] * DIM], DIM)
    assert check_vector(np.array([0.5] * DIM, np.float32), DIM).dtype == np.float32


@pytest.mark.parametrize("field", ["content", "id", "source", "memory_type", "tags"])
def test_lone_surrogates_are_refused_everywhere_text_is_stored(store, field):
    bad = "note \udc80"
    kwargs = {"content": "ok"}
    kwargs[field] = [bad] if field == "tags" else bad
    before = _unchanged(store)
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        store.add("n", embedding=[0, 1, 0, 0], **kwargs)
    assert _unchanged(store) == before


def test_lone_surrogates_in_contexts_and_queries_are_refused(store):
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        store.set_context("n", ["\udc80"])
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        store.search("n", [1, 0, 0, 0], context_tags=["\ud800x"])
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        store.restore("n", text="passport \udc80")
    assert store.get_context("n") == ()


@pytest.mark.parametrize("content", ["", "   ", "\n\t"])
def test_empty_content_is_refused(store, content):
    before = _unchanged(store)
    with pytest.raises(InvalidInputError, match="content must not be empty"):
        store.add("n", content, [0, 1, 0, 0])
    assert _unchanged(store) == before


@pytest.mark.parametrize("k", [10**10, 10**12, 2**63, 2**200])
def test_a_huge_k_is_capped_at_the_namespace_size(store, k):
    store.add("n", "second", [0, 1, 0, 0])
    hits = store.search("n", [1, 0, 0, 0], k=k, record_access=False)
    assert [h.memory.content for h in hits] == ["anchor", "second"]
    assert store.search("empty-ns", [1, 0, 0, 0], k=k) == []


@pytest.mark.parametrize("k", [0, -1, True, 1.5, "3"])
def test_bad_k_is_refused(store, k):
    with pytest.raises(InvalidInputError, match="k must be a positive integer"):
        store.search("n", [1, 0, 0, 0], k=k)


@pytest.mark.parametrize(
    "where, match",
    [
        ({"created_after": "yesterday"}, "not a time"),
        ({"created_before": float("inf")}, "POSIX seconds"),
        ({"archived_after": [1]}, "POSIX seconds"),
        ({"memory_type": 5}, "memory_type"),
        ({"tags": [""]}, "invalid tag"),
        ({"source": 3}, "source must be a string"),
    ],
)
def test_bad_restore_filters_get_our_error(store, where, match):
    with pytest.raises(InvalidInputError, match=match):
        store.restore("n", where=where)


def test_restore_filters_take_datetimes_and_iso_strings(store):
    import datetime

    assert store.restore("n", where={"created_after": "2020-01-01"}) == []
    assert store.restore("n", where={"created_after": datetime.datetime(2020, 1, 1)}) == []


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(interval_s=0),
        dict(interval_s=-1),
        dict(interval_s=float("nan")),
        dict(interval_s=float("inf")),
        dict(max_items=0),
        dict(time_budget_s=float("inf")),
        dict(interval_s="1"),
    ],
)
def test_start_migrator_refuses_bad_settings_and_starts_nothing(store, kwargs):
    with pytest.raises(InvalidInputError):
        store.start_migrator(**kwargs)
    assert not store.engine.migrator.running


@pytest.mark.parametrize("budget", [0, -1, float("nan"), float("inf")])
def test_sweep_refuses_a_bad_time_budget(store, budget):
    with pytest.raises(TierStoreError):
        store.sweep(time_budget_s=budget)

"""The hot-path API: add, search, get, touch, feedback, pin, delete, bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from helpers import DIM, unit

from tierstore import (
    DimensionMismatchError,
    DuplicateIdError,
    InvalidConfidenceError,
    InvalidInputError,
    InvalidNamespaceError,
    InvalidVectorError,
    MemoryNotFoundError,
    StoreClosedError,
    TierStore,
    TierStoreError,
    UnknownMemoryTypeError,
)


def snapshot(store: TierStore):
    """Everything observable about the store's contents."""
    store.flush()
    rows = store.engine.catalog.query(
        "SELECT ns, id, content, memory_type, confidence, access_count, tier, pinned, w_ref, due_at"
        " FROM memories ORDER BY ns, id"
    )
    return rows, store.stats().by_tier


def test_add_then_get_roundtrip(store, rng):
    v = rng.normal(size=DIM)
    mid = store.add(
        "alice",
        "Allergic to peanuts",
        v,
        memory_type="fact",
        confidence=0.95,
        source="user_declaration",
        tags=["health", "food"],
        id="peanuts",
    )
    assert mid == "peanuts"
    m = store.get("alice", "peanuts")
    assert m.content == "Allergic to peanuts"
    assert m.tags == ("health", "food")
    assert m.memory_type == "fact" and m.source == "user_declaration" and m.tier == "hot"
    assert m.access_count == 0 and not m.pinned
    np.testing.assert_allclose(m.embedding, v / np.linalg.norm(v), rtol=1e-6)
    assert math.isclose(float(np.linalg.norm(m.embedding)), 1.0, rel_tol=1e-6)
    assert store.get("alice", "nope") is None
    assert store.get("bob", "peanuts") is None  # namespaces are isolated


def test_search_ranks_by_similarity_and_explains(store, rng):
    target = unit(rng)
    near = target + 0.05 * unit(rng)
    far = unit(rng)
    a = store.add("alice", "near", near)
    b = store.add("alice", "far", far)
    hits = store.search("alice", target, k=2, explain=True)
    assert [h.id for h in hits][0] == a
    assert hits[0].score >= hits[1].score
    ex = hits[0].explain
    assert ex is not None and ex.mode == "weighted_sum" and ex.tier == "hot"  # the default mode
    assert set(ex.raw) == {"similarity", "recency", "confidence", "context", "weight"}
    assert ex.raw["similarity"] == pytest.approx(float(np.dot(target, near / np.linalg.norm(near))), abs=1e-5)
    assert sum(ex.terms.values()) == pytest.approx(hits[0].score)
    assert all(0.0 <= x <= 1.0 for x in ex.normalised.values())
    assert hits[1].id == b


def test_hits_are_snapshots_taken_at_search_time(store, clock, rng):
    """A hit's memory is built on first use, but from the values captured by
    the search: later accesses and feedback do not show in it; it is built
    once; hits compare by id, score and memory; Hit.of makes one by hand."""
    from tierstore import Hit

    q = unit(rng)
    mid = store.add("alice", "likes tea", q, tags=["drinks"], confidence=0.7)
    store.add("alice", "other", unit(rng))
    (hit,) = store.search("alice", q, k=1, record_access=False)
    then = store.get("alice", mid)
    assert dataclasses.replace(then, embedding=None) == hit.memory  # every field as get() has it
    clock.advance(3600)
    store.touch("alice", [mid])
    store.feedback("alice", mid, positive=True)
    m = hit.memory
    assert m is hit.memory  # built once
    assert (m.id, m.content, m.tags, m.tier, m.access_count) == (mid, "likes tea", ("drinks",), "hot", 0)
    assert m.embedding is None and m.confidence == then.confidence and m.weight == then.weight
    now = store.get("alice", mid)
    assert now.access_count == 1 and now.last_accessed_at > m.last_accessed_at
    (again,) = store.search("alice", q, k=1, record_access=False)
    assert again != hit  # the memory has changed since
    same = Hit.of(hit.id, hit.score, hit.memory)
    assert same == hit and same.explain is None and repr(same) == repr(hit)
    with pytest.raises(TypeError):
        hash(hit)


def test_hits_survive_a_compaction_of_their_namespace(store, rng):
    """A compaction renumbers slots and replaces the namespace's string lists;
    hits taken before it still give their own ids and build their own
    memories (the snapshot holds the old lists), and a search after it sees
    the new slots."""
    vecs = [unit(rng) for _ in range(300)]
    ids = store.add_batch("c", [{"content": f"memory {i}", "embedding": v, "id": f"m{i}"} for i, v in enumerate(vecs)])
    unread = store.search("c", vecs[250], k=5, record_access=False)  # no id read before the compaction
    hits = store.search("c", vecs[250], k=5, record_access=False)
    assert hits[0].id == "m250"
    hot = store.engine.hot.ensure("c")
    old_strings = hot.strings
    for i in ids[:200]:
        store.delete("c", i)
    assert hot.strings is not old_strings and hot.n < 300  # compacted
    for h in hits:
        assert h.memory.id == h.id and h.memory.content == f"memory {h.id[1:]}"
    # ids are fetched on first read, from the lists the search saw: the slots they name were renumbered since
    assert [h.id for h in unread] == [h.id for h in hits]
    assert [h.memory.id for h in unread] == [h.id for h in hits]
    after = store.search("c", vecs[250], k=5, record_access=False)
    assert after[0].id == "m250" and after[0].memory.content == "memory 250"
    assert all(int(h.id[1:]) >= 200 for h in after)


def test_product_mode_explains_a_product(tmp_path, clock, rng):
    from tierstore import Policy

    with TierStore.open(
        tmp_path / "p", dim=DIM, clock=clock, policy=Policy.from_dict({"scoring": {"mode": "product"}})
    ) as store:
        q = unit(rng)
        store.add("a", "x", q + 0.1 * unit(rng))
        (hit,) = store.search("a", q, k=1, explain=True)
        assert hit.explain.mode == "product"
        assert math.prod(hit.explain.terms.values()) == pytest.approx(hit.score)


def test_search_filters_and_context_tags(store, rng):
    q = unit(rng)
    same = q + 0.01 * unit(rng)
    t1 = store.add("a", "travel fact", same, tags=["travel"], memory_type="fact")
    t2 = store.add("a", "plain fact", same, memory_type="fact", tags=["misc"])  # no shared tag: not superseded
    c1 = store.add("a", "a chat", same, memory_type="conversation", confidence=0.3, source="ai_guess")
    hits = store.search("a", q, k=3, context_tags=["travel"], record_access=False)
    assert hits[0].id == t1  # identical vectors: the context overlap decides
    only_conv = store.search("a", q, k=3, memory_types=["conversation"], record_access=False)
    assert [h.id for h in only_conv] == [c1]
    confident = store.search("a", q, k=3, min_confidence=0.7, record_access=False)
    assert c1 not in {h.id for h in confident} and {t1, t2} <= {h.id for h in confident}
    with pytest.raises(UnknownMemoryTypeError):
        store.search("a", q, memory_types=["gossip"])


def test_search_records_access_per_policy(store, rng):
    q = unit(rng)
    mid = store.add("a", "x", q)
    store.search("a", q, k=1)
    assert store.get("a", mid).access_count == 1
    store.search("a", q, k=1, record_access=False)
    assert store.get("a", mid).access_count == 1


def test_a_search_that_widens_its_candidates_records_each_hit_once(store, rng):
    """The hot tier counts a search's accesses as it ranks (kernels.rank_and_record): a first pass whose
    filter leaves fewer than k hits records nothing, the wider pass records each returned hit once, and
    what the filter left out is not counted."""
    q = unit(rng)
    near = store.add_batch(
        "w",
        [{"content": f"turn {i}", "embedding": q + 0.2 * unit(rng), "memory_type": "conversation"} for i in range(40)],
    )
    facts = store.add_batch(
        "w",
        [{"content": f"near fact {i}", "embedding": q + 0.001 * unit(rng), "memory_type": "fact"} for i in range(2)]
        + [{"content": f"far fact {i}", "embedding": unit(rng), "memory_type": "fact"} for i in range(3)],
    )
    # the first 20 candidates hold the two near facts only: 2 of the 5 hits asked for, so the candidates widen
    hits = store.search("w", q, k=5, memory_types=["fact"])
    assert sorted(h.id for h in hits) == sorted(facts)
    assert [store.get("w", i).access_count for i in facts] == [1] * 5
    assert all(store.get("w", i).access_count == 0 for i in near)
    store.search("w", q, k=5, memory_types=["fact"], record_access=False)
    assert [store.get("w", i).access_count for i in facts] == [1] * 5


def test_touch_feedback_pin_delete(store, clock, rng):
    mid = store.add("a", "x", unit(rng), memory_type="preference", confidence=0.6, source="ai_inference")
    before = store.get("a", mid)
    store.touch("a", [mid, mid])
    assert store.get("a", mid).access_count == 2
    up = store.feedback("a", mid, positive=True)
    assert up.confidence > before.confidence
    assert up.weight > before.weight
    assert up.due_at > before.due_at
    down = store.feedback("a", mid, positive=False)
    assert down.confidence < up.confidence and down.due_at < up.due_at
    store.pin("a", mid)
    assert store.get("a", mid).pinned and store.get("a", mid).due_at is None
    assert store.delete("a", mid) is True
    assert store.get("a", mid) is None
    assert store.delete("a", mid) is False
    assert store.search("a", unit(rng), k=5) == []


def test_implicit_feedback_moves_less_than_explicit(store, rng):
    v = unit(rng)
    a = store.add("a", "x", v, confidence=0.5, source="ai_inference")
    b = store.add("a", "y", v, confidence=0.5, source="ai_inference")
    ea = store.feedback("a", a, positive=False)
    eb = store.feedback("a", b, positive=False, implicit=True)
    base = store.policy.fuse_confidence(0.5, 0.7, None)
    assert ea.confidence < eb.confidence < base + 1e-12


# ---------------------------------------------------------------- bad input

BAD_ADDS = [
    (dict(embedding=np.ones(DIM + 1)), DimensionMismatchError),
    (dict(embedding=np.full(DIM, np.nan)), InvalidVectorError),
    (dict(embedding=np.r_[np.ones(DIM - 1), np.inf]), InvalidVectorError),
    (dict(embedding=np.zeros(DIM)), InvalidVectorError),
    (dict(confidence=1.5), InvalidConfidenceError),
    (dict(confidence=-0.1), InvalidConfidenceError),
    (dict(confidence=float("nan")), InvalidConfidenceError),
    (dict(memory_type="gossip"), UnknownMemoryTypeError),
    (dict(ns="../etc"), InvalidNamespaceError),
    (dict(ns=".."), InvalidNamespaceError),
    (dict(ns="."), InvalidNamespaceError),
    (dict(ns=""), InvalidNamespaceError),
    (dict(ns="a" * 129), InvalidNamespaceError),
    (dict(ns="a/b"), InvalidNamespaceError),
    (dict(tags="travel"), InvalidInputError),
    (dict(tags=["ok", ""]), InvalidInputError),
    (dict(ttl_seconds=-5), InvalidInputError),
    (dict(ttl_seconds=float("inf")), InvalidInputError),
    (dict(id=""), InvalidInputError),
    (dict(content=None), InvalidInputError),
    (dict(pinned="yes"), InvalidInputError),
]


@pytest.mark.parametrize("override,exc", BAD_ADDS, ids=[f"{list(o)[0]}-{e.__name__}" for o, e in BAD_ADDS])
def test_bad_add_raises_and_changes_nothing(store, rng, override, exc):
    store.add("alice", "existing", unit(rng), id="keep")
    before = snapshot(store)
    kwargs = dict(ns="alice", content="new", embedding=unit(rng))
    kwargs.update(override)
    ns, content, emb = kwargs.pop("ns"), kwargs.pop("content"), kwargs.pop("embedding")
    with pytest.raises(exc) as info:
        store.add(ns, content, emb, **kwargs)
    assert isinstance(info.value, TierStoreError)
    assert str(info.value)  # a message that says what is wrong
    assert snapshot(store) == before


def test_bad_batch_rejects_every_item(store, rng):
    before = snapshot(store)
    items = [{"content": "ok", "embedding": unit(rng)}, {"content": "bad", "embedding": np.zeros(DIM)}]
    with pytest.raises(InvalidVectorError, match="item 1"):
        store.add_batch("alice", items)
    with pytest.raises(DuplicateIdError):
        store.add_batch(
            "alice",
            [{"content": "a", "embedding": unit(rng), "id": "x"}, {"content": "b", "embedding": unit(rng), "id": "x"}],
        )
    with pytest.raises(InvalidInputError, match="unknown keys"):
        store.add_batch("alice", [{"content": "a", "embedding": unit(rng), "colour": "red"}])
    assert snapshot(store) == before


def test_duplicate_id_raises_and_keeps_original(store, rng):
    store.add("alice", "first", unit(rng), id="m1")
    before = snapshot(store)
    with pytest.raises(DuplicateIdError):
        store.add("alice", "second", unit(rng), id="m1")
    assert snapshot(store) == before
    assert store.get("alice", "m1").content == "first"
    store.add("bob", "same id, other namespace", unit(rng), id="m1")


def test_unknown_ids_and_bad_arguments_change_nothing(store, rng):
    mid = store.add("alice", "x", unit(rng))
    before = snapshot(store)
    with pytest.raises(MemoryNotFoundError):
        store.touch("alice", [mid, "missing"])
    with pytest.raises(MemoryNotFoundError):
        store.feedback("alice", "missing", positive=True)
    with pytest.raises(MemoryNotFoundError):
        store.pin("alice", "missing")
    with pytest.raises(InvalidInputError):
        store.feedback("alice", mid, positive=True, strength=3.0)
    with pytest.raises(InvalidInputError):
        store.feedback("alice", mid, positive="yes")
    with pytest.raises(DimensionMismatchError):
        store.search("alice", np.ones(3))
    with pytest.raises(InvalidVectorError):
        store.search("alice", np.zeros(DIM))
    with pytest.raises(InvalidInputError):
        store.search("alice", unit(rng), k=0)
    with pytest.raises(InvalidConfidenceError):
        store.search("alice", unit(rng), min_confidence=2)
    with pytest.raises(InvalidNamespaceError):
        store.search("..", unit(rng))
    assert snapshot(store) == before


@pytest.fixture(params=["exact", "hnswlib"])
def either_store(request, tmp_path, clock):
    """A store whose namespace "n" holds 300 memories, searched exactly or
    through an hnswlib index (threshold lowered below 300)."""
    from tierstore import HotSettings, Settings

    threshold = 2048 if request.param == "exact" else 100
    s = TierStore.open(
        tmp_path / "s", dim=DIM, clock=clock, settings=Settings(hot=HotSettings(exact_threshold=threshold))
    )
    rng = np.random.default_rng(7)
    s.add_batch("n", [{"content": f"m{i}", "embedding": unit(rng), "id": f"m{i}"} for i in range(300)])
    assert (s.engine.hot.ensure("n").index is None) == (request.param == "exact")
    yield s
    s.close()


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros(DIM, np.float32),
        np.r_[np.ones(DIM - 1), np.nan].astype(np.float32),
        np.r_[np.ones(DIM - 1), -np.inf].astype(np.float32),
    ],
    ids=["zero", "nan", "inf"],
)
def test_bad_float32_query_raises_and_changes_nothing(either_store, bad):
    """A float32 query of the right shape skips the Python-side check (the
    rerank kernel measures its length): a zero, NaN or infinite one still
    raises, records no access, and so does it on a namespace with no memories."""
    s = either_store
    before = snapshot(s)
    with pytest.raises(InvalidVectorError):
        s.search("n", bad, k=5, record_access=True)
    with pytest.raises(InvalidVectorError):
        s.search("empty", bad, k=5)
    assert snapshot(s) == before


@pytest.mark.parametrize("length", [1.0, 1 + 1e-3, 0.3, 7.0, 2.0**15, 2.0**-10, 1e9, 1e25, 1e-30])
def test_query_length_does_not_change_the_ranking(either_store, length):
    """Search is by cosine: any positive multiple of a query gives the same
    hits and scores, whether the kernel divides by its length (inside the
    band it takes as given) or the store normalises it first (outside,
    including lengths whose float32 dot products would overflow); and the
    accesses are counted once."""
    s = either_store
    rng = np.random.default_rng(11)
    u = unit(rng)
    want = s.search("n", u, k=10, record_access=False, explain=True)
    q = (u.astype(np.float64) * length).astype(np.float32)
    assert np.isfinite(q).all() and (q != 0).any()
    got = s.search("n", q, k=10, record_access=True, explain=True)
    assert [h.id for h in got] == [h.id for h in want]
    for g, w in zip(got, want):
        assert g.score == pytest.approx(w.score, rel=1e-5, abs=1e-6)
        assert g.explain.raw["similarity"] == pytest.approx(w.explain.raw["similarity"], abs=2e-6)
    s.flush()
    counts = dict(s.engine.catalog.query("SELECT id, access_count FROM memories WHERE ns = 'n'"))
    assert sorted(i for i, c in counts.items() if c) == sorted(h.id for h in want)
    assert set(counts[h.id] for h in want) == {1}
    # the caller's array is left as it was
    np.testing.assert_array_equal(q, (u.astype(np.float64) * length).astype(np.float32))


def test_closed_store_refuses_calls(tmp_path, clock, rng):
    s = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreClosedError):
        s.add("a", "x", unit(rng))
    with pytest.raises(StoreClosedError):
        s.search("a", unit(rng))

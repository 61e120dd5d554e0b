"""Conformance suite for the store API: :class:`TierStore` and :class:`RemoteStore` alike.

Like :mod:`tierstore.testing.object_store_suite`: each implementation's test
module is a thin subclass that says how to build an empty store whose time
is driven by the suite's ``clock`` and whose embedder is
:func:`hash_embed`::

    class TestLocal(StoreAPITests):
        @pytest.fixture
        def api(self, tmp_path, clock):
            with TierStore.open(tmp_path / "s", embedder=hash_embed, clock=clock) as store:
                yield store

Every test goes through the public API only (so the same test runs over
HTTP) and checks behaviour a wrong implementation would get wrong: return
types and values, the exception class of each bad input, and that a failed
call changes nothing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

from tierstore import ManualClock
from tierstore.errors import (
    DimensionMismatchError,
    DuplicateIdError,
    InvalidConfidenceError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidVectorError,
    MemoryNotFoundError,
    StoreClosedError,
    TierStoreError,
    UnknownMemoryTypeError,
)
from tierstore.policy import Policy
from tierstore.records import Explain, Hit, Memory, Stats, SweepReport
from tierstore.testing.embedders import DIM, T0, hash_embed

__all__ = ["StoreAPITests", "hash_embed", "DIM", "T0"]


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def snapshot(api: Any, ids: dict[str, list[str]]) -> Any:
    """Everything observable through the API about some memories and the store's counts."""
    mems = {ns: [api.get(ns, i) for i in id_list] for ns, id_list in ids.items()}
    stats = api.stats(lifecycle=False)
    return api.namespaces(), mems, stats.total, stats.by_tier, stats.by_type, stats.pinned


BAD_ADDS: list[tuple[dict[str, Any], type[Exception]]] = [
    (dict(embedding=np.ones(DIM + 1)), DimensionMismatchError),
    (dict(embedding=[1.0, 2.0]), DimensionMismatchError),
    (dict(embedding=np.full(DIM, np.nan)), InvalidVectorError),
    (dict(embedding=np.full(DIM, np.nan, np.float32)), InvalidVectorError),
    (dict(embedding=[math.inf] + [0.0] * (DIM - 1)), InvalidVectorError),
    (dict(embedding=np.zeros(DIM, np.float32)), InvalidVectorError),
    (dict(embedding=["a"] * DIM), InvalidVectorError),
    (dict(embedding=np.full(DIM, 1 + 2j)), InvalidVectorError),
    (dict(embedding=b"\x00" * DIM * 4), InvalidVectorError),
    (dict(embedding=object()), InvalidVectorError),
    (dict(embedding={"x": 1}), InvalidVectorError),
    (dict(embedding=np.ones(DIM, dtype=bool)), InvalidVectorError),
    (dict(confidence=1.5), InvalidConfidenceError),
    (dict(confidence=-0.1), InvalidConfidenceError),
    (dict(confidence=float("nan")), InvalidConfidenceError),
    (dict(confidence="high"), InvalidConfidenceError),
    (dict(memory_type="gossip"), UnknownMemoryTypeError),
    (dict(ns="../etc"), InvalidNamespaceError),
    (dict(ns=""), InvalidNamespaceError),
    (dict(ns="a" * 129), InvalidNamespaceError),
    (dict(ns="a/b"), InvalidNamespaceError),
    (dict(tags="travel"), InvalidInputError),
    (dict(tags=["ok", ""]), InvalidInputError),
    (dict(ttl_seconds=-5), InvalidInputError),
    (dict(id=""), InvalidInputError),
    (dict(content=None), InvalidInputError),
    (dict(pinned="yes"), InvalidInputError),
    (dict(supersedes=["nobody"]), MemoryNotFoundError),
    (dict(key=""), InvalidKeyError),
    (dict(key="home city"), InvalidKeyError),
    (dict(key=5), InvalidKeyError),
]


class StoreAPITests:
    """Subclass as ``Test<Implementation>`` and provide an ``api`` fixture: an
    empty store with the :func:`hash_embed` embedder, driven by ``clock``. A
    served store must allow pages of 3 memories (``memories_page``'s limit);
    a page size of 3 makes ``memories`` take several pages."""

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock(T0)

    @pytest.fixture
    def rng(self) -> np.random.Generator:
        return np.random.default_rng(1234)

    @pytest.fixture
    def api(self, tmp_path: Any, clock: ManualClock) -> Any:
        raise NotImplementedError("subclasses of StoreAPITests provide an `api` fixture")

    # -- add and get ---------------------------------------------------------------------

    def test_add_then_get_roundtrip(self, api: Any, rng: np.random.Generator) -> None:
        v = rng.normal(size=DIM)  # float64, not unit length: stored normalised, in float64 arithmetic
        mid = api.add(
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
        m = api.get("alice", "peanuts")
        assert isinstance(m, Memory)
        assert (m.id, m.namespace, m.content, m.tags) == ("peanuts", "alice", "Allergic to peanuts", ("health", "food"))
        assert (m.memory_type, m.source, m.tier, m.access_count, m.pinned) == (
            "fact",
            "user_declaration",
            "hot",
            0,
            False,
        )
        assert isinstance(m.embedding, np.ndarray) and m.embedding.dtype == np.float32
        np.testing.assert_allclose(m.embedding, v / np.linalg.norm(v), rtol=1e-6)
        assert m.expires_at is not None and m.expires_at > m.created_at
        assert api.get("alice", "nope") is None
        assert api.get("bob", "peanuts") is None  # namespaces are isolated
        assert api.namespaces() == ["alice"]

    def test_vectors_in_every_form_store_the_same(self, api: Any, rng: np.random.Generator) -> None:
        v32 = unit(rng) * np.float32(3.0)
        forms = {
            "f32": v32,
            "f64": v32.astype(np.float64),
            "list": [float(x) for x in v32],
            "tuple": tuple(float(x) for x in v32),
            "2d": v32[None, :],
        }
        for name, vec in forms.items():
            api.add("v", name, vec, id=name)
        stored = {name: api.get("v", name).embedding for name in forms}
        for name in forms:
            np.testing.assert_allclose(stored[name], stored["f32"], rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(stored["f64"], stored["list"])  # the same float64 numbers, bit for bit

    def test_text_in_with_the_embedder(self, api: Any) -> None:
        home = api.add("alice", "Alice lives in Tokyo")
        api.add("alice", "Alice likes green tea")
        explicit = api.add("alice", "a note", "peanuts allergy severe")  # a text as the embedding: embedded
        hits = api.search("alice", "where does alice live? tokyo", k=1)
        assert hits[0].id == home
        assert api.search("alice", "peanuts allergy", k=1)[0].id == explicit
        np.testing.assert_allclose(
            api.get("alice", home).embedding,
            hash_embed(["Alice lives in Tokyo"])[0] / np.linalg.norm(hash_embed(["Alice lives in Tokyo"])[0]),
            rtol=1e-6,
        )
        ids = api.add_batch(
            "alice",
            [
                {"content": "one two"},
                {"content": "x", "embedding": "three four"},
                {"content": "v", "embedding": hash_embed(["five"])[0]},
            ],
        )
        assert len(ids) == 3 and api.search("alice", "three four", k=1)[0].id == ids[1]

    def test_empty_text_is_refused(self, api: Any) -> None:
        with pytest.raises(InvalidInputError):
            api.add("alice", "   ")
        with pytest.raises(InvalidInputError):
            api.search("alice", "")
        assert api.namespaces() == []

    def test_add_batch_in_order_and_all_or_nothing(self, api: Any, rng: np.random.Generator) -> None:
        vecs = [unit(rng) for _ in range(5)]
        ids = api.add_batch(
            "b", [{"content": f"m{i}", "embedding": v, "id": f"m{i}", "tags": ("t",)} for i, v in enumerate(vecs)]
        )
        assert ids == [f"m{i}" for i in range(5)]
        assert api.get("b", "m3").content == "m3" and api.get("b", "m3").tags == ("t",)
        before = snapshot(api, {"b": ids})
        with pytest.raises(InvalidVectorError, match="item 1"):
            api.add_batch(
                "b",
                [{"content": "ok", "embedding": unit(rng)}, {"content": "bad", "embedding": np.zeros(DIM, np.float32)}],
            )
        with pytest.raises(DuplicateIdError):
            api.add_batch(
                "b",
                [
                    {"content": "a", "embedding": unit(rng), "id": "x"},
                    {"content": "b", "embedding": unit(rng), "id": "x"},
                ],
            )
        with pytest.raises(DuplicateIdError):
            api.add_batch("b", [{"content": "again", "embedding": unit(rng), "id": "m0"}])
        with pytest.raises(InvalidInputError, match="unknown keys|unknown field"):
            api.add_batch("b", [{"content": "a", "embedding": unit(rng), "colour": "red"}])
        with pytest.raises(InvalidInputError):
            api.add_batch("b", {"content": "not a list"})
        with pytest.raises(InvalidInputError):
            api.add_batch("b", ["not a dict"])
        assert snapshot(api, {"b": ids}) == before
        assert api.add_batch("b", []) == []

    def test_upsert_batch_replaces_under_the_same_ids(self, api: Any, rng: np.random.Generator) -> None:
        ids = api.add_batch("u", [{"content": f"v1 {i}", "embedding": unit(rng), "id": f"d{i}"} for i in range(3)])
        new_vec = unit(rng)
        got = api.upsert_batch(
            "u",
            [
                {
                    "content": "v2 1",
                    "embedding": new_vec,
                    "id": "d1",
                    "tags": ("new",),
                    "metadata": {"rev": 2, "path": ["a", "b"]},
                },
                {"content": "fresh", "embedding": unit(rng), "id": "d9"},
            ],
        )
        assert got == ["d1", "d9"]
        assert api.get("u", "d1").content == "v2 1" and api.get("u", "d1").tags == ("new",)
        assert api.get("u", "d1").metadata == {"rev": 2, "path": ["a", "b"]}
        assert api.search("u", new_vec, k=1, record_access=False)[0].id == "d1"
        everything = api.search("u", new_vec, k=10, record_access=False)
        assert sorted(h.id for h in everything) == sorted(ids + ["d9"])  # replaced, not added beside
        before = snapshot(api, {"u": ids + ["d9"]})
        with pytest.raises(InvalidVectorError):  # one bad item: nothing replaced
            api.upsert_batch(
                "u",
                [
                    {"content": "v3 0", "embedding": unit(rng), "id": "d0"},
                    {"content": "bad", "embedding": np.zeros(DIM, np.float32), "id": "d2"},
                ],
            )
        with pytest.raises(DuplicateIdError):
            api.upsert_batch(
                "u",
                [
                    {"content": "a", "embedding": unit(rng), "id": "d0"},
                    {"content": "b", "embedding": unit(rng), "id": "d0"},
                ],
            )
        assert snapshot(api, {"u": ids + ["d9"]}) == before

    @pytest.mark.parametrize(
        "override,exc", BAD_ADDS, ids=[f"{list(o)[0]}-{e.__name__}-{i}" for i, (o, e) in enumerate(BAD_ADDS)]
    )
    def test_bad_add_raises_the_same_error_and_changes_nothing(
        self, api: Any, rng: np.random.Generator, override: dict, exc: type
    ) -> None:
        api.add("alice", "existing", unit(rng), id="keep")
        before = snapshot(api, {"alice": ["keep"]})
        kwargs: dict[str, Any] = dict(ns="alice", content="new", embedding=unit(rng))
        kwargs.update(override)
        ns, content, emb = kwargs.pop("ns"), kwargs.pop("content"), kwargs.pop("embedding")
        with pytest.raises(exc) as info:
            api.add(ns, content, emb, **kwargs)
        assert type(info.value) is exc and isinstance(info.value, TierStoreError)
        assert str(info.value)  # a message that says what is wrong
        assert snapshot(api, {"alice": ["keep"]}) == before

    def test_duplicate_id_keeps_the_original(self, api: Any, rng: np.random.Generator) -> None:
        api.add("alice", "first", unit(rng), id="m1")
        with pytest.raises(DuplicateIdError):
            api.add("alice", "second", unit(rng), id="m1")
        assert api.get("alice", "m1").content == "first"
        assert api.add("bob", "same id, other namespace", unit(rng), id="m1") == "m1"

    # -- listing -------------------------------------------------------------------------

    def test_memories_lists_a_namespace_in_the_order_added(
        self, api: Any, rng: np.random.Generator, clock: ManualClock
    ) -> None:
        # more memories than one page of a remote store whose page size the subclass sets low
        chat = api.add("m", "asked about the weather in Porto", unit(rng), memory_type="conversation")
        ids = [chat] + api.add_batch(
            "m",
            [
                {"content": f"fact {i}", "embedding": unit(rng), "tags": [f"t{i}"], "metadata": {"i": i}}
                for i in range(6)
            ],
        )
        ids.append(api.add("m", "pinned one", unit(rng), pinned=True, key="slot"))
        api.add("other", "not listed", unit(rng))
        api.touch("m", [ids[2]])  # an access not yet flushed: listed with it
        clock.advance(2 * 3600)
        assert api.sweep().archived == 1  # the conversation goes cold: listed from the catalog
        listed = api.memories("m")
        assert all(isinstance(m, Memory) for m in listed)
        assert [m.id for m in listed] == ids
        assert [m.tier for m in listed] == ["cold"] + ["hot"] * 7 and listed[2].access_count == 1
        assert all(m.embedding is None for m in listed)
        for m in listed:  # get's snapshot, key and superseded_by included
            assert m == api.get("m", m.id)
        assert listed[-1].key == "slot"
        assert listed[1].metadata == {"i": 0} and listed[6].tags == ("t5",)
        with_vectors = api.memories("m", with_embedding=True)
        assert with_vectors == listed and with_vectors[0].embedding is None  # cold: no vector in the catalog
        for m in with_vectors[1:]:
            assert m.embedding.dtype == np.float32
            np.testing.assert_array_equal(m.embedding, api.get("m", m.id).embedding)
        assert api.get("m", ids[1]).access_count == 0  # listing counts no access
        assert api.memories("nobody") == []
        with pytest.raises(InvalidNamespaceError):
            api.memories("../m")

    def test_memories_page_walks_the_namespace_with_cursors(self, api: Any, rng: np.random.Generator) -> None:
        ids = api.add_batch("p", [{"content": f"m{i}", "embedding": unit(rng)} for i in range(7)])
        api.add("q", "elsewhere", unit(rng))
        pages, after = [], None
        while True:
            page, after = api.memories_page("p", after=after, limit=3)
            pages.append([m.id for m in page])
            if after is None:
                break
            assert isinstance(after, str)
        assert pages == [ids[0:3], ids[3:6], ids[6:7]]
        exact = api.add_batch("e", [{"content": f"e{i}", "embedding": unit(rng)} for i in range(3)])
        page, after = api.memories_page("e", limit=3)  # an exact fit: no empty page after it
        assert [m.id for m in page] == exact and after is None
        assert api.memories_page("e") == (api.memories("e"), None)  # the default page: at least 3
        # pages are read one at a time: a memory added meanwhile comes at the end, one deleted is not listed
        first, after = api.memories_page("p", limit=3, with_embedding=True)
        assert all(m.embedding is not None for m in first)
        late = api.add("p", "added while listing", unit(rng))
        assert api.delete("p", ids[4])
        rest: list[str] = []
        while after is not None:
            page, after = api.memories_page("p", after=after, limit=3)
            rest += [m.id for m in page]
        assert rest == ids[3:4] + ids[5:] + [late]
        # bad input: the error class TierStore raises, and nothing changes
        _, cursor = api.memories_page("p", limit=1)
        before = snapshot(api, {"p": ids})
        bad_pages: list[tuple[dict[str, Any], type[Exception]]] = [
            (dict(after="not a cursor"), InvalidInputError),
            (dict(after="W10"), InvalidInputError),  # base64 of JSON, but not a cursor
            (dict(after=5), InvalidInputError),
            (dict(ns="q", after=cursor), InvalidInputError),  # another namespace's cursor
            (dict(limit=0), InvalidInputError),
            (dict(limit=-3), InvalidInputError),
            (dict(limit="3"), InvalidInputError),
            (dict(limit=True), InvalidInputError),
            (dict(with_embedding="yes"), InvalidInputError),
            (dict(ns="a/b"), InvalidNamespaceError),
        ]
        for kwargs, exc in bad_pages:
            ns = kwargs.pop("ns", "p")
            with pytest.raises(exc) as info:
                api.memories_page(ns, **kwargs)
            assert type(info.value) is exc and str(info.value), kwargs
        for bad in ("yes", 1, None):
            with pytest.raises(InvalidInputError):
                api.memories("p", with_embedding=bad)
        assert snapshot(api, {"p": ids}) == before

    # -- what the store is ---------------------------------------------------------------

    def test_dim_policy_store_id_and_embedder(self, api: Any) -> None:
        assert api.dim == DIM and isinstance(api.dim, int)
        assert isinstance(api.policy, Policy) and api.policy == Policy()  # the fixture's store: the default
        assert isinstance(api.store_id, str) and len(api.store_id) == 32 and api.store_id == api.store_id
        assert (api.embedder.name, api.embedder.dim) == (hash_embed.name, DIM)  # type: ignore[attr-defined]
        for name in ("dim", "policy", "store_id", "embedder"):
            with pytest.raises(AttributeError):  # read-only: what the store is, not a setting
                setattr(api, name, None)
        assert api.dim == DIM and api.policy == Policy()

    # -- search --------------------------------------------------------------------------

    def test_search_ranks_by_similarity_and_explains(self, api: Any, rng: np.random.Generator) -> None:
        target = unit(rng)
        near = api.add("alice", "near", target + 0.05 * unit(rng))
        far = api.add("alice", "far", unit(rng))
        hits = api.search("alice", target, k=2, explain=True)
        assert all(isinstance(h, Hit) for h in hits) and [h.id for h in hits] == [near, far]
        assert hits[0].score >= hits[1].score
        ex = hits[0].explain
        assert isinstance(ex, Explain) and ex.mode == "weighted_sum" and ex.tier == "hot"
        assert set(ex.raw) == {"similarity", "recency", "confidence", "context", "weight"}
        assert sum(ex.terms.values()) == pytest.approx(hits[0].score)
        assert api.search("alice", target, k=2)[0].explain is None

    def test_hits_are_snapshots_equal_to_get(self, api: Any, rng: np.random.Generator, clock: ManualClock) -> None:
        q = unit(rng)
        mid = api.add("alice", "likes tea", q, tags=["drinks"], confidence=0.7)
        (hit,) = api.search("alice", q, k=1, record_access=False)
        then = api.get("alice", mid)
        assert isinstance(hit.memory, Memory) and hit.memory.embedding is None
        assert dataclasses.replace(then, embedding=None) == hit.memory
        clock.advance(3600)
        api.touch("alice", [mid])
        assert hit.memory.access_count == 0 and api.get("alice", mid).access_count == 1

    def test_search_filters_and_context(self, api: Any, rng: np.random.Generator) -> None:
        q = unit(rng)
        same = q + 0.01 * unit(rng)
        t1 = api.add("a", "travel fact", same, tags=["travel"], memory_type="fact")
        t2 = api.add("a", "plain fact", same, memory_type="fact", tags=["misc"])  # no shared tag: not superseded
        c1 = api.add("a", "a chat", same, memory_type="conversation", confidence=0.3, source="ai_guess")
        assert api.search("a", q, k=3, context_tags=["travel"], record_access=False)[0].id == t1
        assert [h.id for h in api.search("a", q, k=3, memory_types=["conversation"], record_access=False)] == [c1]
        confident = {h.id for h in api.search("a", q, k=3, min_confidence=0.7, record_access=False)}
        assert c1 not in confident and {t1, t2} <= confident
        api.set_context("a", ["travel"])
        assert api.get_context("a") == ("travel",)
        assert api.search("a", q, k=3, record_access=False)[0].id == t1  # the active context applies
        with pytest.raises(UnknownMemoryTypeError):
            api.search("a", q, memory_types=["gossip"])

    def test_search_counts_accesses_exactly(self, api: Any, rng: np.random.Generator) -> None:
        q = unit(rng)
        mid = api.add("a", "x", q)
        other = api.add("a", "y", unit(rng))
        api.search("a", q, k=1)
        assert api.get("a", mid).access_count == 1
        api.search("a", q, k=1, record_access=False)
        assert api.get("a", mid).access_count == 1
        api.touch("a", [mid, mid, other])
        api.touch("a", other)
        assert (api.get("a", mid).access_count, api.get("a", other).access_count) == (3, 2)

    def test_search_batch_answers_each_query_as_search_does(self, api: Any, rng: np.random.Generator) -> None:
        ids = [api.add("a", f"fact {i}", unit(rng)) for i in range(6)]
        queries = [unit(rng) for _ in range(4)]
        one_by_one = [[(h.id, h.score) for h in api.search("a", q, k=3, record_access=False)] for q in queries]
        batched = api.search_batch("a", queries, k=3, record_access=False)
        # the same hits in the same order; scores equal up to float32 rounding (a batch's vectors are
        # normalised when checked, a single query's length is divided out by the kernel)
        assert [[h.id for h in hits] for hits in batched] == [[i for i, _ in r] for r in one_by_one]
        assert [[h.score for h in hits] for hits in batched] == [
            pytest.approx([sc for _, sc in r], rel=1e-6) for r in one_by_one
        ]
        assert api.search_batch("a", [], k=3) == []
        before = snapshot(api, {"a": ids})
        bad = [queries[0], queries[1], np.zeros(DIM, np.float32), queries[2]]  # the third is not a vector
        with pytest.raises(InvalidVectorError):
            api.search_batch("a", bad, k=3, record_access=True)
        with pytest.raises(DimensionMismatchError):
            api.search_batch("a", [queries[0], np.ones(3)], k=3, record_access=True)
        assert snapshot(api, {"a": ids}) == before  # nothing searched, no access counted
        api.search_batch("a", [queries[0]], k=1)  # counted as search counts
        assert sum(api.get("a", mid).access_count for mid in ids) == 1

    def test_bad_search_arguments_change_nothing(self, api: Any, rng: np.random.Generator) -> None:
        mid = api.add("alice", "x", unit(rng))
        before = snapshot(api, {"alice": [mid]})
        cases: list[tuple[dict[str, Any], type[Exception]]] = [
            (dict(query=np.ones(3)), DimensionMismatchError),
            (dict(query=np.zeros(DIM)), InvalidVectorError),
            (dict(query=np.zeros(DIM, np.float32)), InvalidVectorError),
            (dict(query=np.full(DIM, np.nan, np.float32)), InvalidVectorError),
            (dict(k=0), InvalidInputError),
            (dict(k="5"), InvalidInputError),
            (dict(min_confidence=2), InvalidConfidenceError),
            (dict(ns=".."), InvalidNamespaceError),
            (dict(include_cold="sometimes"), InvalidInputError),
            (dict(include_warm="no"), InvalidInputError),  # a boolean, not a truthy value
            (dict(explain=1), InvalidInputError),
            (dict(memory_types=True), InvalidInputError),  # was a TypeError
            (dict(memory_types={"fact": 1}), InvalidInputError),  # a mapping is not a list of its keys
            (dict(context_tags={"a": 1}), InvalidInputError),
            (dict(context_tags=[f"t{i}" for i in range(25_000)]), InvalidInputError),
        ]
        for override, exc in cases:
            kwargs: dict[str, Any] = dict(ns="alice", query=unit(rng))
            kwargs.update(override)
            with pytest.raises(exc):
                api.search(kwargs.pop("ns"), kwargs.pop("query"), record_access=True, **kwargs)
        assert snapshot(api, {"alice": [mid]}) == before

    # -- updates -------------------------------------------------------------------------

    def test_feedback_pin_delete(self, api: Any, rng: np.random.Generator) -> None:
        mid = api.add("a", "x", unit(rng), memory_type="preference", confidence=0.6, source="ai_inference")
        before = api.get("a", mid)
        up = api.feedback("a", mid, positive=True)
        assert isinstance(up, Memory) and up == api.get("a", mid)
        assert up.confidence > before.confidence and up.weight > before.weight and up.due_at > before.due_at
        down = api.feedback("a", mid, positive=False, strength=0.5)
        assert down.confidence < up.confidence
        implicit = api.feedback("a", mid, positive=True, implicit=True)
        assert implicit.confidence > down.confidence
        assert api.pin("a", mid) is None
        assert api.get("a", mid).pinned and api.get("a", mid).due_at is None
        api.pin("a", mid, False)
        assert not api.get("a", mid).pinned and api.get("a", mid).due_at is not None
        assert api.delete("a", mid) is True
        assert api.get("a", mid) is None
        assert api.delete("a", mid) is False
        assert api.search("a", unit(rng), k=5) == []

    def test_unknown_ids_and_bad_updates_change_nothing(self, api: Any, rng: np.random.Generator) -> None:
        mid = api.add("alice", "x", unit(rng))
        before = snapshot(api, {"alice": [mid]})
        with pytest.raises(MemoryNotFoundError):
            api.touch("alice", [mid, "missing"])
        with pytest.raises(MemoryNotFoundError):
            api.feedback("alice", "missing", positive=True)
        with pytest.raises(MemoryNotFoundError):
            api.pin("alice", "missing")
        with pytest.raises(InvalidInputError):
            api.feedback("alice", mid, positive=True, strength=3.0)
        with pytest.raises(InvalidInputError):
            api.feedback("alice", mid, positive="yes")
        with pytest.raises(InvalidInputError):
            api.pin("alice", mid, "no")
        with pytest.raises(InvalidInputError):
            api.set_context("alice", "travel")
        with pytest.raises(InvalidNamespaceError):
            api.delete("a/b", mid)
        assert snapshot(api, {"alice": [mid]}) == before

    def test_supersedes(self, api: Any, rng: np.random.Generator) -> None:
        v = unit(rng)
        old = api.add("alice", "lives in Lisbon", v)
        new = api.add("alice", "moved to Osaka", v + 0.01 * unit(rng), supersedes=[old])
        assert api.get("alice", old).confidence < api.get("alice", new).confidence
        assert api.search("alice", v, k=1, record_access=False)[0].id == new

    def test_a_key_is_a_slot_and_the_superseded_memory_says_by_whom(self, api: Any, rng: np.random.Generator) -> None:
        va, vb = unit(rng), unit(rng)  # unrelated vectors: only the key links the two statements
        a = api.add("alice", "Alice lives in Lisbon", va, key="home_city")
        b = api.add("alice", "Alice moved to Osaka", vb, key="home_city")
        old, new = api.get("alice", a), api.get("alice", b)
        assert old.key == new.key == "home_city"
        assert old.superseded_by == b and new.superseded_by is None and old.ttl_seconds == 0
        got = api.get_by_key("alice", "home_city")
        assert isinstance(got, Memory) and got.id == b and got.superseded_by is None
        assert api.get_by_key("alice", "work") is None and api.get_by_key("bob", "home_city") is None
        hits = api.search("alice", va, k=2, record_access=False, explain=True)
        expl = {h.id: h.explain for h in hits}
        assert expl[a].superseded_by == b and expl[a].supersession == "key home_city"
        assert expl[b].superseded_by is None and expl[b].supersession is None
        # the listings carry the marks as get does (an export keeps them)
        page, _ = api.memories_page("alice", limit=2)
        for listed in (api.memories("alice"), page):
            assert [(m.id, m.key, m.superseded_by) for m in listed] == [(a, "home_city", b), (b, "home_city", None)]
        c = api.add("alice", "Alice likes tea", unit(rng))
        d = api.add("alice", "Alice likes coffee now", unit(rng), supersedes=[c])
        assert {m.id: m.superseded_by for m in api.memories("alice")} == {a: b, b: None, c: d, d: None}
        second, _ = api.memories_page("alice", after=api.memories_page("alice", limit=2)[1], limit=1)
        assert [(m.id, m.key, m.superseded_by) for m in second] == [(c, None, d)]
        with pytest.raises(InvalidKeyError):
            api.get_by_key("alice", "home city")
        with pytest.raises(InvalidInputError):  # supersedes and key disagree: nothing added
            api.add("alice", "Alice moved to Kyoto", unit(rng), key="home_city", supersedes=[a])
        assert api.get_by_key("alice", "home_city").id == b and api.stats(lifecycle=False).total == 4

    def test_re_adding_the_same_content_returns_the_existing_id(self, api: Any, rng: np.random.Generator) -> None:
        first = api.add("alice", "Alice prefers window seats", unit(rng), memory_type="preference", id="seats")
        before = api.get("alice", first)
        assert api.add("alice", "alice prefers  window seats.", unit(rng), memory_type="preference") == first
        retried = api.add("alice", "Alice prefers window seats", unit(rng), memory_type="preference", id="seats")
        assert retried == first
        assert api.stats(lifecycle=False).total == 1 and api.get("alice", first).weight > before.weight
        with pytest.raises(DuplicateIdError):  # the same id for other content is still an error
            api.add("alice", "Alice prefers aisle seats", unit(rng), memory_type="preference", id="seats")
        ids = api.add_batch(
            "alice", [{"content": "note", "embedding": unit(rng)}, {"content": "Note.", "embedding": unit(rng)}]
        )
        assert ids[0] == ids[1] != first and api.stats(lifecycle=False).total == 2

    # -- lifecycle -----------------------------------------------------------------------

    def test_sweep_archive_search_cold_and_restore(
        self, api: Any, rng: np.random.Generator, clock: ManualClock
    ) -> None:
        q = unit(rng)
        chat = api.add("alice", "asked about the weather in Porto", q, memory_type="conversation")
        keep = api.add("alice", "allergic to peanuts", unit(rng), pinned=True)
        dry = api.sweep(dry_run=True)
        assert isinstance(dry, SweepReport) and dry.dry_run and dry.archived == 0
        clock.advance(2 * 3600)  # the conversation's hour is over
        report = api.sweep()
        assert isinstance(report, SweepReport) and not report.dry_run
        assert report.archived == 1 and report.errors == [] and report.by_type["conversation"].get("archived") == 1
        assert api.get("alice", chat).tier == "cold" and api.get("alice", keep).tier == "hot"
        hits = api.search("alice", q, k=1, include_cold=True, record_access=False, explain=True)
        assert hits[0].id == chat and hits[0].memory.tier == "cold"
        assert hits[0].explain.reached_because == "include_cold=True"
        assert api.restore("alice", text="weather") == [chat]
        assert api.get("alice", chat).tier == "hot"
        clock.advance(2 * 3600)
        api.sweep()
        assert api.restore("alice", query=q, k=1) == [chat]
        clock.advance(2 * 3600)
        api.sweep()
        assert api.restore("alice", query="weather porto", k=1) == [chat]  # by meaning, from text
        clock.advance(2 * 3600)
        api.sweep()
        assert api.restore("alice", ids=[chat]) == [chat]
        assert api.restore("alice", ids=[chat]) == []  # not cold any more: skipped
        with pytest.raises(MemoryNotFoundError):
            api.restore("alice", ids=["missing"])
        with pytest.raises(InvalidInputError):
            api.restore("alice")
        assert api.restore("alice", where={"memory_type": "conversation"}) == []

    def test_stats_and_metrics(self, api: Any, rng: np.random.Generator) -> None:
        api.add_batch(
            "s",
            [
                {"content": f"m{i}", "embedding": unit(rng), "memory_type": t}
                for i, t in enumerate(["fact", "fact", "task"])
            ],
        )
        api.add("t", "pinned", unit(rng), pinned=True)
        stats = api.stats()
        assert isinstance(stats, Stats)
        assert (stats.total, stats.namespaces, stats.pinned) == (4, 2, 1)
        assert stats.by_tier == {"hot": 4, "warm": 0, "cold": 0}
        assert stats.by_type["fact"]["hot"] == 3 and stats.by_type["task"]["hot"] == 1
        assert "survival" in stats.lifecycle
        assert api.stats(lifecycle=False).lifecycle == {}
        text = api.metrics_text()
        assert 'tierstore_memories{tier="hot",type="fact"} 3' in text

    def test_closed_store_refuses_calls(self, api: Any, rng: np.random.Generator) -> None:
        api.close()
        api.close()  # idempotent
        with pytest.raises(StoreClosedError):
            api.add("a", "x", unit(rng))
        with pytest.raises(StoreClosedError):
            api.search("a", unit(rng))

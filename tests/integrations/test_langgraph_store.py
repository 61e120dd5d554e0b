"""TierStoreStore against LangGraph's own stores: a differential test with
InMemoryStore (hypothesis), TTL behaviour beside SqliteStore, a graph whose
node uses the store, and the namespace mapping."""

from __future__ import annotations

import time
from typing import Any, TypedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from tierstore import ManualClock, Policy, TierStore
from tierstore.errors import InvalidInputError, InvalidNamespaceError, StoreConfigError
from tierstore.integrations.langchain import adapter_policy
from tierstore.integrations.langgraph import TierStoreStore
from tierstore.integrations.langgraph import namespaces as nsmap

DIM = 8
EMB = DeterministicFakeEmbedding(size=DIM)
# Several fields and JSON paths: each text is embedded on its own and an item
# scores by its best text (LangGraph's rule); "notes[*]" gives one text per
# list entry, "extra.title" a nested one, either may be missing.
INDEX = {"dims": DIM, "embed": EMB, "fields": ["text", "notes[*]", "extra.title"]}
# Every namespace of the test holds an anchor item the ops never touch:
# InMemoryStore keeps a namespace listed once it was read or emptied
# (LangGraph's SQLite store does not, nor do we: test_emptied_namespace...).
NAMESPACES = sorted([("a",), ("a", "b_1"), ("a", "b_1", "c"), ("ü", "x y"), ("z", "a")])
KEYS = ["k0", "k1", "k2", "k3"]
WORDS = ["alice lives in lisbon", "bob plays chess", "lisbon", "chess club", "weather in porto", "porto"]

values = st.fixed_dictionaries(
    {
        "text": st.sampled_from(WORDS),
        "n": st.integers(0, 4),
        "s": st.sampled_from(["x", "y"]),
        "tags": st.lists(st.sampled_from(["p", "q"]), max_size=2),
        "my-key2": st.integers(0, 2),
        "2nd": st.sampled_from(["u", "v"]),
        "notes": st.lists(st.sampled_from(WORDS), max_size=2),
    },
    optional={"extra": st.fixed_dictionaries({"title": st.sampled_from(WORDS)})},
)


def _named(ns: tuple[str, ...], k: str, v: dict[str, Any]) -> dict[str, Any]:
    """``v`` with every indexed text naming its item: InMemoryStore's scores of
    equal vectors can differ in the last bit (one BLAS call for all), which
    would make the order of ties arbitrary, so no two items share a text."""
    where = f"{k} {'/'.join(ns)}"
    out = {**v, "text": f"{v['text']} {where}", "notes": [f"{n} note{i} {where}" for i, n in enumerate(v["notes"])]}
    if "extra" in v:
        out["extra"] = {"title": f"{v['extra']['title']} title {where}"}
    return out


puts = st.builds(
    lambda ns, k, v, idx: PutOp(ns, k, _named(ns, k, v), index=idx),
    st.sampled_from(NAMESPACES),
    st.sampled_from(KEYS),
    values,
    st.sampled_from([None, False, ["text"], ["notes[*]", "extra.title"]]),
)
deletes = st.builds(lambda ns, k: PutOp(ns, k, None), st.sampled_from(NAMESPACES), st.sampled_from(KEYS))
gets = st.builds(GetOp, st.sampled_from(NAMESPACES), st.sampled_from(KEYS + ["anchor", "missing"]))
filters = st.one_of(
    st.none(),
    st.fixed_dictionaries({"n": st.integers(0, 4)}),
    st.fixed_dictionaries({"s": st.sampled_from("xy")}),
    st.builds(
        lambda op, x: {"n": {op: x}}, st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), st.integers(0, 4)
    ),
    st.builds(lambda t: {"tags": t}, st.lists(st.sampled_from(["p", "q"]), max_size=2)),
    st.builds(lambda a, b: {"n": {"$gte": a}, "s": {"$ne": b}}, st.integers(0, 4), st.sampled_from("xy")),
    # keys with hyphens and digits, as LangGraph's stores match them
    st.builds(lambda a, b: {"my-key2": a, "2nd": b}, st.integers(0, 2), st.sampled_from("uv")),
    st.builds(lambda a: {"my-key2": {"$lt": a}}, st.integers(0, 2)),
)
prefixes = st.sampled_from([(), ("a",), ("a", "b_1"), ("ü",), ("z", "a"), ("nope",)])
searches = st.builds(
    SearchOp,
    prefixes,
    filters,
    st.integers(1, 5),
    st.integers(0, 3),
    st.one_of(st.none(), st.sampled_from(WORDS + ["lisbon chess"])),
)
paths = st.lists(st.sampled_from(["a", "b_1", "*", "c", "ü", "x y", "z"]), min_size=1, max_size=2).map(tuple)
conditions = st.lists(st.builds(MatchCondition, st.sampled_from(["prefix", "suffix"]), paths), max_size=2)
listings = st.builds(
    lambda c, d, lim, off: ListNamespacesOp(tuple(c) or None, d, lim, off),
    conditions,
    st.one_of(st.none(), st.integers(1, 3)),
    st.integers(1, 6),
    st.integers(0, 2),
)
batches = st.lists(st.one_of(puts, puts, deletes, gets, searches, searches, listings), min_size=1, max_size=3)


def _as_lists(op: Any) -> Any:
    """``op`` with its namespace (prefix, match paths) as a list, as a caller may
    give it: LangGraph's stores take lists too (InMemoryStore only as a
    search prefix, where a list matches nothing; ours takes them everywhere)."""
    if isinstance(op, (GetOp, PutOp)):
        return op._replace(namespace=list(op.namespace))
    if isinstance(op, SearchOp):
        return op._replace(namespace_prefix=list(op.namespace_prefix))
    if isinstance(op, ListNamespacesOp) and op.match_conditions:
        return op._replace(match_conditions=tuple(c._replace(path=list(c.path)) for c in op.match_conditions))
    return op


def _plain(result: Any) -> Any:
    """A result without timestamps (the two stores' clocks differ) and
    without scores (compared apart, within a tolerance: :func:`_scores`)."""
    if isinstance(result, list):
        return [_plain(r) for r in result]
    if result is None or isinstance(result, tuple):
        return result
    return (tuple(result.namespace), result.key, result.value)


def _scores(result: Any) -> list[float]:
    """Every search hit's score, in order (-1.0 for none). Ours are float32
    cosines, the reference's float64: rounding both to a fixed number of
    digits can fall on either side of a boundary, so they are compared with
    a tolerance instead."""
    if isinstance(result, list):
        return [x for r in result for x in _scores(r)]
    score = getattr(result, "score", None)
    return (
        []
        if result is None or isinstance(result, tuple) or not hasattr(result, "score")
        else [-1.0 if score is None else float(score)]
    )


def _assert_same(got: Any, want: Any, why: Any = None) -> None:
    assert _plain(got) == _plain(want), why
    assert _scores(got) == pytest.approx(_scores(want), abs=1e-5), why


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    store = TierStore.open(tmp_path_factory.mktemp("lg") / "s", dim=DIM, policy=adapter_policy())
    yield store
    store.close()


_examples = iter(range(10**9))


class ReplacingInMemoryStore(InMemoryStore):
    """InMemoryStore, except that a put replaces the item's texts' vectors
    instead of adding to them. InMemoryStore (langgraph-checkpoint 4.3) keeps
    the vector of a field an earlier put indexed and a later one lacks (or
    does not index), so the item still scores by a text it no longer has; we
    deliberately do not (docs/integrations.md). The reference is otherwise
    LangGraph's own."""

    def _extract_texts(self, put_ops):  # type: ignore[no-untyped-def]
        for (ns, key), op in put_ops.items():
            # a put with index=False re-indexes nothing: it keeps the vectors an earlier put made, in
            # InMemoryStore and in our adapter alike (a hypothesis example of 2026-12-05 found that this
            # reference dropped them)
            if op.value is not None and op.index is not False:
                self._vectors[ns].pop(key, None)
        return super()._extract_texts(put_ops)


def test_a_put_replaces_the_vectors_of_texts_the_item_no_longer_has(tmp_path):
    """The divergence from InMemoryStore, pinned: after a put without the
    field that matched, the item no longer scores by it."""
    with TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store:
        ours, theirs = TierStoreStore(store, index=INDEX), InMemoryStore(index=INDEX)
        for s in (ours, theirs):
            s.put(("a",), "k", {"text": "alice lives in lisbon", "extra": {"title": "chess club"}})
            s.put(("a",), "k", {"text": "alice lives in lisbon"})
        score = ours.search(("a",), query="chess club")[0].score
        assert theirs.search(("a",), query="chess club")[0].score == pytest.approx(1.0)  # the stale title's vector
        assert score == pytest.approx(_cos(EMB, "chess club", "alice lives in lisbon"), abs=1e-5)


def _cos(emb: Any, a: str, b: str) -> float:
    import numpy as np

    x, y = np.array(emb.embed_query(a)), np.array(emb.embed_documents([b])[0])
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(batches, st.booleans()), min_size=1, max_size=8))
def test_differential_against_in_memory_store(shared_store, program):
    # one TierStore for every example, a fresh prefix (so fresh namespaces) each;
    # the default ranking (cosine similarity, as LangGraph's stores score)
    ours = TierStoreStore(shared_store, index=INDEX, prefix=f"e{next(_examples)}")
    ref = ReplacingInMemoryStore(index=INDEX)
    for s in (ours, ref):
        for ns in NAMESPACES:
            s.put(
                ns,
                "anchor",
                {
                    "text": f"anchor {'/'.join(ns)}",
                    "n": 0,
                    "s": "x",
                    "tags": [],
                    "my-key2": 0,
                    "2nd": "u",
                    "notes": [f"anchor note {'/'.join(ns)}"],
                },
            )
    for ops, as_lists in program:
        _assert_same(ours.batch([_as_lists(op) for op in ops] if as_lists else ops), ref.batch(ops), ops)
    final = [SearchOp(p, None, 100, 0, None) for p in [(), ("a",)]] + [ListNamespacesOp(None, None, 100, 0)]
    _assert_same(ours.batch(final), ref.batch(final))


def test_fused_ranking_returns_the_same_items(tmp_path):
    with TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store:
        ours = TierStoreStore(store, index=INDEX, ranking="fused")
        ref = InMemoryStore(index=INDEX)
        for s in (ours, ref):
            for i, w in enumerate(WORDS):
                s.put(("docs",), f"d{i}", {"text": w})
        for q in WORDS:
            got = ours.search(("docs",), query=q, limit=len(WORDS))
            want = [i.key for i in ref.search(("docs",), query=q, limit=len(WORDS)) if i.score > 0]
            # fresh and unused, the fused score orders by similarity; a negative
            # cosine counts as 0 in it, so those rank by recency after the rest
            assert [i.key for i in got][: len(want)] == want and len(got) == len(WORDS)
            assert all(0.0 <= i.score <= 1.0 for i in got)


def test_emptied_namespace_is_not_listed_as_in_sqlite_store(tmp_path):
    with (
        TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store,
        SqliteStore.from_conn_string(":memory:") as ref,
    ):
        ref.setup()
        ours = TierStoreStore(store)
        for s in (ours, ref):
            s.put(("u", "a"), "k", {"v": 1})
            s.put(("u", "b"), "k", {"v": 2})
            s.delete(("u", "a"), "k")
            s.get(("never", "written"), "k")
        assert ours.list_namespaces() == ref.list_namespaces() == [("u", "b")]


def test_filters_and_list_namespaces_as_in_sqlite_store(tmp_path):
    """Filter keys with hyphens and digits, and dotted paths into nested
    values, match what LangGraph's SQLite store matches; namespaces given as
    lists are the tuples' namespaces."""
    items = {
        "hyphen": {"access-level": "public", "user": {"access-level": "nested"}, "n": 1},
        "digit": {"123abc": "ok", "user": {"123abc": "ok2"}, "n": 2},
        "deep": {"a": {"b-1": {"c2": 3}}, "n": 3},
    }
    flts = [
        {"access-level": "public"},
        {"user.access-level": "nested"},
        {"123abc": "ok"},
        {"user.123abc": "ok2"},
        {"a.b-1.c2": 3},
        {"a.b-1.c2": {"$gte": 3}},
        {"user.access-level": "public"},
        {"n": {"$gt": 1}},
        {"missing.path": 1},
    ]
    with (
        TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store,
        SqliteStore.from_conn_string(":memory:") as ref,
    ):
        ref.setup()
        ours = TierStoreStore(store)
        for s in (ours, ref):
            for key, value in items.items():
                s.put(("docs", "x"), key, value)
            s.put(("other",), "k", {"n": 9})
        for f in flts:
            want = sorted(i.key for i in ref.search(("docs",), filter=f))
            assert sorted(i.key for i in ours.search(("docs",), filter=f)) == want, f
            assert sorted(i.key for i in ours.search(["docs"], filter=f)) == want, f  # a list prefix
        assert {i.key for i in ours.search(["docs", "x"])} == {i.key for i in ref.search(["docs", "x"])} == set(items)
        assert ours.list_namespaces(prefix=["docs"]) == ref.list_namespaces(prefix=["docs"]) == [("docs", "x")]
        assert ours.list_namespaces(suffix=["x"]) == ref.list_namespaces(suffix=["x"])
        # lists for put, get and delete too (LangGraph's stores need tuples there: ours takes both)
        ours.put(["docs", "x"], "listed", {"n": 4})
        assert ours.get(("docs", "x"), "listed").value == {"n": 4}
        assert ours.get(["docs", "x"], "listed").namespace == ("docs", "x")
        ours.delete(["docs", "x"], "listed")
        assert ours.get(("docs", "x"), "listed") is None
        with pytest.raises(InvalidNamespaceError):
            ours.get("docs", "k")  # a string is not a namespace


def test_a_ttl_given_to_put_overrides_the_default_as_in_sqlite_store(tmp_path):
    """``put(..., ttl=m)`` sets the item's TTL whatever the store's default;
    ``ttl=None`` means none; leaving it out takes the default."""
    config = {"default_ttl": 5.0, "refresh_on_read": False}
    clock = ManualClock(1_700_000_000.0)
    with (
        TierStore.open(tmp_path / "s", dim=DIM, clock=clock, policy=adapter_policy()) as store,
        SqliteStore.from_conn_string(":memory:", ttl=config) as ref,
    ):
        ref.setup()
        ours = TierStoreStore(store, ttl=config)
        for s in (ours, ref):
            s.put(("t",), "shorter", {"v": 1}, ttl=1 / 60)
            s.put(("t",), "longer", {"v": 2}, ttl=90)
            s.put(("t",), "default", {"v": 3})
            s.put(("t",), "never", {"v": 4}, ttl=None)
        want = dict(ref.conn.execute("SELECT key, ttl_minutes FROM store"))
        assert want == {"shorter": 1 / 60, "longer": 90, "default": 5.0, "never": None}
        ns = nsmap.encode("lg", ("t",))
        got = {}
        for key in want:
            m = store.get(ns, key)
            got[key] = None if m.pinned else (m.expires_at - clock.now()) / 60
        assert got == pytest.approx(want)
        clock.advance(2)  # the 1-second item expires, the others do not
        assert ours.sweep_ttl() == 1
        assert sorted(i.key for i in ours.search(("t",))) == ["default", "longer", "never"]
        clock.advance(6 * 60)
        assert ours.sweep_ttl() == 1 and sorted(i.key for i in ours.search(("t",))) == ["longer", "never"]


class _Axes(Embeddings):
    """Each known word is one axis: cosines are exact and easy to predict."""

    AXES = {"tokyo": 0, "chess": 1, "tea": 2, "violin": 3}

    def _one(self, text: str) -> list[float]:
        v = [0.0] * DIM
        for word in text.split():
            v[self.AXES[word]] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def test_an_item_scores_by_its_best_field_as_in_in_memory_store(tmp_path):
    index = {"dims": DIM, "embed": _Axes(), "fields": ["title", "body", "tags[*]"]}
    with TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store:
        ours, ref = TierStoreStore(store, index=index), InMemoryStore(index=index)
        for s in (ours, ref):
            s.put(("u",), "a", {"title": "tokyo", "body": "chess", "tags": ["tea", "violin"]})
            s.put(("u",), "b", {"title": "chess chess tea"})
            s.put(("u",), "c", {"body": "violin"}, index=["body"])
        for query in ["tokyo", "chess", "tea", "violin", "tokyo chess"]:
            want = [(i.key, i.score) for i in ref.search(("u",), query=query)]
            got = [(i.key, i.score) for i in ours.search(("u",), query=query)]
            assert [k for k, _ in got] == [k for k, _ in want], query
            assert [x for _, x in got] == pytest.approx([x for _, x in want], abs=1e-6), query
        # "a" matches "tokyo" exactly in one field: cosine 1, not its fields' mean's 0.5
        assert ours.search(("u",), query="tokyo")[0].score == pytest.approx(1.0)
        # put(index=False) keeps the vectors an earlier put made, as InMemoryStore
        for s in (ours, ref):
            s.put(("u",), "a", {"title": "nothing indexed"}, index=False)
        assert [(i.key, round(i.score, 6)) for i in ours.search(("u",), query="violin")] == [
            (i.key, round(i.score, 6)) for i in ref.search(("u",), query="violin")
        ]


def test_too_many_texts_to_keep_their_vectors_are_refused(tmp_path):
    """An item's texts' vectors live in its metadata (64 KiB): too many is a
    clear error and changes nothing."""
    with TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store:
        ours = TierStoreStore(store, index={"dims": DIM, "embed": EMB, "fields": ["notes[*]"]})
        ours.put(("u",), "k", {"notes": ["kept", "too"]})
        with pytest.raises(InvalidInputError, match="indexed texts' vectors"):
            ours.put(("u",), "k", {"notes": [f"note {i}" for i in range(2000)]})
        assert ours.get(("u",), "k").value == {"notes": ["kept", "too"]}


def _ttl_scenario(store: BaseStore) -> list[Any]:
    """Real time (SqliteStore reads its clock in SQL): TTLs of 6 s, checks
    1.6 s or more from every expiry (SQLite keeps whole seconds, and a loaded
    machine may stall a call for most of a second)."""
    seen = []
    store.put(("t",), "a", {"v": "a"}, ttl=0.1)
    store.put(("t",), "b", {"v": "b"}, ttl=0.1)
    store.put(("t",), "c", {"v": "c"})  # no TTL: never expires
    seen.append(sorted(i.key for i in store.search(("t",), refresh_ttl=False)))
    time.sleep(3.6)
    seen.append(store.get(("t",), "b", refresh_ttl=True).value)  # b now expires 6 s from here
    seen.append(store.get(("t",), "a", refresh_ttl=False).value)  # a does not
    time.sleep(4.4)  # a expired 2 s ago, b has 1.6 s left
    seen.append(store.sweep_ttl())
    seen.append(sorted(i.key for i in store.search(("t",), refresh_ttl=False)))
    seen.append(store.get(("t",), "a") is None)
    time.sleep(3.6)
    seen.append(store.sweep_ttl())
    seen.append(sorted(i.key for i in store.search(("t",), refresh_ttl=False)))
    return seen


@pytest.mark.slow
def test_ttl_semantics_match_sqlite_store(tmp_path):
    ttl = {"refresh_on_read": True}
    with (
        TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store,
        SqliteStore.from_conn_string(str(tmp_path / "ref.sqlite"), ttl=ttl) as ref,
    ):
        ref.setup()
        ours = TierStoreStore(store, ttl=ttl)
        want = _ttl_scenario(ref)
        got = _ttl_scenario(ours)
        assert want == [["a", "b", "c"], {"v": "b"}, {"v": "a"}, 1, ["b", "c"], True, 1, ["c"]]
        assert got == want
        # beyond LangGraph: the expired items were archived, and come back
        assert {m.id: m.tier for m in store.memories(nsmap.encode("lg", ("t",)))} == {
            "a": "cold",
            "b": "cold",
            "c": "hot",
        }
        assert store.restore(nsmap.encode("lg", ("t",)), ids=["a"]) == ["a"]
        assert ours.get(("t",), "a").value == {"v": "a"}


def test_default_ttl_omit_expired_and_the_sweeper(tmp_path):
    clock = ManualClock(1_700_000_000.0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, policy=adapter_policy()) as store:
        ours = TierStoreStore(store, ttl={"default_ttl": 10, "omit_expired": True, "refresh_on_read": False})
        ours.put(("t",), "x", {"v": 1})  # default TTL: 10 minutes
        ours.put(("t",), "y", {"v": 2}, ttl=None)  # explicitly none
        clock.advance(9 * 60)
        assert ours.get(("t",), "x").value == {"v": 1}  # not refreshed (refresh_on_read False)
        clock.advance(2 * 60)
        assert ours.get(("t",), "x") is None  # expired, not yet swept: omitted
        assert [i.key for i in ours.search(("t",))] == ["y"]
        assert store.get(nsmap.encode("lg", ("t",)), "x").tier == "hot"
        ours.start_ttl_sweeper(sweep_interval_minutes=0.001)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if store.get(nsmap.encode("lg", ("t",)), "x").tier == "cold":
                break
            time.sleep(0.05)
        assert ours.stop_ttl_sweeper()
        assert store.get(nsmap.encode("lg", ("t",)), "x").tier == "cold"


class State(TypedDict):
    user: str
    message: str
    recalled: list[str]


def test_a_graph_node_uses_the_store(tmp_path):
    def remember_and_recall(state: State, *, store: BaseStore) -> dict[str, Any]:
        ns = ("memories", state["user"])
        store.put(ns, f"m{len(store.search(ns, limit=100))}", {"text": state["message"]})
        return {"recalled": [i.value["text"] for i in store.search(ns, query=state["message"], limit=2)]}

    builder = StateGraph(State)
    builder.add_node("remember_and_recall", remember_and_recall)
    builder.add_edge(START, "remember_and_recall")
    builder.add_edge("remember_and_recall", END)
    with TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store:
        graph = builder.compile(store=TierStoreStore(store, index=INDEX))
        graph.invoke({"user": "alice", "message": "alice lives in lisbon", "recalled": []})
        graph.invoke({"user": "bob", "message": "bob plays chess", "recalled": []})
        out = graph.invoke({"user": "alice", "message": "lisbon", "recalled": []})
        assert out["recalled"][0] == "lisbon" and set(out["recalled"]) == {"lisbon", "alice lives in lisbon"}
        assert sorted(store.namespaces()) == ["lg.memories.alice", "lg.memories.bob"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(min_size=1, max_size=6).filter(lambda s: "." not in s and "\x00" not in s), min_size=1, max_size=4
    ).map(tuple),
    st.lists(
        st.text(min_size=1, max_size=6).filter(lambda s: "." not in s and "\x00" not in s), min_size=1, max_size=4
    ).map(tuple),
)
def test_namespace_mapping_is_reversible_and_injective(a, b):
    try:
        ea = nsmap.encode("lg", a)
    except InvalidNamespaceError:
        assert len("lg" + "".join("." + nsmap.encode_label(x) for x in a)) > 128
        return
    assert nsmap.decode("lg", ea) == a
    if a != b:
        try:
            assert nsmap.encode("lg", b) != ea
        except InvalidNamespaceError:
            pass


def test_bad_input_is_refused_and_changes_nothing(tmp_path):
    with TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store:
        ours = TierStoreStore(store, index=INDEX)
        ours.put(("u",), "k", {"text": "kept"})
        for bad in [
            lambda: ours.batch([PutOp(("u", "a.b"), "k", {"x": 1})]),
            lambda: ours.batch([PutOp(("u",), "k", {"x": float("nan")})]),
            lambda: ours.batch([PutOp(("u",), "k", {"x": object()})]),
            lambda: ours.batch([PutOp(("u",), "k", {"text": "x"}, ttl=-1)]),
            lambda: ours.search(("u",), filter={"x": {"$regex": "a"}}),
            lambda: ours.batch([PutOp(tuple(["long" * 10] * 4), "k", {"x": 1})]),
        ]:
            with pytest.raises((InvalidInputError, InvalidNamespaceError)):
                bad()
        assert ours.get(("u",), "k").value == {"text": "kept"} and store.stats().total == 1
        with pytest.raises(StoreConfigError, match="dims"):
            TierStoreStore(store, index={"dims": DIM + 1, "embed": EMB})
    with TierStore.open(tmp_path / "d", dim=DIM) as deduping:
        with pytest.raises(StoreConfigError, match="dedupe"):
            TierStoreStore(deduping)
    auto = Policy.from_dict({"dedupe": "off", "types": {"fact": {"supersede_above": 0.7}}})  # off by default now
    with TierStore.open(tmp_path / "a", dim=DIM, policy=auto) as superseding:
        with pytest.raises(StoreConfigError, match="supersedes similar memories automatically"):
            TierStoreStore(superseding)


def test_a_put_over_an_existing_item_never_hides_it_from_a_concurrent_get(tmp_path):
    """A put over an existing key is one transaction (TierStore.upsert_batch):
    a get in another thread finds the item, old value or new, at every read."""
    from tierstore.testing.concurrency import gaps_while

    with TierStore.open(tmp_path / "s", dim=DIM, policy=adapter_policy()) as store:
        ours = TierStoreStore(store, index=INDEX)
        ours.put(("users", "a"), "k", {"text": "version 0", "v": 0})

        def found() -> bool:
            item = ours.get(("users", "a"), "k")
            return item is not None and "v" in item.value

        def put_99_times() -> None:
            for i in range(1, 100):
                ours.put(("users", "a"), "k", {"text": f"version {i}", "v": i})

        reads, gaps = gaps_while(found, put_99_times)
        assert reads > 0 and gaps == []
        item = ours.get(("users", "a"), "k")
        assert item.value == {"text": "version 99", "v": 99}

"""What LangChain's standard suites do not pin down: the metadata keys that
set store fields, no store field leaking into Document.metadata, bad input
changing nothing, the retriever counting use and honouring its options."""

from __future__ import annotations

import math
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings

from tierstore import ManualClock, Policy, TierStore
from tierstore.errors import InvalidInputError, StoreConfigError, UnknownMemoryTypeError
from tierstore.integrations.langchain import FieldMap, TierStoreRetriever, TierStoreVectorStore, adapter_policy

EMB = DeterministicFakeEmbedding(size=8)


@pytest.fixture
def store(tmp_path):
    s = TierStore.open(tmp_path / "s", dim=8, clock=ManualClock(1_700_000_000.0), policy=adapter_policy())
    yield s
    s.close()


def test_mapped_metadata_keys_set_store_fields_and_metadata_stays_exact(store):
    vs = TierStoreVectorStore(
        store,
        EMB,
        namespace="n",
        fields=FieldMap(memory_type="kind", confidence="conf", tags="labels", ttl_seconds="ttl", pinned="pin"),
    )
    meta = {"kind": "preference", "conf": 0.9, "labels": ["travel"], "ttl": 120.0, "pin": False, "other": {"a": 1}}
    (mid,) = vs.add_documents([Document(page_content="likes window seats", metadata=meta)])
    m = store.get("n", mid)
    assert (m.memory_type, m.tags, m.ttl_seconds, m.pinned) == ("preference", ("travel",), 120.0, False)
    assert m.confidence > 0.5
    (doc,) = vs.similarity_search("likes window seats", k=1)
    assert doc.metadata == meta and doc.id == mid  # exactly the caller's keys, nothing of the store's
    (pinned,) = vs.add_texts(["allergic to peanuts"], [{"pin": True}])
    assert store.get("n", pinned).pinned and vs.get_by_ids([pinned])[0].metadata == {"pin": True}


def test_bad_input_changes_nothing_even_when_replacing(store):
    vs = TierStoreVectorStore(store, EMB, namespace="n", fields=FieldMap(memory_type="kind"))
    vs.add_texts(["kept"], ids=["a"])
    with pytest.raises(UnknownMemoryTypeError):
        vs.add_texts(["new a", "b"], [{}, {"kind": "no-such-type"}], ids=["a", "b"])
    with pytest.raises(InvalidInputError):
        vs.add_texts(["new a"], [{"x": float("nan")}], ids=["a"])
    assert [d.page_content for d in vs.get_by_ids(["a", "b"])] == ["kept"] and store.stats().total == 1
    with pytest.raises(InvalidInputError, match="unknown search arguments"):
        vs.similarity_search("kept", k=1, where={"x": 1})  # filter= is known: see below
    with pytest.raises(InvalidInputError):
        vs.delete()
    with pytest.raises(InvalidInputError):
        vs.add_texts(["x", "y"], ids=["only one"])


def test_a_later_document_with_the_same_id_wins_within_one_call(store):
    vs = TierStoreVectorStore(store, EMB, namespace="n")
    assert vs.add_texts(["first", "second"], ids=["same", "same"]) == ["same", "same"]
    assert [d.page_content for d in vs.get_by_ids(["same"])] == ["second"] and store.stats().total == 1


def test_a_deduplicating_store_or_an_unknown_type_is_refused(tmp_path, store):
    with TierStore.open(tmp_path / "d", dim=8) as deduping:
        with pytest.raises(StoreConfigError, match="dedupe"):
            TierStoreVectorStore(deduping, EMB)
    auto = Policy.from_dict({"dedupe": "off", "types": {"fact": {"supersede_above": 0.7}}})  # off by default now
    with TierStore.open(tmp_path / "a", dim=8, policy=auto) as superseding:
        with pytest.raises(StoreConfigError, match="supersedes similar memories automatically"):
            TierStoreVectorStore(superseding, EMB)
    with pytest.raises(UnknownMemoryTypeError):
        TierStoreVectorStore(store, EMB, memory_type="nope")


def test_retriever_counts_use_filters_types_and_vector_store_does_not(store):
    vs = TierStoreVectorStore(store, EMB, namespace="n")
    vs.add_texts(["alice lives in lisbon"], ids=["home"])
    vs.add_texts(["said hello"], [{}], ids=["chat"])
    store.add("n", "a chat turn", EMB.embed_query("a chat turn"), memory_type="conversation", id="turn")
    vs.similarity_search("alice lives in lisbon", k=2)
    assert store.get("n", "home").access_count == 0
    r = TierStoreRetriever(vectorstore=vs, k=3, memory_types=["fact"])
    assert {d.id for d in r.invoke("alice lives in lisbon")} == {"home", "chat"}  # not the conversation
    assert store.get("n", "home").access_count == 1
    assert [d.id for d in r.invoke("a chat turn", k=1, memory_types=["conversation"])] == ["turn"]


def test_replacing_a_document_never_hides_it_from_a_concurrent_reader(store):
    """add_documents over an existing id is one transaction (TierStore.upsert_batch):
    a reader in another thread finds the document, old or new, at every read."""
    from tierstore.testing.concurrency import gaps_while

    vs = TierStoreVectorStore(store, EMB, namespace="n")
    vs.add_texts(["version 0"], [{"v": 0}], ids=["doc"])

    def found() -> bool:
        docs = vs.get_by_ids(["doc"])
        return len(docs) == 1 and docs[0].metadata.get("v") is not None

    def replace_99_times() -> None:
        for i in range(1, 100):
            vs.add_documents([Document(page_content=f"version {i}", metadata={"v": i}, id="doc")])

    reads, gaps = gaps_while(found, replace_99_times)
    assert reads > 0 and gaps == []
    assert vs.get_by_ids(["doc"])[0].metadata == {"v": 99} and store.stats().total == 1


def test_documents_built_without_validation_equal_validated_ones(store):
    """The vector store builds its Documents without pydantic's validation
    (measured: it was a third of the adapter's cost) only where the result is
    the same in every attribute; here it is."""
    from tierstore.integrations.langchain import vectorstore

    assert vectorstore._document is vectorstore._document_fast  # this environment's pydantic and LangChain
    vs = TierStoreVectorStore(store, EMB, namespace="n")
    vs.add_texts(["alpha", "beta"], [{"k": [1, {"x": None}]}, {}], ids=["a", "b"])
    for doc in vs.similarity_search("alpha", k=2) + vs.get_by_ids(["a", "b"]):
        again = Document(id=doc.id, page_content=doc.page_content, metadata=doc.metadata)
        assert doc == again and doc.model_dump() == again.model_dump()
        assert doc.model_fields_set == again.model_fields_set and doc.to_json() == again.to_json()
        doc.metadata["changed"] = True  # a fresh dict per document: the store is not changed
    assert vs.get_by_ids(["a"])[0].metadata == {"k": [1, {"x": None}]}


def test_the_vector_store_works_over_a_remote_store(tmp_path):
    """TierStoreVectorStore over RemoteStore: the same documents, replaced
    in place by id (the server's upsert_batch), found, deleted; a served
    store whose policy merges duplicates is refused as a local one is."""
    pytest.importorskip("uvicorn")
    from tierstore.remote.client import RemoteStore
    from tierstore.remote.server.app import build_app
    from tierstore.testing.live_server import ThreadedServer

    with TierStore.open(tmp_path / "s", dim=8, clock=ManualClock(1_700_000_000.0), policy=adapter_policy()) as store:
        with ThreadedServer(build_app(store, tokens=None)) as url, RemoteStore(url) as remote:
            assert remote.policy is not None and remote.policy.dedupe == "off"
            vs = TierStoreVectorStore(remote, EMB, namespace="n")
            assert vs.add_texts(["old text", "other"], metadatas=[{"v": 1}, {"v": 2}], ids=["a", "b"]) == ["a", "b"]
            assert vs.add_texts(["new text"], metadatas=[{"v": 3}], ids=["a"]) == ["a"]
            docs = vs.get_by_ids(["a", "b"])
            assert [(d.id, d.page_content, d.metadata) for d in docs] == [
                ("a", "new text", {"v": 3}),
                ("b", "other", {"v": 2}),
            ]
            assert store.get("n", "a").content == "new text" and len(store.memories("n")) == 2
            assert vs.similarity_search("new text", k=1)[0].id == "a"
            assert vs.delete(["b"]) and vs.get_by_ids(["b"]) == []
    with TierStore.open(tmp_path / "d", dim=8) as deduping:  # the default policy merges duplicates
        with ThreadedServer(build_app(deduping, tokens=None)) as url, RemoteStore(url) as remote:
            with pytest.raises(StoreConfigError, match="dedupe"):
                TierStoreVectorStore(remote, EMB)


class _Angles(Embeddings):
    """Text ``"<degrees>"`` is the unit vector at that angle in the first two
    axes (a third axis for ``"<degrees> up"``): every cosine is exact, and no
    two documents tie."""

    def _one(self, text: str) -> list[float]:
        words = text.split()
        a = math.radians(float(words[0]))
        v = [math.cos(a), math.sin(a)] + [0.0] * 6
        if "up" in words:
            v = [x * 0.6 for x in v]
            v[2] = 0.8
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


def _twins(store: TierStore, texts: list[str], metadatas: list[dict]) -> tuple[TierStoreVectorStore, Any]:
    """Our vector store and LangChain's InMemoryVectorStore holding the same documents."""
    from langchain_core.vectorstores import InMemoryVectorStore

    ours, ref = TierStoreVectorStore(store, _Angles(), namespace="n"), InMemoryVectorStore(_Angles())
    ids = [f"d{i}" for i in range(len(texts))]
    for vs in (ours, ref):
        vs.add_texts(texts, metadatas, ids=ids)
    return ours, ref


def test_a_filter_keeps_what_in_memory_vector_store_keeps(store):
    """``filter``: a function of the Document (InMemoryVectorStore's form) or
    a dict of metadata conditions; the k best that pass, in the ranking's
    order, found however deep they rank (the search asks for more)."""
    n = 150
    ours, ref = _twins(store, [f"{i * 0.5}" for i in range(n)], [{"i": i, "tag": f"t{i % 50}"} for i in range(n)])
    rare = lambda d: d.metadata["i"] % 50 == 7  # noqa: E731 - d7, d57, d107: deep in the ranking for "0"
    for k in (1, 2, 3, 5):
        want = [d.id for d in ref.similarity_search("0", k=k, filter=rare)]
        assert [d.id for d in ours.similarity_search("0", k=k, filter=rare)] == want
        assert [d.id for d in ours.similarity_search("0", k=k, filter={"tag": "t7"})] == want
    assert want == ["d7", "d57", "d107"]
    assert [d.id for d, _ in ours.similarity_search_with_score("0", k=2, filter={"i": {"$gte": 140}})] == [
        d.id for d in ref.similarity_search("0", k=2, filter=lambda d: d.metadata["i"] >= 140)
    ]
    assert ours.similarity_search("0", k=3, filter={"tag": "none"}) == []
    for bad in ({"i": {"$regex": "x"}}, "tag = t7", 3):
        with pytest.raises(InvalidInputError):
            ours.similarity_search("0", k=1, filter=bad)


def test_a_filtered_search_counts_use_only_of_what_it_returns(store):
    ours, _ = _twins(store, [f"{i}" for i in range(60)], [{"odd": i % 2 == 1} for i in range(60)])
    got = [d.id for d in ours.similarity_search("0", k=3, filter={"odd": True}, record_access=True)]
    assert got == ["d1", "d3", "d5"]
    assert {m.id for m in store.memories("n") if m.access_count} == set(got)


def test_max_marginal_relevance_chooses_as_in_memory_vector_store(store):
    # "0" and "10" nearly repeat each other; "0 up" is less relevant to "0" than "40" (0.6, 0.77) but unlike it
    texts = ["0", "10", "0 up", "40", "80"]
    ours, ref = _twins(store, texts, [{"i": i} for i in range(len(texts))])
    for lam in (1.0, 0.8, 0.5, 0.3, 0.0):
        for fetch_k in (2, 3, 5):
            want = [d.id for d in ref.max_marginal_relevance_search("0", k=3, fetch_k=fetch_k, lambda_mult=lam)]
            got = [d.id for d in ours.max_marginal_relevance_search("0", k=3, fetch_k=fetch_k, lambda_mult=lam)]
            assert got == want, (lam, fetch_k)
    # at 0.3, "80" (cosine 0.17 to the query and to "0") beats "0 up" (0.6 to both)
    assert [d.id for d in ours.max_marginal_relevance_search("0", k=2, lambda_mult=0.3)] == ["d0", "d4"]
    assert [d.id for d in ours.max_marginal_relevance_search("0", k=2, lambda_mult=1.0)] == ["d0", "d1"]
    # with a filter, and through LangChain's retriever interface
    assert [d.id for d in ours.max_marginal_relevance_search("0", k=2, lambda_mult=0.3, filter={"i": {"$ne": 2}})] == [
        d.id
        for d in ref.max_marginal_relevance_search("0", k=2, lambda_mult=0.3, filter=lambda d: d.metadata["i"] != 2)
    ]
    assert [
        d.id for d in ours.as_retriever(search_type="mmr", search_kwargs={"k": 2, "lambda_mult": 0.3}).invoke("0")
    ] == ["d0", "d4"]
    # only what it returns counts as used
    ours.max_marginal_relevance_search("0", k=2, lambda_mult=0.3, record_access=True)
    assert {m.id for m in store.memories("n") if m.access_count} == {"d0", "d4"}
    for bad in ({"k": 0}, {"fetch_k": -1}, {"lambda_mult": 1.5}, {"lambda_mult": "x"}, {"nope": 1}):
        with pytest.raises(InvalidInputError):
            ours.max_marginal_relevance_search("0", **bad)


@pytest.mark.slow
def test_the_vector_store_over_tierstore_serve_with_the_adapters_policy(tmp_path):
    """``tierstore serve --policy docs/examples/policy-adapters.toml``: the
    served store keeps every document under its id, and the vector store
    takes the RemoteStore (filter and MMR included); served without it, the
    refusal names the option."""
    pytest.importorskip("uvicorn")
    from pathlib import Path

    from server_process import TOKEN, ServerProcess

    from tierstore.remote.client import RemoteStore

    policy_file = Path(__file__).resolve().parents[2] / "docs" / "examples" / "policy-adapters.toml"
    assert Policy.from_file(policy_file) == adapter_policy()
    with (
        ServerProcess(tmp_path / "s", "--dim", "8", "--policy", str(policy_file), cwd=tmp_path) as server,
        RemoteStore(server.url, token=TOKEN) as remote,
    ):
        assert remote.policy == adapter_policy()
        vs = TierStoreVectorStore(remote, _Angles(), namespace="n")
        vs.add_texts(["0", "10", "0 up", "40"], [{"i": 0}, {"i": 1}, {"i": 2}, {"i": 3}], ids=["a", "b", "c", "d"])
        vs.add_texts(["0"], [{"i": 0}], ids=["twin"])  # the same text: kept under its own id
        assert sorted(d.id for d in vs.similarity_search("0", k=5)) == ["a", "b", "c", "d", "twin"]
        assert [d.id for d in vs.similarity_search("0", k=2, filter={"i": {"$gte": 1}})] == ["b", "d"]
        assert [
            d.id for d in vs.max_marginal_relevance_search("0", k=2, lambda_mult=0.3, filter={"i": {"$ne": 0}})
        ] == ["b", "c"]
    with (
        ServerProcess(tmp_path / "plain", "--dim", "8", cwd=tmp_path) as server,
        RemoteStore(server.url, token=TOKEN) as remote,
    ):
        with pytest.raises(StoreConfigError, match="--policy docs/examples/policy-adapters.toml"):
            TierStoreVectorStore(remote, _Angles())


def test_the_adapters_policy_file_is_adapter_policy():
    from pathlib import Path

    from tierstore.integrations import adapter_policy

    policy_file = Path(__file__).resolve().parents[2] / "docs" / "examples" / "policy-adapters.toml"
    p = Policy.from_file(policy_file)
    assert p == adapter_policy() and p.supersession.resolve_margin is None and p.dedupe == "off"


def test_ids_the_adapter_makes_are_the_stores_kind(store):
    """Texts added without ids get the store's own kind (time first, so the catalog's id index grows at
    its end), each distinct, and a given id is kept as given."""
    vs = TierStoreVectorStore(store, EMB, namespace="n")
    made = vs.add_texts([f"text {i}" for i in range(50)])
    kept = vs.add_texts(["named"], ids=["mine"])
    assert kept == ["mine"] and len(set(made)) == 50
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in made)
    (later,) = vs.add_texts(["later"])
    assert max(i[:12] for i in made) <= later[:12]  # a time prefix, not random digits
    assert {m.id for m in store.memories("n")} == {*made, "mine", later}

"""What LangChain's standard suites do not pin down: the metadata keys that
set store fields, no store field leaking into Document.metadata, bad input
changing nothing, the retriever counting use and honouring its options."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

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
    vs = TierStoreVectorStore(store, EMB, namespace="n", fields=FieldMap(
        memory_type="kind", confidence="conf", tags="labels", ttl_seconds="ttl", pinned="pin"))
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
        vs.similarity_search("kept", k=1, filter={"x": 1})
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
    with TierStore.open(tmp_path / "a", dim=8, policy=Policy.from_dict({"dedupe": "off"})) as superseding:
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
    from tierstore.client import RemoteStore
    from tierstore.server.app import build_app
    from tierstore.testing.live_server import ThreadedServer

    with TierStore.open(tmp_path / "s", dim=8, clock=ManualClock(1_700_000_000.0), policy=adapter_policy()) as store:
        with ThreadedServer(build_app(store, tokens=None)) as url, RemoteStore(url) as remote:
            assert remote.policy is not None and remote.policy.dedupe == "off"
            vs = TierStoreVectorStore(remote, EMB, namespace="n")
            assert vs.add_texts(["old text", "other"], metadatas=[{"v": 1}, {"v": 2}], ids=["a", "b"]) == ["a", "b"]
            assert vs.add_texts(["new text"], metadatas=[{"v": 3}], ids=["a"]) == ["a"]
            docs = vs.get_by_ids(["a", "b"])
            assert [(d.id, d.page_content, d.metadata) for d in docs] == [("a", "new text", {"v": 3}),
                                                                          ("b", "other", {"v": 2})]
            assert store.get("n", "a").content == "new text" and len(store.memories("n")) == 2
            assert vs.similarity_search("new text", k=1)[0].id == "a"
            assert vs.delete(["b"]) and vs.get_by_ids(["b"]) == []
    with TierStore.open(tmp_path / "d", dim=8) as deduping:  # the default policy merges duplicates
        with ThreadedServer(build_app(deduping, tokens=None)) as url, RemoteStore(url) as remote:
            with pytest.raises(StoreConfigError, match="dedupe"):
                TierStoreVectorStore(remote, EMB)

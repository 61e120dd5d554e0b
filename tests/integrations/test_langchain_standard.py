"""LangChain's own standard suites, unchanged: VectorStoreIntegrationTests and
RetrieversIntegrationTests over TierStoreVectorStore and TierStoreRetriever."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests, VectorStoreIntegrationTests

from tierstore import TierStore
from tierstore.integrations.langchain import TierStoreRetriever, TierStoreVectorStore, adapter_policy


class TestTierStoreVectorStore(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, tmp_path) -> Iterator[VectorStore]:
        embeddings = self.get_embeddings()
        store = TierStore.open(tmp_path / "s", dim=len(embeddings.embed_query("x")), policy=adapter_policy())
        yield TierStoreVectorStore(store, embeddings)
        store.close()


class TestTierStoreRetriever(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _store(self, tmp_path) -> Iterator[None]:
        embeddings = VectorStoreIntegrationTests.get_embeddings()
        self._vs = TierStoreVectorStore.from_texts(
            [
                "Alice lives in Lisbon",
                "Alice likes window seats",
                "Bob plays chess",
                "Bob lives in Porto",
                "the weather in Porto is mild",
            ],
            embeddings,
            path=str(tmp_path / "r"),
        )
        yield
        self._vs.close()

    @property
    def retriever_constructor(self) -> type[TierStoreRetriever]:
        return TierStoreRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": self._vs, "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "where does Alice live"

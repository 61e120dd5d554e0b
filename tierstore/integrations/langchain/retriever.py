"""``TierStoreRetriever``: LangChain retrieval ranked by the store's fused score, counting use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from tierstore.integrations.langchain.vectorstore import TierStoreVectorStore


class TierStoreRetriever(BaseRetriever):
    """The ``k`` best documents of ``vectorstore`` for a query, by the fused
    score, in the query's context (``context_tags``; empty: the namespace's
    active context), of ``memory_types`` (``None``: all), from the cold tier
    too when ``include_cold`` says so (``None``: the policy's ``"auto"``).
    Each hit counts as a use (``record_access=True``: weight boosted, TTL
    refreshed for types that refresh on read, a cold hit brought back hot).
    ``invoke(query, k=..., **search options)`` overrides them per call."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: TierStoreVectorStore
    k: int = Field(default=4, ge=1)
    context_tags: Sequence[str] = ()
    memory_types: Sequence[str] | None = None
    min_confidence: float = 0.0
    include_cold: bool | str | None = None
    record_access: bool = True

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options: dict[str, Any] = {
            "context_tags": self.context_tags,
            "memory_types": self.memory_types,
            "min_confidence": self.min_confidence,
            "include_cold": self.include_cold,
            "record_access": self.record_access,
        }
        k = kwargs.pop("k", self.k)
        options.update(kwargs)  # unknown keys: the vector store raises InvalidInputError
        return self.vectorstore.similarity_search(query, k=k, **options)

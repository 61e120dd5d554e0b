"""LangChain adapters (extra ``langchain``): a ``VectorStore`` over one
namespace of a :class:`~tierstore.TierStore`, and a retriever ranking by the
store's fused score. See docs/integrations.md."""

from __future__ import annotations

try:
    import langchain_core  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    from tierstore.optional import missing_dependency

    raise missing_dependency(exc, "tierstore.integrations.langchain", "langchain") from exc

from tierstore.integrations.langchain.fields import FieldMap
from tierstore.integrations.langchain.retriever import TierStoreRetriever
from tierstore.integrations.langchain.vectorstore import TierStoreVectorStore
from tierstore.integrations.policy import adapter_policy

__all__ = ["FieldMap", "TierStoreRetriever", "TierStoreVectorStore", "adapter_policy"]

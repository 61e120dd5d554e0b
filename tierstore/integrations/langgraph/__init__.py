"""LangGraph adapter (extra ``langgraph``): :class:`TierStoreStore`, a
``BaseStore`` with TTLs, search and namespaces over a TierStore. See
docs/integrations.md."""

from __future__ import annotations

try:
    import langgraph.store.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    from tierstore.optional import missing_dependency

    raise missing_dependency(exc, "tierstore.integrations.langgraph", "langgraph") from exc

from tierstore.integrations.langgraph.store import TierStoreStore

__all__ = ["TierStoreStore"]

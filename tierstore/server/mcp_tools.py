"""The MCP tools: a store's calls for agents, named as memory servers name them.

``add_memory``, ``search_memories``, ``get_memory``, ``update_memory``
(feedback, pin), ``delete_memory``, ``restore_memories``; each takes a
namespace. Text in: the store must have an embedder. Served over
streamable HTTP at ``/mcp`` by ``tierstore serve`` (behind the same bearer
token and tenant prefixes as the HTTP API) and over stdio by ``tierstore mcp``.

A translation layer: each tool authorises the namespace, calls one
:class:`TierStore` method in a worker thread and returns plain JSON. A store
error reaches the agent as the tool's error text (class and message);
anything else only as the SDK's generic "Error executing tool", with the
details in the server's log.
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations,
# which name Context, imported inside build_mcp (mcp is an optional dependency).
from typing import TYPE_CHECKING, Any, Literal

from ..errors import AuthError, StoreConfigError, TierStoreError
from .. import wire
from .auth import EVERYONE, Principal
from .deps import require

if TYPE_CHECKING:
    from ..store import TierStore

INSTRUCTIONS = (
    "A memory that forgets: memories expire by type (conversation 1 h, task 2 d, opinion 3 d, preference 7 d, "
    "fact 30 d, refreshed when used), decay unless used, and are archived rather than lost. Search before you "
    "answer; add what the user states; give feedback when a memory proved right or wrong; pin what must never "
    "expire. Every tool takes a namespace (one per user or agent)."
)


def _memory(m: Any) -> dict[str, Any]:
    """A memory for an agent: the fields it can act on, no embedding."""
    return {"id": m.id, "namespace": m.namespace, "content": m.content, "memory_type": m.memory_type,
            "tags": list(m.tags), "confidence": round(m.confidence, 4), "pinned": m.pinned, "tier": m.tier,
            "created_at": m.created_at, "last_accessed_at": m.last_accessed_at, "access_count": m.access_count,
            "expires_at": m.expires_at, "key": m.key, "superseded_by": m.superseded_by}


def build_mcp(store: "TierStore", *, max_k: int = 100) -> Any:
    """An ``MCPServer`` with the memory tools over ``store``. Raises
    StoreConfigError if the store has no embedder (the tools take text)."""
    if store.embedder is None:
        raise StoreConfigError("the MCP tools take text, so the store needs an embedder: "
                               "start it with --embedder minilm (pip install 'tierstore[embed]') or "
                               "--embedder module:function")
    require("mcp", "mcp")
    import anyio.to_thread
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(name="tierstore", instructions=INSTRUCTIONS, log_level="WARNING")

    def principal(ctx: Context) -> Principal:
        """The HTTP request's principal (set by the token check); in process or over stdio, the local user."""
        try:
            request = ctx.request_context.request
        except (ValueError, AttributeError):
            request = None
        if request is None:
            return EVERYONE
        p = getattr(getattr(request, "state", None), "principal", None)
        if not isinstance(p, Principal):
            raise ToolError("AuthError: this request carries no authenticated principal")
        return p

    async def call(ctx: Context, ns: str, fn: Any) -> Any:
        """Authorise ``ns``, run ``fn(ns)`` in a worker thread, store errors as tool errors."""
        try:
            checked = principal(ctx).check_namespace(ns)
            return await anyio.to_thread.run_sync(lambda: fn(checked))
        except (AuthError, TierStoreError) as exc:
            if wire.client_status(exc) is None and not isinstance(exc, AuthError):
                raise  # an internal error: the SDK logs it and tells the agent only that the tool failed
            raise ToolError(f"{type(exc).__name__}: {exc}") from None

    @server.tool()
    async def add_memory(namespace: str, content: str, ctx: Context,
                         memory_type: str = "fact", confidence: float = 0.8, tags: list[str] | None = None,
                         pinned: bool = False, ttl_seconds: float | None = None,
                         source: str = "user_declaration", key: str | None = None) -> dict[str, Any]:
        """Remember something. memory_type: fact, preference, task, opinion or conversation (it sets how long
        the memory lives). confidence in [0, 1]: how sure you are. pinned: never expires. ttl_seconds overrides
        the type's lifetime. key: a slot such as "home_city" or "employer": the slot's current memory is
        replaced (marked superseded_by the new one, and retired). Re-adding what is already remembered
        reinforces it and returns its id. Returns the memory's id."""
        mid = await call(ctx, namespace, lambda ns: store.add(
            ns, content, memory_type=memory_type, confidence=confidence, tags=tags or (), pinned=pinned,
            ttl_seconds=ttl_seconds, source=source, key=key))
        return {"id": mid}

    @server.tool()
    async def search_memories(namespace: str, query: str, ctx: Context, limit: int = 5,
                              memory_types: list[str] | None = None, context_tags: list[str] | None = None,
                              ) -> dict[str, Any]:
        """The memories that best match a question or topic, best first, each with its score. Searches recent
        and archived memories; the ones returned count as used (they live longer)."""
        if isinstance(limit, int) and limit > max_k:
            raise ToolError(f"InvalidInputError: limit={limit} is above this server's limit of {max_k}")
        hits = await call(ctx, namespace, lambda ns: store.search(
            ns, query, k=limit, memory_types=memory_types, context_tags=context_tags or ()))
        return {"results": [{**_memory(h.memory), "score": round(h.score, 4)} for h in hits]}

    @server.tool()
    async def get_memory(namespace: str, memory_id: str, ctx: Context) -> dict[str, Any]:
        """One memory by id (from any tier), without counting it as used."""
        m = await call(ctx, namespace, lambda ns: store.get(ns, memory_id))
        if m is None:
            raise ToolError(f"MemoryNotFoundError: no memory {memory_id!r} in namespace {namespace!r}")
        return _memory(m)

    @server.tool()
    async def update_memory(namespace: str, memory_id: str, ctx: Context,
                            feedback: Literal["positive", "negative"] | None = None, strength: float = 1.0,
                            pinned: bool | None = None) -> dict[str, Any]:
        """Tell the store a memory proved right (feedback="positive": it gains confidence and lives longer) or
        wrong ("negative": it fades), and/or pin it (pinned=true: never expires) or unpin it. Returns the
        memory as it is now."""
        if feedback is None and pinned is None:
            raise ToolError("InvalidInputError: give feedback ('positive' or 'negative') and/or pinned")

        def update(ns: str) -> Any:
            if feedback is not None:
                store.feedback(ns, memory_id, positive=feedback == "positive", strength=strength)
            if pinned is not None:
                store.pin(ns, memory_id, pinned)
            return store.get(ns, memory_id)

        m = await call(ctx, namespace, update)
        if m is None:  # deleted between the update and the read
            raise ToolError(f"MemoryNotFoundError: no memory {memory_id!r} in namespace {namespace!r}")
        return _memory(m)

    @server.tool()
    async def delete_memory(namespace: str, memory_id: str, ctx: Context) -> dict[str, Any]:
        """Forget a memory for good. deleted is false if there was none."""
        return {"deleted": await call(ctx, namespace, lambda ns: store.delete(ns, memory_id))}

    @server.tool()
    async def restore_memories(namespace: str, ctx: Context, query: str | None = None, text: str | None = None,
                               memory_ids: list[str] | None = None, limit: int = 5) -> dict[str, Any]:
        """Bring archived (forgotten) memories back: by meaning (query), by any of some keywords (text) or by
        id (memory_ids). Returns the memories restored."""
        if isinstance(limit, int) and limit > max_k:
            raise ToolError(f"InvalidInputError: limit={limit} is above this server's limit of {max_k}")

        def restore(ns: str) -> list[Any]:
            ids = store.restore(ns, ids=memory_ids, text=text, query=query,
                                k=limit if query is not None else None, limit=limit)
            return [m for m in (store.get(ns, i) for i in ids) if m is not None]

        return {"restored": [_memory(m) for m in await call(ctx, namespace, restore)]}

    return server

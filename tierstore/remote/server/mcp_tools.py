"""The MCP tools: a store's calls for agents, named as memory servers name them.

``add_memory``, ``search_memories``, ``get_memory``, ``list_memories``,
``update_memory`` (text, feedback, pin), ``delete_memory``,
``restore_memories``; each takes a namespace. Text in: the store must have
an embedder. Served over streamable HTTP at ``/mcp`` by ``tierstore serve``
(behind the same bearer token and tenant prefixes as the HTTP API) and over
stdio by ``tierstore mcp``.

A translation layer: each tool's parameters are typed strictly (a boolean
is a JSON boolean, a list a JSON array) with their bounds and descriptions
in its input schema (from :mod:`tierstore.remote.api_schema`, the HTTP API's
definitions); its arguments are checked against the same definitions as an
HTTP body, errors naming the tool's own parameters; then it authorises the
namespace, calls :class:`TierStore` in a worker thread and returns plain
JSON. A store error reaches the agent as the tool's error text (class and
message); anything else only as the SDK's generic "Error executing tool",
with the details in the server's log.
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations,
# which name Context, imported inside build_mcp (mcp is an optional dependency).
import inspect
from typing import TYPE_CHECKING, Annotated, Any, Literal

from tierstore.errors import AuthError, StoreConfigError, TierStoreError
from tierstore.optional import install_hint
from tierstore.remote import api_schema, wire
from tierstore.remote.api_schema import ROUTES, Bounds
from tierstore.remote.server.auth import EVERYONE, Principal
from tierstore.remote.server.deps import require
from tierstore.rules.validation import ID_MAX_LEN, KEY_MAX_LEN, LABEL_MAX_CHARS, TAG_MAX_LEN, TAGS_MAX_LISTED

if TYPE_CHECKING:
    from tierstore.store import TierStore

INSTRUCTIONS = (
    "A memory that forgets: memories expire by type (conversation 1 h, task 2 d, opinion 3 d, preference 7 d, "
    "fact 30 d, refreshed when used), decay unless used, and are archived (the cold tier) rather than lost. "
    "Search before you answer; add what the user states; give feedback when a memory proved right or wrong; pin "
    "what must never expire. Every tool takes a namespace: whose memories (one per user or agent)."
)

#: The tools' parameter names for the HTTP API's fields, so that an error names what the agent sent.
NAMES = {"ns": "namespace", "id": "memory_id", "ids": "memory_ids", "k": "limit", "include_cold": "include_archived"}

MAX_RESULTS = 100  # hits or memories one tool call returns: an agent's context holds no more


def _memory(m: Any) -> dict[str, Any]:
    """A memory for an agent: what it says, how sure, where it lives and until when; no embedding."""
    return {
        "id": m.id,
        "namespace": m.namespace,
        "content": m.content,
        "memory_type": m.memory_type,
        "tags": list(m.tags),
        "confidence": round(m.confidence, 4),
        "source": m.source,
        "pinned": m.pinned,
        "tier": m.tier,
        "created_at": m.created_at,
        "last_accessed_at": m.last_accessed_at,
        "access_count": m.access_count,
        "expires_at": m.expires_at,
        "key": m.key,
        "superseded_by": m.superseded_by,
        "metadata": m.metadata,
    }


def _doc(route: str, name: str) -> str:
    return ROUTES[route].describe(name)


def build_mcp(store: "TierStore", *, limits: Any = Bounds, max_results: int = MAX_RESULTS) -> Any:
    """An ``MCPServer`` with the memory tools over ``store``; ``limits``: the
    server's (``tierstore.remote.server.app.Limits``); ``max_results``: most hits
    or memories per call (stated in the tools' schemas). Raises
    StoreConfigError if the store has no embedder (the tools take text)."""
    if store.embedder is None:
        raise StoreConfigError(
            "the MCP tools take text, so the store needs an embedder: start it with "
            f"--embedder minilm ({install_hint('embed')}) or --embedder module:function"
        )
    require("mcp", "mcp")
    import anyio.to_thread
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import Field

    server = MCPServer(name="tierstore", instructions=INSTRUCTIONS, log_level="WARNING")
    top = min(max_results, limits.max_k, limits.max_page)
    max_chars = limits.max_content_chars

    # -- parameter types: strict JSON types, bounds and descriptions in the schema
    Namespace = Annotated[str, Field(description=api_schema.NS_DOC, min_length=1, max_length=128, strict=True)]
    MemoryId = Annotated[
        str,
        Field(
            description="the memory's id, as add_memory or a search returned it",
            min_length=1,
            max_length=ID_MAX_LEN,
            strict=True,
        ),
    ]
    Limit = Annotated[int, Field(description=f"how many, best first (1 to {top})", ge=1, le=top, strict=True)]
    Tags = Annotated[
        list[Annotated[str, Field(max_length=TAG_MAX_LEN)]] | None,
        Field(description=api_schema.TAGS_DOC, max_length=TAGS_MAX_LISTED),
    ]
    Types = Annotated[
        list[Annotated[str, Field(max_length=LABEL_MAX_CHARS)]] | None,
        Field(
            description="only memories of these types (fact, preference, task, opinion, conversation); default all",
            max_length=api_schema.MAX_TYPES,
        ),
    ]

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

    def checked(tool: str, route: str, **fields: Any) -> dict[str, Any]:
        """The fields as the HTTP API checks them (types, counts, lengths), errors in the tool's words."""
        try:
            return api_schema.check_fields(ROUTES[route], api_schema.body(route, **fields), limits, tool, NAMES)
        except TierStoreError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from None

    async def call(ctx: Context, ns: str, fn: Any) -> Any:
        """Authorise ``ns``, run ``fn(ns)`` in a worker thread, store errors as tool errors."""
        try:
            checked_ns = principal(ctx).check_namespace(ns)
            return await anyio.to_thread.run_sync(lambda: fn(checked_ns))
        except (AuthError, TierStoreError) as exc:
            if wire.client_status(exc) is None and not isinstance(exc, AuthError):
                raise  # an internal error: the SDK logs it and tells the agent only that the tool failed
            raise ToolError(f"{type(exc).__name__}: {exc}") from None

    def tool(fn: Any) -> Any:  # the docstring, dedented, is what the agent reads
        return server.tool(description=inspect.cleandoc(fn.__doc__ or ""))(fn)

    @tool
    async def add_memory(
        namespace: Namespace,
        content: Annotated[
            str,
            Field(
                description=f"what to remember, in a sentence or a few (at most "
                f"{max_chars} characters, and what the embedder reads: a longer text is "
                "refused, split it into several memories)",
                min_length=1,
                max_length=max_chars,
                strict=True,
            ),
        ],
        ctx: Context,
        memory_type: Annotated[
            str, Field(description=api_schema.TYPE_DOC, max_length=LABEL_MAX_CHARS, strict=True)
        ] = "fact",
        confidence: Annotated[float, Field(description="how sure you are, 0 to 1", ge=0.0, le=1.0, strict=True)] = 0.8,
        tags: Tags = None,
        pinned: Annotated[bool, Field(description="true: it never expires", strict=True)] = False,
        ttl_seconds: Annotated[
            float | None, Field(description="its lifetime in seconds, instead of its type's", gt=0.0)
        ] = None,
        source: Annotated[
            str, Field(description=api_schema.SOURCE_DOC, max_length=LABEL_MAX_CHARS, strict=True)
        ] = "user_declaration",
        key: Annotated[
            str | None,
            Field(
                description="a slot such as home_city or employer: the slot's "
                "current memory is replaced by this one (marked superseded_by it)",
                max_length=KEY_MAX_LEN,
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Remember something the user said or you learned. Returns the memory's id.

        Re-adding what is already remembered reinforces that memory and returns its id.
        """
        a = checked(
            "add_memory",
            "/v1/add",
            ns=namespace,
            content=content,
            memory_type=memory_type,
            confidence=confidence,
            tags=tags,
            pinned=pinned,
            ttl_seconds=ttl_seconds,
            source=source,
            key=key,
        )
        a.pop("ns")
        mid = await call(ctx, namespace, lambda ns: store.add(ns, a.pop("content"), **a))
        return {"id": mid}

    @tool
    async def search_memories(
        namespace: Namespace,
        query: Annotated[
            str, Field(description="a question or topic, in words", min_length=1, max_length=max_chars, strict=True)
        ],
        ctx: Context,
        limit: Limit = 5,
        memory_types: Types = None,
        context_tags: Annotated[
            list[Annotated[str, Field(max_length=TAG_MAX_LEN)]] | None,
            Field(
                description="tags of the current context: memories sharing them rank higher", max_length=TAGS_MAX_LISTED
            ),
        ] = None,
        include_archived: Annotated[
            bool | Literal["auto"],
            Field(
                description="search archived (cold) memories too: true, false, or "
                '"auto" (default: only when recent ones answer weakly)'
            ),
        ] = "auto",
        record_access: Annotated[
            bool,
            Field(
                description="count the results as used, so they live longer "
                "(default true; false to look without changing anything)",
                strict=True,
            ),
        ] = True,
    ) -> dict[str, Any]:
        """The memories that best match a question or topic, by meaning and by its words (names, places,
        dates), best first, each with its score and its tier (hot, warm or cold: archived).

        Returns at most `limit` results.
        """
        a = checked(
            "search_memories",
            "/v1/search",
            ns=namespace,
            query=query,
            k=limit,
            memory_types=memory_types,
            context_tags=context_tags,
            include_cold=include_archived,
            record_access=record_access,
        )
        a.pop("ns")
        hits = await call(ctx, namespace, lambda ns: store.search(ns, a.pop("query"), **a))
        return {"results": [{**_memory(h.memory), "score": round(h.score, 4)} for h in hits]}

    @tool
    async def get_memory(namespace: Namespace, memory_id: MemoryId, ctx: Context) -> dict[str, Any]:
        """One memory by id, from any tier, without counting it as used: its text, type, tags, confidence,
        tier (hot, warm, cold), when it expires (expires_at, POSIX seconds; null: never) and what superseded it
        (superseded_by)."""
        checked("get_memory", "/v1/get", ns=namespace, id=memory_id)
        m = await call(ctx, namespace, lambda ns: store.get(ns, memory_id))
        if m is None:
            raise ToolError(f"MemoryNotFoundError: no memory {memory_id!r} in namespace {namespace!r}")
        return _memory(m)

    @tool
    async def list_memories(
        namespace: Namespace,
        ctx: Context,
        limit: Annotated[int, Field(description=f"memories per page (1 to {top})", ge=1, le=top, strict=True)] = 20,
        cursor: Annotated[
            str | None,
            Field(
                description="the next_cursor of the previous page; null for the first",
                max_length=api_schema.MAX_CURSOR_CHARS,
            ),
        ] = None,
    ) -> dict[str, Any]:
        """The namespace's memories in the order they were added, archived ones included, a page at a time,
        without counting them as used. Returns the memories and next_cursor (null after the last page)."""
        checked("list_memories", "/v1/memories", ns=namespace, after=cursor, limit=limit)
        page, after = await call(ctx, namespace, lambda ns: store.memories_page(ns, after=cursor, limit=limit))
        return {"memories": [_memory(m) for m in page], "next_cursor": after}

    @tool
    async def update_memory(
        namespace: Namespace,
        memory_id: MemoryId,
        ctx: Context,
        content: Annotated[
            str | None,
            Field(
                description="new text: replaces the memory's (same id, type, tags; its use counts start afresh)",
                max_length=max_chars,
            ),
        ] = None,
        feedback: Annotated[
            Literal["positive", "negative"] | None,
            Field(description="positive: it proved right (gains confidence, lives longer); negative: wrong (fades)"),
        ] = None,
        strength: Annotated[
            float, Field(description="how strong the feedback is, in (0, 1]", gt=0.0, le=1.0, strict=True)
        ] = 1.0,
        pinned: Annotated[bool | None, Field(description="true: never expires; false: ends that", strict=True)] = None,
    ) -> dict[str, Any]:
        """Change a memory: its text (content), feedback on it, and/or pin it. Returns the memory as it is
        now."""
        if content is None and feedback is None and pinned is None:
            raise ToolError(
                "InvalidInputError: update_memory needs content, feedback ('positive' or 'negative') and/or pinned"
            )
        checked("update_memory", "/v1/feedback", ns=namespace, id=memory_id, positive=True, strength=strength)
        if content is not None:
            checked("update_memory", "/v1/add", ns=namespace, content=content)

        def update(ns: str) -> Any:
            if content is not None:
                old = store.get(ns, memory_id)
                if old is None:
                    return None
                store.upsert_batch(
                    ns,
                    [
                        {
                            "id": memory_id,
                            "content": content,
                            "memory_type": old.memory_type,
                            "tags": old.tags,
                            "source": old.source,
                            "pinned": old.pinned,
                            "ttl_seconds": old.ttl_seconds,
                            "key": old.key,
                            "metadata": old.metadata,
                        }
                    ],
                )
            if feedback is not None:
                store.feedback(ns, memory_id, positive=feedback == "positive", strength=strength)
            if pinned is not None:
                store.pin(ns, memory_id, pinned)
            return store.get(ns, memory_id)

        m = await call(ctx, namespace, update)
        if m is None:
            raise ToolError(f"MemoryNotFoundError: no memory {memory_id!r} in namespace {namespace!r}")
        return _memory(m)

    @tool
    async def delete_memory(namespace: Namespace, memory_id: MemoryId, ctx: Context) -> dict[str, Any]:
        """Forget a memory for good, from any tier. deleted is false if there was none."""
        checked("delete_memory", "/v1/delete", ns=namespace, id=memory_id)
        return {"deleted": await call(ctx, namespace, lambda ns: store.delete(ns, memory_id))}

    @tool
    async def restore_memories(
        namespace: Namespace,
        ctx: Context,
        query: Annotated[
            str | None, Field(description="by meaning: a question or topic", max_length=max_chars, strict=True)
        ] = None,
        text: Annotated[
            str | None, Field(description="by keywords: any of them", max_length=max_chars, strict=True)
        ] = None,
        memory_ids: Annotated[
            list[Annotated[str, Field(max_length=ID_MAX_LEN)]] | None,
            Field(description=f"by id (at most {top})", max_length=top),
        ] = None,
        limit: Limit = 5,
    ) -> dict[str, Any]:
        """Bring archived (cold) memories back to the hot tier: by meaning (query), by any of some keywords
        (text) or by id (memory_ids); give at least one. Returns the memories restored (at most `limit`)."""
        if query is None and text is None and memory_ids is None:
            raise ToolError("InvalidInputError: restore_memories needs query, text or memory_ids")
        a = checked(
            "restore_memories",
            "/v1/restore",
            ns=namespace,
            query=query,
            text=text,
            ids=memory_ids,
            limit=limit,
            k=limit if query is not None else None,
        )
        a.pop("ns")

        def restore(ns: str) -> list[Any]:
            ids = store.restore(ns, **a)
            return [m for m in (store.get(ns, i) for i in ids) if m is not None]

        return {"restored": [_memory(m) for m in await call(ctx, namespace, restore)]}

    return server

"""The HTTP JSON API over ASGI (Starlette), and the MCP server mounted beside it.

A transport only: each route parses its body (which fields, vectors from
the wire), authorises (token, tenant prefixes), applies the server's limits
(body size, ``k``, batch size, work per sweep or restore), calls one
:class:`TierStore` method and encodes what it returns. The store decides
everything else, and its errors go back as ``{"error": {"type", "message"}}``
with the class name, so :class:`tierstore.remote.client.RemoteStore` raises the same
exception a local call would. Internal errors are logged with an id; the
client gets the id and the class name, never a path or a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import msgpack
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tierstore.errors import AuthError, InvalidInputError, TierStoreError
from tierstore.remote import api_schema, wire
from tierstore.remote.server.auth import EVERYONE, Principal, TokenTable
from tierstore.remote.server.schema import GET_ROUTES, POST_ROUTES, openapi
from tierstore.rules.validation import CONTENT_MAX_CHARS

if TYPE_CHECKING:
    from tierstore.store import TierStore

log = logging.getLogger("tierstore.remote.server")

PUBLIC_PATHS = frozenset({"/health", "/ready", "/openapi.json"})  # probes and the schema: no token needed


@dataclass(frozen=True)
class Limits:
    """Bounded work per request. One comment per value."""

    max_body_bytes: int = 16 << 20  # request body; a batch of 1000 x 384 floats as JSON text is ~8 MB
    max_k: int = 1000  # search k and restore k
    max_batch: int = 1000  # items per add_batch, ids per touch or restore, queries per search_batch
    max_batch_hits: int = 10_000  # queries x k of one search_batch (~5 MB of hits)
    max_restore: int = 1000  # memories one restore brings back; its limit when it selects by where/text/query
    max_sweep_items: int = 10_000  # due memories one sweep call examines; its max_items when none is given
    max_sweep_seconds: float = 10.0  # one sweep call's time budget, seconds; its default too
    max_page: int = 1000  # memories per /v1/memories page; its limit when none is given (~2 MB with 384-d vectors)
    max_content_chars: int = CONTENT_MAX_CHARS  # a memory's text or a text to embed, characters (before the model)
    header_timeout_s: float = 10.0  # a connection's request head (line and headers) must arrive within this

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_k",
            "max_batch",
            "max_batch_hits",
            "max_restore",
            "max_sweep_items",
            "max_page",
            "max_content_chars",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"the limit {name} must be a positive integer, got {value!r}")
        for name in ("max_sweep_seconds", "header_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InvalidInputError(f"the limit {name} must be a positive, finite number of seconds, got {value!r}")


class BodyTooLarge(Exception):
    pass


class UnsupportedBody(InvalidInputError):
    """A body in a format its route does not take (415)."""


class Guard:
    """ASGI middleware: the bearer token (401 without a known one) and the body size (413).

    The principal goes to ``scope["state"]["principal"]`` (``request.state.principal``)."""

    def __init__(self, app: Any, tokens: TokenTable | None, max_body_bytes: int) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body = max_body_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        principal = EVERYONE
        if self.tokens is not None and scope["path"] not in PUBLIC_PATHS:
            try:
                principal = self.tokens.lookup((headers.get(b"authorization") or b"").decode("latin-1"))
            except AuthError as exc:
                await _send(
                    send,
                    401,
                    wire.error_body("AuthError", str(exc)),
                    [(b"www-authenticate", b'Bearer realm="tierstore"')],
                )
                return
        scope.setdefault("state", {})["principal"] = principal
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _send(
                send,
                413,
                wire.error_body(
                    "InvalidInputError", f"the body is larger than this server's limit of {self.max_body} bytes"
                ),
            )
            return
        seen = 0
        started = too_large = False

        async def counted() -> dict:  # a chunked body has no length: count it as it comes
            nonlocal seen, too_large
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                too_large = True
                raise BodyTooLarge()
            return message

        async def sending(message: dict) -> None:
            nonlocal started
            if too_large and not started:
                return  # the app's own answer to BodyTooLarge (Starlette's plain-text 500): the 413 below instead
            started = started or message.get("type") == "http.response.start"
            await send(message)

        if scope["path"] in api_schema.ROUTES:  # Calls reads the body itself and answers 413: no wrapper per send
            await self.app(scope, counted, send)
            return
        try:
            await self.app(scope, counted, sending)
        except BodyTooLarge:  # from an app that reads the body itself (the MCP route)
            pass
        if too_large and not started:  # 413, as every route says
            await _send(
                send,
                413,
                wire.error_body(
                    "InvalidInputError", f"the body is larger than this server's limit of {self.max_body} bytes"
                ),
            )


async def _send(send: Callable, status: int, body: Any, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    data = wire.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": data})


# ------------------------------------------------------------------ parsing

LOOP_PARSE_MAX = 32 << 10  # bytes: a search body parsed on the event loop (~0.1 ms); a larger one in a worker


def _parse(raw: bytes, path: str, limits: Limits, packed: bool = False) -> dict[str, Any]:
    """The body's fields, each checked by its route's schema (type, count,
    length: :mod:`tierstore.remote.api_schema`), nulls left out. ``packed``:
    the body is msgpack (:data:`wire.PACKED_ROUTES` only), else JSON."""
    if packed:
        return api_schema.check_body(path, wire.unpack_body(raw), limits)
    try:
        body = json.loads(raw)
    except RecursionError:
        raise InvalidInputError("the body is nested too deeply to be parsed") from None
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, an integer with too many digits
        raise InvalidInputError(f"the body is not valid JSON: {str(exc)[:200]}") from None
    return api_schema.check_body(path, body, limits)


def _encode(result: Any, packed: bool) -> tuple[bytes, bytes]:
    """A call's answer and its content type: msgpack when the client accepts it and msgpack can
    hold it (not an integer past 64 bits in a memory's metadata: JSON then), else JSON."""
    if packed:
        try:
            return msgpack.packb(result), wire.MSGPACK
        except (TypeError, ValueError, OverflowError):
            pass
    return wire.dumps(result), wire.JSON


# ------------------------------------------------------------------ the calls
# Each runs in a worker thread: parse, authorise, limit, call the store, encode.


def _add(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    ns = p.check_namespace(a.pop("ns"))
    if "embedding" in a:
        a["embedding"] = wire.vector_in(a["embedding"], "embedding")
    return {"id": store.add(ns, a.pop("content"), **a)}


def _batch_items(p: Principal, a: dict[str, Any], lim: Limits) -> tuple[str, Any]:
    """The namespace and items of an add_batch or upsert_batch body, vectors decoded."""
    ns = p.check_namespace(a["ns"])
    items = a["items"]
    for i, item in enumerate(items):
        if "embedding" in item:
            item["embedding"] = wire.vector_in(item["embedding"], f"items[{i}].embedding")
    return ns, items


def _add_batch(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    return {"ids": store.add_batch(*_batch_items(p, a, lim))}


def _upsert_batch(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    return {"ids": store.upsert_batch(*_batch_items(p, a, lim))}


def _search(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    return _hits(store.search, p, a, lim)


def _search_batch(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    """One search per query, in order. Every bound and every vector is checked before the first
    search runs: a search may record accesses, so a bad query later in the list must change nothing."""
    ns = p.check_namespace(a.pop("ns"))
    queries = a.pop("queries")
    k = a.get("k", 5)
    if len(queries) * k > lim.max_batch_hits:
        raise InvalidInputError(
            f"{len(queries)} queries x k={k} is above this server's limit of {lim.max_batch_hits} hits per search_batch"
        )
    vectors = [wire.vector_in(q, f"queries[{i}]") for i, q in enumerate(queries)]
    return {"hits": [[wire.hit_to_wire(h) for h in hits] for hits in store.search_batch(ns, vectors, **a)]}


def _search_in_memory(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    """:func:`_search` if the hot tier answers it at once (``TierStore.search_in_memory``), else None."""
    if a.pop("explain", False) or a.get("text") is not None:  # explained, or the keyword index to read
        return None
    a.pop("text", None)
    return _hits(store.search_in_memory, p, a, lim)


def _hits(search: Callable[..., Any], p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    ns = p.check_namespace(a.pop("ns"))
    hits = search(ns, wire.vector_in(a.pop("query"), "query"), **a)
    return None if hits is None else {"hits": [wire.hit_to_wire(h) for h in hits]}


def _get(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    m = store.get(p.check_namespace(a["ns"]), a["id"])
    return {"memory": None if m is None else wire.memory_to_wire(m)}


def _get_by_key(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    m = store.get_by_key(p.check_namespace(a["ns"]), a["key"])
    return {"memory": None if m is None else wire.memory_to_wire(m)}


def _memories(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    ns = p.check_namespace(a.pop("ns"))
    a.setdefault("limit", lim.max_page)  # a page is bounded by the server, not by the store's default
    page, after = store.memories_page(ns, **a)
    return {"memories": [wire.memory_to_wire(m) for m in page], "next": after}


def _touch(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    store.touch(p.check_namespace(a["ns"]), a["ids"])
    return {}


def _feedback(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    ns = p.check_namespace(a.pop("ns"))
    return {"memory": wire.memory_to_wire(store.feedback(ns, a.pop("id"), **a))}


def _pin(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    ns = p.check_namespace(a.pop("ns"))
    store.pin(ns, a.pop("id"), **a)
    return {}


def _delete(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    return {"deleted": store.delete(p.check_namespace(a["ns"]), a["id"])}


def _set_context(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    store.set_context(p.check_namespace(a["ns"]), a["tags"])
    return {}


def _get_context(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    return {"tags": list(store.get_context(p.check_namespace(a["ns"])))}


def _restore(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    ns = p.check_namespace(a.pop("ns"))
    if "ids" not in a:
        a.setdefault("limit", lim.max_restore)  # a filter, text or query selects at most this many
    if "query" in a:
        a["query"] = wire.vector_in(a["query"], "query")
    return {"ids": store.restore(ns, **a)}


def _sweep(store: TierStore, p: Principal, a: dict[str, Any], lim: Limits) -> Any:
    p.check_store_wide("sweep")
    a.setdefault("max_items", lim.max_sweep_items)
    a.setdefault("time_budget_s", lim.max_sweep_seconds)
    return {"report": store.sweep(**a).as_dict()}


CALLS: dict[str, Callable[[TierStore, Principal, dict[str, Any], Limits], Any]] = {
    "/v1/add": _add,
    "/v1/add_batch": _add_batch,
    "/v1/upsert_batch": _upsert_batch,
    "/v1/search": _search,
    "/v1/search_batch": _search_batch,
    "/v1/get": _get,
    "/v1/get_by_key": _get_by_key,
    "/v1/memories": _memories,
    "/v1/touch": _touch,
    "/v1/feedback": _feedback,
    "/v1/pin": _pin,
    "/v1/delete": _delete,
    "/v1/set_context": _set_context,
    "/v1/get_context": _get_context,
    "/v1/restore": _restore,
    "/v1/sweep": _sweep,
}
assert set(CALLS) == set(POST_ROUTES) == set(api_schema.ROUTES), "every route has a schema and a call"


# ------------------------------------------------------------------ the app


class _State:
    ready = False


def _error(exc: BaseException, what: str) -> tuple[int, bytes]:
    """A store error as the client may see it (status, JSON body); anything
    else logged with an id and answered with the id alone."""
    if isinstance(exc, AuthError):
        return 403, wire.dumps(wire.error_body("AuthError", str(exc)))
    if isinstance(exc, BodyTooLarge):
        return 413, wire.dumps(wire.error_body("InvalidInputError", "the body is larger than this server's limit"))
    if isinstance(exc, UnsupportedBody):
        return 415, wire.dumps(wire.error_body("InvalidInputError", str(exc)))
    status = wire.client_status(exc)
    if status is not None:
        return status, wire.dumps(wire.error_body(type(exc).__name__, str(exc)))
    error_id = uuid.uuid4().hex[:12]
    log.error("%s failed (error id %s)", what, error_id, exc_info=exc)
    name = type(exc).__name__ if isinstance(exc, TierStoreError) else "RemoteError"
    return 500, wire.dumps(
        wire.error_body(name, f"the server failed ({name}); its log has the details under error id {error_id}")
    )


def _error_response(exc: BaseException, what: str) -> Response:
    status, data = _error(exc, what)
    return Response(data, status_code=status, media_type="application/json")


def _settle(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    """Complete ``future`` on its loop (a worker thread's result), unless the request was cancelled meanwhile."""
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


def check_workers(workers: Any) -> int:
    """``workers`` (threads running the store's calls) if it is a positive integer; else InvalidInputError."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidInputError(f"workers must be a positive integer (threads), got {workers!r}")
    return workers


class Calls:
    """ASGI: the POST routes of :data:`CALLS`, straight from the server's
    ASGI call to a worker thread and back (the store's calls block: group
    commits, disk, the object store), without a framework's request objects
    on the way: each hand-over costs a wake-up, which on a busy machine is
    the bulk of a small request's time. Everything else goes to ``app``."""

    def __init__(self, app: Any, store: TierStore, limits: Limits, workers: int) -> None:
        self.app = app
        self.store = store
        self.limits = limits
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tierstore-call")
        # Namespaces whose last search the hot tier could not answer at once:
        # their next searches go straight to a worker (touched by the loop only).
        self._not_in_memory: dict[str, int] = {}
        # A Cluster has no in-memory answer: every call of it is a remote actor call.
        self._loop_searches = callable(getattr(store, "search_in_memory", None))

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        call = CALLS.get(scope["path"]) if scope["type"] == "http" else None
        if call is None:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] != "POST":
            await _send(send, 405, wire.error_body("RemoteError", f"no route {scope['method']} {path} (POST only)"))
            return
        # the codecs: a msgpack body (search routes) when its Content-Type says so; a msgpack answer when
        # Accept names it, or when there is no Accept (any type will do) and the body was msgpack
        packed_in = False
        accept = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                packed_in = value.startswith(wire.MSGPACK)
            elif name == b"accept":
                accept = value
        packed_out = packed_in if accept is None else wire.MSGPACK in accept
        ctype = wire.JSON
        try:
            if packed_in and path not in wire.PACKED_ROUTES:
                raise UnsupportedBody(f"{path} takes a JSON body; msgpack only to {sorted(wire.PACKED_ROUTES)}")
            chunks = []
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return  # the client went away: nothing to answer
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            raw = b"".join(chunks)
            principal = scope["state"]["principal"]
            store, limits = self.store, self.limits
            # parsed once, here (a search small enough to cost the loop ~0.1 ms) or in the worker
            body = _parse(raw, path, limits, packed_in) if call is _search and len(raw) <= LOOP_PARSE_MAX else None
            answer = None
            if body is not None and self._loop_searches:
                answer = self._search_on_loop(principal, body, packed_out)
            if answer is None:
                loop = asyncio.get_running_loop()
                done = loop.create_future()

                def run() -> None:
                    try:
                        args = _parse(raw, path, limits, packed_in) if body is None else body
                        result = _encode(call(store, principal, args, limits), packed_out)
                    except BaseException as exc:  # noqa: BLE001 - handed to the request's task
                        loop.call_soon_threadsafe(_settle, done, None, exc)
                    else:
                        loop.call_soon_threadsafe(_settle, done, result, None)

                # One hand-over each way and nothing else: run_in_executor chains a
                # concurrent Future to an asyncio one through several Python-level
                # callbacks, measured at ~5 % of the server's time per search.
                self.executor.submit(run)
                answer = await done
            data, ctype = answer
            status = 200
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error response
            status, data = _error(exc, path)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", ctype), (b"content-length", b"%d" % len(data))],
            }
        )
        await send({"type": "http.response.body", "body": data})

    # A search the hot tier answers costs ~0.4 ms of CPU; handing it to a
    # worker and back costs two thread wake-ups (one holding the GIL to wake
    # the loop), which on 2 busy cores is as much again. So it runs here when
    # TierStore.search_in_memory can answer without waiting; anything that may
    # block (a text to embed, the warm or cold tier, the catalog, a writer of
    # the index) is refused by it and goes to a worker as every other call.
    _SKIP_AFTER_MISS = 16  # searches of a namespace sent straight to a worker after a refusal

    def _search_on_loop(self, principal: Principal, body: dict[str, Any], packed: bool) -> tuple[bytes, bytes] | None:
        """The encoded answer (bytes, content type) of a parsed ``/v1/search``
        body when the hot tier gives it at once; None to hand the request to a
        worker (``body`` is left as it was)."""
        a = dict(body)
        if (
            a.get("explain")
            or a.get("include_cold") is True
            or isinstance(a.get("query"), str)
            or a.get("text") is not None
        ):
            return None  # this request needs more (not the namespace: nothing to remember)
        ns = a.get("ns")
        if isinstance(ns, str) and self._not_in_memory:
            left = self._not_in_memory.get(ns, 0)
            if left > 0:
                self._not_in_memory[ns] = left - 1
                return None
        result = _search_in_memory(self.store, principal, a, self.limits)
        if result is None:
            if len(self._not_in_memory) > 10_000:  # bounded: forget them all
                self._not_in_memory.clear()
            if isinstance(ns, str):  # always: _search_in_memory raised on any other (check_namespace)
                self._not_in_memory[ns] = self._SKIP_AFTER_MISS
            return None
        return _encode(result, packed)


def build_app(
    store: TierStore,
    *,
    tokens: TokenTable | None,
    limits: Limits = Limits(),
    mcp: Any = None,
    close_store: bool = False,
    version: str = "",
    host: str = "127.0.0.1",
    workers: int = 8,
) -> Any:
    """The ASGI app serving ``store``.

    tokens: ``None`` serves without authentication (the caller checked that
    it binds to loopback only). mcp: an MCPServer (see
    :mod:`tierstore.remote.server.mcp_tools`) mounted at ``/mcp`` (streamable HTTP,
    stateless, JSON responses). close_store: close the store when the app
    shuts down (after in-flight requests finished). host: the address served
    (on loopback the MCP route also checks Host and Origin against DNS rebinding).
    workers: threads that run the store's calls (searches run in parallel;
    writes wait for their group commit there, not on the event loop)."""
    check_workers(workers)
    state = _State()

    async def stats(request: Request) -> Response:
        try:
            request.state.principal.check_store_wide("stats")
            lifecycle = request.query_params.get("lifecycle", "true").lower() not in ("false", "0", "no")
            data = await anyio.to_thread.run_sync(
                lambda: wire.dumps({"stats": store.stats(lifecycle=lifecycle).as_dict()})
            )
        except Exception as exc:  # noqa: BLE001
            return _error_response(exc, "/v1/stats")
        return Response(data, media_type="application/json")

    async def namespaces(request: Request) -> Response:
        try:
            names = await anyio.to_thread.run_sync(store.namespaces)
        except Exception as exc:  # noqa: BLE001
            return _error_response(exc, "/v1/namespaces")
        return JSONResponse({"namespaces": request.state.principal.visible(names)})

    async def info(request: Request) -> Response:
        emb = store.embedder
        policy = getattr(store, "policy", None)  # a served cluster's slots each keep their own
        return JSONResponse(
            {
                "api": wire.API_VERSION,
                "version": version,
                "dim": store.dim,
                "embedder": None if emb is None else emb.name,
                "now": store.now(),
                "policy": None if policy is None else policy.to_dict(),
                "store_id": getattr(store, "store_id", None) or None,  # a cluster has none
                "migrator_running": bool(store.migrator_running),
                "codecs": list(wire.CODECS),
            }
        )

    async def metrics(request: Request) -> Response:
        try:
            request.state.principal.check_store_wide("metrics")
            text = await anyio.to_thread.run_sync(store.metrics_text)
        except Exception as exc:  # noqa: BLE001
            return _error_response(exc, "/metrics")
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        ok = state.ready and not getattr(store, "closed", False)  # getattr: a served Cluster has no closed
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    doc = openapi(version, limits)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(doc)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return JSONResponse(
            wire.error_body("RemoteError", f"no route {request.method} {request.url.path}"), status_code=status
        )

    gets = {
        "/v1/stats": stats,
        "/v1/namespaces": namespaces,
        "/v1/info": info,
        "/metrics": metrics,
        "/health": health,
        "/ready": ready,
    }
    assert set(gets) == set(GET_ROUTES)
    routes = [Route(path, fn, methods=["GET"]) for path, fn in gets.items()]
    routes.append(Route("/openapi.json", openapi_json, methods=["GET"]))
    if mcp is not None:
        # the MCP SDK's own app is one route at /mcp plus a lifespan: take its routes, run its session manager
        mcp_app = mcp.streamable_http_app(
            streamable_http_path="/mcp",
            stateless_http=True,
            json_response=True,
            max_request_body_size=limits.max_body_bytes,
            host=host,
        )
        routes += list(mcp_app.routes)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if mcp is not None:
                await stack.enter_async_context(mcp.session_manager.run())
            state.ready = True
            try:
                yield
            finally:
                state.ready = False
        await anyio.to_thread.run_sync(calls.executor.shutdown)  # idle by now: uvicorn waited for the requests
        if close_store:  # in-flight requests have finished: flush accesses, checkpoint, close
            await anyio.to_thread.run_sync(store.close)

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    calls = Calls(app, store, limits, workers)
    return Guard(calls, tokens, limits.max_body_bytes)

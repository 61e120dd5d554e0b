"""``RemoteStore``: a :class:`TierStore` served by ``tierstore serve``, over HTTP.

Same method names, signatures, return types (:class:`Memory`, :class:`Hit`,
:class:`Explain`, :class:`SweepReport`, :class:`Stats`) and exceptions (the
server sends the class name of the store's error; the same class from
:mod:`tierstore.errors` is raised here), so switching is one line::

    store = TierStore.open("./mem", embedder="minilm")
    store = RemoteStore("http://127.0.0.1:8765", token=os.environ["TIERSTORE_TOKEN"])

Over a pool of keep-alive HTTP/1.1 connections (plain sockets and a
small response parser, see :class:`_Connection`; no dependency),
thread-safe: one RemoteStore serves many threads. Two more errors are
remote-only: :class:`AuthError` (token refused, or a namespace outside the
token's tenant) and :class:`RemoteError` (server unreachable, or it
failed: the details are in its log). A request is retried only when its connection
could not be made: a write whose answer was lost is never sent twice.

Why not urllib3, httpx or http.client: on loopback a small request's time
is mostly wake-ups (client, the server's event loop, its worker thread,
and back) and the client's own Python. urllib3 and httpx write a
request's headers and its body in two ``send()`` calls, so the server
wakes twice; http.client too, and it parses response headers with the
email package. Here a request is one ``send()`` of a head built once per
route, and a response is read by a parser of a few lines. Measured in
docs/benchmarks.md ("Serving").

What differs: the server bounds work per request (``k``, batch sizes, a
sweep's items and seconds, a restore's count, a listing's page: see
docs/server.md), the server's clock is the store's, ``progress`` (a
terminal bar) is accepted and ignored, and :attr:`RemoteStore.embedder`
describes the server's embedder (:class:`ServerEmbedder`) rather than
being one.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import msgpack
import numpy as np

from tierstore.errors import InvalidInputError, RemoteError, StoreClosedError
from tierstore.policy import Policy
from tierstore.records import Hit, Memory, Stats, SweepReport
from tierstore.remote import api_schema, wire

__all__ = ["RemoteStore", "ServerEmbedder"]


@dataclass(frozen=True)
class ServerEmbedder:
    """The embedder of a served store, as :attr:`RemoteStore.embedder`: its
    ``name`` and ``dim`` (those of :class:`tierstore.embedding.Embedder`)
    without its model, which runs on the server. Code that checks
    ``store.embedder is None`` or reads ``.name`` / ``.dim`` works with both
    stores; code that calls ``.embed()`` needs a local one."""

    name: str
    dim: int


def _jsonable(obj: Any) -> Any:
    """What json cannot write, as the server's checks should see it."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (_dt.datetime, _dt.date)):
        return obj.isoformat()
    if isinstance(obj, (set, frozenset)) or (hasattr(obj, "__iter__") and not isinstance(obj, (str, bytes))):
        return list(obj)
    return repr(obj)  # refused by the store's checks, with the error a local call gets


def _wire_items(items: Any) -> Any:
    """add_batch / upsert_batch items for the wire: vectors encoded, tuples as lists."""
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
        return items  # not a list: the server says so, as the store does
    out: list[Any] = []
    for item in items:
        if isinstance(item, Mapping):
            item = {
                k: (wire.vector_out(v) if k == "embedding" else _seq(v) if k in ("tags", "supersedes") else v)
                for k, v in item.items()
            }
        out.append(item)
    return out


def _seq(x: Any) -> Any:
    """A list for iterables (tuples, generators); strings and None as they are (the store judges them)."""
    if x is None or isinstance(x, (str, bytes, Mapping, np.ndarray)):
        return x
    try:
        return list(x)
    except TypeError:
        return x


def _rows(queries: Any) -> Any:
    """A 2-D array as its rows (each a vector); any other iterable as a list."""
    if isinstance(queries, np.ndarray) and queries.ndim == 2:
        return list(queries)
    return _seq(queries)


def _required(value: Any) -> Any:
    """A ``None`` where the store takes none, sent as a value the server
    refuses by type (JSON null would read as "left out": the default)."""
    return {"unsupported": "None"} if value is None else value


class _ProtocolError(OSError):
    """A response this client cannot read (reported as a RemoteError)."""


_NO_BODY = frozenset({204, 304})
_MAX_HEAD = 64 << 10  # bytes of status line and headers


def _header(low: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case) in a lower-cased response head, stripped; None if absent."""
    at = low.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    start = at + len(name) + 3
    end = low.find(b"\r\n", start)
    return (low[start:] if end < 0 else low[start:end]).strip()


class _Connection:
    """One keep-alive HTTP/1.1 connection, TCP_NODELAY.

    A request goes out in one ``sendall`` (head and body together: one
    segment, one wake-up of the server), and the response is read by a
    small parser: status, ``Content-Length`` (or chunked, or to the end),
    ``Connection: close``. Measured against http.client on loopback
    (docs/benchmarks.md, "Serving"): its header parsing (the email
    package) and one ``putheader`` call per header were most of the
    client's own time per search."""

    def __init__(self, host: str, port: int, timeout: float, tls: ssl.SSLContext | None) -> None:
        self.sock: socket.socket | None = None
        self._host, self._port, self._timeout, self._tls = host, port, timeout, tls
        self._buf = bytearray()

    def connect(self) -> None:
        sock = socket.create_connection((self._host, self._port), timeout=self._timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def request(self, head: bytes, body: bytes | None) -> tuple[int, bytes, bool, bool]:
        """Send one request (``head`` ends with the blank line); returns
        ``(status, body, the server will close the connection, the body is msgpack)``."""
        assert self.sock is not None
        self.sock.sendall(head + body if body else head)
        return self._response()

    def _fill(self) -> None:
        assert self.sock is not None
        chunk = self.sock.recv(65536)
        if not chunk:
            raise _ProtocolError("the server closed the connection before it answered")
        self._buf += chunk

    def _response(self) -> tuple[int, bytes, bool, bool]:
        buf = self._buf
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buf) > _MAX_HEAD:
                raise _ProtocolError("the response's headers are too long")
            self._fill()
        head = bytes(buf[:end])
        del buf[: end + 4]
        eol = head.find(b"\r\n")
        first = head if eol < 0 else head[:eol]
        version, _, rest = first.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
            raise _ProtocolError(f"not an HTTP/1.x response: {first[:80]!r}")
        status = int(rest[:3])
        # the few headers read, found in the lower-cased head (one pass each, no per-line Python)
        low = head.lower()
        length_text = _header(low, b"content-length")
        length: int | None = None
        if length_text is not None:
            if not length_text.isdigit():
                raise _ProtocolError(f"bad Content-Length {length_text[:20]!r}")
            length = int(length_text)
        chunked = b"chunked" in (_header(low, b"transfer-encoding") or b"")
        packed = (_header(low, b"content-type") or b"").startswith(b"application/msgpack")
        tokens = _header(low, b"connection")
        close = version == b"HTTP/1.0"
        if tokens is not None:
            close = b"close" in tokens or (close and b"keep-alive" not in tokens)
        if 100 <= status < 200:
            return self._response()  # an interim response (not asked for): the real one follows
        if status in _NO_BODY:
            return status, b"", close, packed
        if chunked:
            return status, self._chunked(), close, packed
        if length is None:  # the body runs to the end of the connection
            assert self.sock is not None
            while chunk := self.sock.recv(65536):
                buf += chunk
            data = bytes(buf)
            buf.clear()
            return status, data, True, packed
        while len(buf) < length:
            self._fill()
        data = bytes(buf[:length])
        del buf[:length]
        return status, data, close, packed

    def _chunked(self) -> bytes:
        buf, out = self._buf, bytearray()
        while True:
            while (eol := buf.find(b"\r\n")) < 0:
                self._fill()
            size_text = buf[:eol].split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _ProtocolError(f"bad chunk size {bytes(size_text[:20])!r}") from None
            del buf[: eol + 2]
            if size == 0:  # trailers, then a blank line
                while (eol := buf.find(b"\r\n")) != 0:
                    if eol < 0:
                        self._fill()
                    else:
                        del buf[: eol + 2]
                del buf[:2]
                return bytes(out)
            while len(buf) < size + 2:
                self._fill()
            out += buf[:size]
            del buf[: size + 2]


class _Pool:
    """Keep-alive connections to one server, reused last-in first-out; at
    most ``size`` at once (more threads wait for one)."""

    def __init__(self, url: str, timeout: float, size: int) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInputError(f"expected an http:// or https:// URL, got {url!r}")
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        default_port = self._port == (443 if parts.scheme == "https" else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if default_port else f"{host}:{self._port}"
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._idle: list[_Connection] = []
        # At most `size` connections in use: a count under one C lock, and a Condition on that lock only
        # for the threads that find none free (threading.BoundedSemaphore is Python code: ~10 us a request).
        self._lock = threading.Lock()
        self._free = threading.Condition(self._lock)
        self._size = size
        self._busy = 0
        self._waiting = 0
        self._heads: dict[tuple[str, str, bool, tuple[tuple[str, str], ...]], bytes] = {}

    def _take(self) -> _Connection:
        """A connection for one request (a slot taken: :meth:`_give` it back)."""
        with self._lock:
            while self._busy >= self._size:
                self._waiting += 1
                try:
                    self._free.wait()
                finally:
                    self._waiting -= 1
            self._busy += 1
            idle = self._idle
            conn = idle.pop() if idle else None
        try:
            while conn is not None:
                sock = conn.sock
                # an idle connection that is readable was closed by the server (keep-alive timeout): drop it
                if sock is not None and not select.select([sock], [], [], 0)[0]:
                    return conn
                conn.close()
                with self._lock:
                    conn = self._idle.pop() if self._idle else None
            return self._connect()
        except BaseException:
            self._give(None)
            raise

    def _give(self, conn: _Connection | None) -> None:
        """Free a slot; ``conn``, still open, goes back to the idle list."""
        with self._lock:
            self._busy -= 1
            if conn is not None:
                self._idle.append(conn)
            if self._waiting:
                self._free.notify()

    def _connect(self) -> _Connection:
        conn = _Connection(self._host, self._port, self._timeout, self._tls)
        for attempt in range(4):  # nothing was sent yet: a refused connection may be retried
            try:
                conn.connect()
                return conn
            except ConnectionRefusedError:
                if attempt == 3:
                    raise
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _head(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> bytes:
        """The request's status line and headers, built once per method, path and header set (a RemoteStore
        has one per codec); only Content-Length changes."""
        key = (method, path, body is not None, tuple(headers.items()))
        head = self._heads.get(key)
        if head is None:
            lines = [
                f"{method} {self._prefix}{path} HTTP/1.1",
                f"Host: {self._host_header}",
                "Accept-Encoding: identity",  # a proxy must not compress: this client reads bodies as sent
                *(f"{k}: {v}" for k, v in headers.items()),
            ]
            head = self._heads[key] = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        if body is None:
            return head + b"\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % len(body)

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes, bool]:
        """``(status, body, the body is msgpack)``."""
        head = self._head(method, path, body, headers)
        conn = self._take()
        try:
            status, data, close, packed = conn.request(head, body)
        except BaseException:
            conn.close()
            self._give(None)
            raise
        if close:
            conn.close()
        self._give(None if close else conn)
        return status, data, packed

    def close(self) -> None:
        with self._lock:
            for conn in self._idle:
                conn.close()
            self._idle.clear()


class RemoteStore:
    """A store served by ``tierstore serve``, with :class:`TierStore`'s API.

    url: the server (``http://127.0.0.1:8765``). token: the bearer token
    (default ``$TIERSTORE_TOKEN``). timeout: seconds per request (connect
    and read). pool_size: connections kept open (threads beyond it wait for
    one). Connects at once: an unreachable server or a refused token raises
    here, as :meth:`TierStore.open` does for a bad store.
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0, pool_size: int = 16) -> None:
        self.url = url.rstrip("/")
        token = token if token is not None else os.environ.get("TIERSTORE_TOKEN")
        self._headers = {"content-type": "application/json", "accept": "application/json"}
        # searches go as msgpack when the server takes it (float32 bytes, no base64; a faster codec both ways);
        # without an Accept header its answer comes in msgpack too (one header less to send and parse)
        self._packed_headers = {"content-type": "application/msgpack"}
        if token:
            self._headers["authorization"] = self._packed_headers["authorization"] = f"Bearer {token}"
        self._pool = _Pool(self.url, timeout, pool_size)
        self._closed = False
        # What /v1/info says that cannot change while the server runs (a store's dimension, policy,
        # embedder and id are fixed once it is open), read once here; now() asks each time.
        info = self._request("GET", "/v1/info")
        self._dim = int(info["dim"])
        self.embedder_name: str | None = info.get("embedder")
        self.server_version: str = info.get("version", "")
        self._policy: Policy | None = None if info.get("policy") is None else Policy.from_dict(info["policy"])
        self._store_id: str = info.get("store_id") or ""
        self._embedder = None if self.embedder_name is None else ServerEmbedder(self.embedder_name, self._dim)
        self._packed = "msgpack" in (info.get("codecs") or ())  # a server older than msgpack bodies: JSON

    @property
    def dim(self) -> int:
        """The served store's vector dimension."""
        return self._dim

    @property
    def policy(self) -> Policy | None:
        """The served store's policy; ``None`` from a server that does not say (a served cluster, whose
        slots keep their own, or a server older than this client). What the adapters check."""
        return self._policy

    @property
    def store_id(self) -> str:
        """The served store's id (made when it was created; ``""`` when the server does not say, as for a
        cluster): tells two stores apart, e.g. a store and its restored copy behind the same URL."""
        return self._store_id

    @property
    def embedder(self) -> ServerEmbedder | None:
        """The server's embedder, described (``None``: the server takes vectors only). It runs on the
        server, which embeds any text sent where a vector goes; unlike :attr:`TierStore.embedder` it does
        not embed here."""
        return self._embedder

    @property
    def migrator_running(self) -> bool:
        """Whether the server runs background sweeps (asked each time: ``GET /v1/info``)."""
        return bool(self._request("GET", "/v1/info").get("migrator_running", False))

    # ------------------------------------------------------------------ transport

    def _request(self, method: str, path: str, body: Any = None, *, text: bool = False, packed: bool = False) -> Any:
        """One call; ``packed``: the body goes as msgpack (a route of wire.PACKED_ROUTES, and the server
        said it reads msgpack). The answer is read in the codec its Content-Type names."""
        if self._closed:
            raise StoreClosedError("the RemoteStore is closed")
        if body is None:
            data = None
        elif packed:
            data = msgpack.packb(body, default=_jsonable)
        else:
            data = json.dumps(body, separators=(",", ":"), default=_jsonable).encode()
        try:
            status, raw, raw_packed = self._pool.request(
                method, path, data, self._packed_headers if packed else self._headers
            )
        except OSError as exc:
            raise RemoteError(f"cannot reach the tierstore server at {self.url}: {type(exc).__name__}: {exc}") from None
        ok = 200 <= status < 300
        if ok and text:
            return raw.decode("utf-8")
        try:
            payload = msgpack.unpackb(raw, raw=False) if raw_packed else json.loads(raw)
        except ValueError:
            if ok:
                raise RemoteError(f"the server's answer to {path} could not be read") from None
            payload = None
        if ok:
            return payload
        raise wire.error_from_wire(status, payload)

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        return self._request("POST", path, body)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the connections (the server and its store go on)."""
        if not self._closed:
            self._closed = True
            self._pool.close()

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r}, dim={self.dim}, {'closed' if self._closed else 'open'})"

    @property
    def readonly(self) -> bool:
        return False

    def now(self) -> float:
        """The store's time on the server, POSIX seconds."""
        return float(self._request("GET", "/v1/info")["now"])

    # ------------------------------------------------------------------ add

    def add(
        self,
        ns: str,
        content: str,
        embedding: Any = None,
        *,
        memory_type: str = "fact",
        confidence: float = 0.8,
        source: str = "user_declaration",
        tags: Iterable[str] = (),
        ttl_seconds: float | None = None,
        pinned: bool = False,
        id: str | None = None,
        supersedes: Iterable[str] = (),
        key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """:meth:`TierStore.add`; without an embedding the server's embedder embeds the content."""
        body = api_schema.body(
            "/v1/add",
            ns=ns,
            content=content,
            embedding=wire.vector_out(embedding),
            memory_type=memory_type,
            confidence=confidence,
            source=source,
            tags=_seq(tags),
            pinned=pinned,
            supersedes=_seq(supersedes),
            ttl_seconds=ttl_seconds,
            id=id,
            key=key,
            metadata=metadata,
        )
        return self._post("/v1/add", body)["id"]

    def add_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        """:meth:`TierStore.add_batch`: all or nothing."""
        return self._post("/v1/add_batch", api_schema.body("/v1/add_batch", ns=ns, items=_wire_items(items)))["ids"]

    def upsert_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        """:meth:`TierStore.upsert_batch`: replaces the memories whose ids exist, in one transaction."""
        return self._post("/v1/upsert_batch", api_schema.body("/v1/upsert_batch", ns=ns, items=_wire_items(items)))[
            "ids"
        ]

    # ------------------------------------------------------------------ search and read

    def search(
        self,
        ns: str,
        query: Any,
        *,
        k: int = 5,
        context_tags: Iterable[str] = (),
        memory_types: Iterable[str] | None = None,
        min_confidence: float = 0.0,
        include_warm: bool = True,
        include_cold: bool | str | None = None,
        record_access: bool | None = None,
        explain: bool = False,
        text: str | None = None,
    ) -> list[Hit]:
        """:meth:`TierStore.search`; a str query is embedded by the server (and its words looked up in the
        keyword index); ``text``: the query's words beside a vector."""
        packed = self._packed
        body = api_schema.body(
            "/v1/search",
            ns=ns,
            query=_required((wire.vector_out_packed if packed else wire.vector_out)(query)),
            text=text,
            **self._search_options(
                k, context_tags, memory_types, min_confidence, include_warm, include_cold, record_access, explain
            ),
        )
        return wire.WireRows(self._request("POST", "/v1/search", body, packed=packed)["hits"]).hits()

    def search_batch(
        self,
        ns: str,
        queries: Iterable[Any],
        *,
        k: int = 5,
        context_tags: Iterable[str] = (),
        memory_types: Iterable[str] | None = None,
        min_confidence: float = 0.0,
        include_warm: bool = True,
        include_cold: bool | str | None = None,
        record_access: bool | None = None,
        explain: bool = False,
    ) -> list[list[Hit]]:
        """:meth:`search` for each of many query vectors, in one request: the hits per query, in order.

        As :meth:`TierStore.search_batch` (no text queries: vectors; at most the server's ``--max-batch``
        queries, and queries x ``k`` at most its ``max_batch_hits``). Each query is searched as
        :meth:`TierStore.search` would; every vector is checked before the first search, so a bad one
        raises and nothing changes. For a caller with many queries at once, one request's cost instead of
        one per query."""
        packed = self._packed
        out = wire.vector_out_packed if packed else wire.vector_out
        rows = _rows(queries)
        qs = [out(q) for q in rows] if isinstance(rows, list) else rows  # not a list: the server says so
        body = api_schema.body(
            "/v1/search_batch",
            ns=ns,
            queries=_required(qs),
            **self._search_options(
                k, context_tags, memory_types, min_confidence, include_warm, include_cold, record_access, explain
            ),
        )
        lists = self._request("POST", "/v1/search_batch", body, packed=packed)["hits"]
        return [wire.WireRows(hits).hits() for hits in lists]

    @staticmethod
    def _search_options(
        k: Any,
        context_tags: Any,
        memory_types: Any,
        min_confidence: Any,
        include_warm: Any,
        include_cold: Any,
        record_access: Any,
        explain: Any,
    ) -> dict[str, Any]:
        """A search's options for its body; those equal to the defaults (the store's, which this class's
        signatures repeat) are left out: less to write here and to parse and check on the server."""
        tags = _seq(context_tags)
        return {
            "k": _required(k),
            "context_tags": tags if tags or isinstance(tags, str) else None,  # empty: the namespace's, as left out
            "memory_types": _seq(memory_types),
            "min_confidence": (
                None if type(min_confidence) in (int, float) and min_confidence == 0 else _required(min_confidence)
            ),
            "include_warm": None if include_warm is True else _required(include_warm),
            "include_cold": include_cold,
            "record_access": record_access,
            "explain": None if explain is False else _required(explain),
        }

    def get(self, ns: str, id: str) -> Memory | None:
        m = self._post("/v1/get", api_schema.body("/v1/get", ns=_required(ns), id=_required(id)))["memory"]
        return None if m is None else wire.memory_from_wire(m)

    def get_by_key(self, ns: str, key: str) -> Memory | None:
        """The live memory holding ``key`` in ``ns`` (see ``add(..., key=)``), or None."""
        m = self._post("/v1/get_by_key", api_schema.body("/v1/get_by_key", ns=_required(ns), key=_required(key)))[
            "memory"
        ]
        return None if m is None else wire.memory_from_wire(m)

    def memories(self, ns: str, *, with_embedding: bool = False) -> list[Memory]:
        """:meth:`TierStore.memories`: every memory of ``ns`` in the order added, fetched a page at a time
        (:meth:`memories_page`, the server's ``--max-page`` memories each). The pages are read one after
        another, not at one instant: a memory added meanwhile is listed at the end, and one replaced by
        ``upsert_batch`` after its page was read is listed once, as its new version, where that version is."""
        found: dict[str, Memory] = {}  # by id, in listing order
        after: str | None = None
        while True:
            page, next_after = self.memories_page(ns, after=after, with_embedding=with_embedding)
            for m in page:
                found.pop(m.id, None)  # listed again (replaced meanwhile): its new version, at its new place
                found[m.id] = m
            if next_after is None:
                return list(found.values())
            if next_after == after:  # a server that does not move on would never end the listing
                raise RemoteError(f"the server returned the same page cursor twice while listing {ns!r}")
            after = next_after

    def memories_page(
        self, ns: str, *, after: str | None = None, limit: int | None = None, with_embedding: bool = False
    ) -> tuple[list[Memory], str | None]:
        """:meth:`TierStore.memories_page`; without ``limit`` the server's ``--max-page`` (above it: 400)."""
        if not isinstance(with_embedding, bool):  # JSON null would read as "left out" on the server
            raise InvalidInputError(f"with_embedding must be True or False, got {with_embedding!r}")
        body = api_schema.body(
            "/v1/memories", ns=_required(ns), after=after, limit=limit, with_embedding=with_embedding
        )
        out = self._post("/v1/memories", body)
        return [wire.memory_from_wire(m) for m in out["memories"]], out["next"]

    def namespaces(self) -> list[str]:
        """The namespaces holding memories that this token may reach, sorted."""
        return self._request("GET", "/v1/namespaces")["namespaces"]

    def get_context(self, ns: str) -> tuple[str, ...]:
        return tuple(self._post("/v1/get_context", api_schema.body("/v1/get_context", ns=_required(ns)))["tags"])

    # ------------------------------------------------------------------ updates

    def touch(self, ns: str, ids: str | Iterable[str]) -> None:
        self._post("/v1/touch", api_schema.body("/v1/touch", ns=_required(ns), ids=_required(_seq(ids))))

    def feedback(self, ns: str, id: str, *, positive: bool, strength: float = 1.0, implicit: bool = False) -> Memory:
        body = api_schema.body(
            "/v1/feedback",
            ns=_required(ns),
            id=_required(id),
            positive=_required(positive),
            strength=_required(strength),
            implicit=_required(implicit),
        )
        return wire.memory_from_wire(self._post("/v1/feedback", body)["memory"])

    def pin(self, ns: str, id: str, pinned: bool = True) -> None:
        self._post("/v1/pin", api_schema.body("/v1/pin", ns=_required(ns), id=_required(id), pinned=_required(pinned)))

    def delete(self, ns: str, id: str) -> bool:
        return bool(
            self._post("/v1/delete", api_schema.body("/v1/delete", ns=_required(ns), id=_required(id)))["deleted"]
        )

    def set_context(self, ns: str, tags: Iterable[str]) -> None:
        self._post("/v1/set_context", api_schema.body("/v1/set_context", ns=_required(ns), tags=_required(_seq(tags))))

    # ------------------------------------------------------------------ lifecycle

    def restore(
        self,
        ns: str,
        *,
        ids: Iterable[str] | None = None,
        where: Mapping[str, Any] | None = None,
        text: str | None = None,
        query: Any = None,
        k: int | None = None,
        limit: int | None = None,
        progress: bool | None = False,
    ) -> list[str]:
        """:meth:`TierStore.restore`; without ``ids`` or ``limit`` the server's restore limit applies."""
        body = api_schema.body(
            "/v1/restore",
            ns=_required(ns),
            ids=_seq(ids),
            where=where,
            text=text,
            query=wire.vector_out(query),
            k=k,
            limit=limit,
        )
        return self._post("/v1/restore", body)["ids"]

    def sweep(
        self,
        *,
        max_items: int | None = None,
        time_budget_s: float | None = None,
        progress: bool | None = False,
        dry_run: bool = False,
    ) -> SweepReport:
        """:meth:`TierStore.sweep` on the server; without ``max_items`` / ``time_budget_s`` its limits apply
        (``remaining_due`` says whether to call again)."""
        body = api_schema.body(
            "/v1/sweep", max_items=max_items, time_budget_s=time_budget_s, dry_run=_required(dry_run)
        )
        return wire.sweep_report_from_wire(self._post("/v1/sweep", body)["report"])

    def stats(self, *, lifecycle: bool = True) -> Stats:
        path = "/v1/stats" if lifecycle else "/v1/stats?lifecycle=false"
        return wire.stats_from_wire(self._request("GET", path)["stats"])

    def metrics_text(self) -> str:
        """The server's ``/metrics``: Prometheus text."""
        return self._request("GET", "/metrics", text=True)

"""The server process: ``tierstore serve`` and ``tierstore mcp``.

``serve``: check the auth settings, bind the socket, open the store (this
process owns it: the store's LOCK), start the background migrator, serve
the HTTP API and (with an embedder) MCP at ``/mcp`` with uvicorn. SIGTERM or
SIGINT: stop accepting, let in-flight requests finish (up to
``graceful_timeout_s``), then close the store (flush accesses, checkpoint,
release). Acknowledged writes are committed before their response is sent,
so even a SIGKILL loses none.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any, TextIO, cast

from tierstore.errors import StoreConfigError
from tierstore.optional import install_hint
from tierstore.remote.server.auth import TokenTable, is_loopback, token_file_exposure
from tierstore.remote.server.deps import require


def _tokens(host: str, token_file: str | None, insecure_no_auth: bool) -> TokenTable | None:
    """The token table, or None for --insecure-no-auth (loopback only)."""
    tokens = TokenTable.load(token_file)
    if insecure_no_auth:
        if not is_loopback(host):
            raise StoreConfigError(
                f"--insecure-no-auth serves without tokens, so only on loopback (127.0.0.1, ::1); not on {host}"
            )
        if len(tokens):
            raise StoreConfigError("--insecure-no-auth was given together with tokens: choose one")
        return None
    if not len(tokens):
        raise StoreConfigError(
            "no tokens: give --token-file FILE or set TIERSTORE_TOKEN (clients send "
            "'Authorization: Bearer <token>'), or --insecure-no-auth on loopback"
        )
    return tokens


def _check_seconds(name: str, seconds: Any, *, zero_ok: bool) -> None:
    """A duration setting (seconds): finite, and positive (or zero when ``zero_ok``); else StoreConfigError."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or seconds < 0
        or (seconds == 0 and not zero_ok)
    ):
        raise StoreConfigError(
            f"{name} must be a {'non-negative' if zero_ok else 'positive'}, finite number of seconds, got {seconds!r}"
        )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family, backlog=1024)
    except OSError as exc:
        raise StoreConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve(
    path: str | os.PathLike[str],
    *,
    dim: int | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    token_file: str | None = None,
    insecure_no_auth: bool = False,
    embedder: Any = None,
    limits: Any = None,
    migrator: bool = True,
    migrator_interval_s: float = 60.0,
    graceful_timeout_s: float = 30.0,
    log_level: str = "warning",
    cold: Any = None,
    cold_options: Mapping[str, Any] | None = None,
    allow_clock_jump: bool = False,
    workers: int = 8,
    out: TextIO | None = None,
    cluster: str | None = None,
    cluster_name: str | None = None,
    policy: Any = None,
) -> int:
    """Serve the store at ``path`` until SIGTERM/SIGINT. ``port`` 0 picks a
    free port; the first line on ``out`` says where (``serving ... at http://HOST:PORT``).
    cluster: a Ray address instead of a path: serve the :class:`tierstore.cluster.Cluster`
    whose shards run there (started beforehand; see docs/cluster.md), the one
    started under ``cluster_name`` (default ``"tierstore"``). ``out``: where
    the first line goes (default: ``sys.stdout`` at the time of the call).
    policy: the store's :class:`~tierstore.policy.Policy` (``None``: the one it
    keeps; see :meth:`TierStore.open`); not for a cluster (its shards keep theirs)."""
    out = sys.stdout if out is None else out
    require("starlette")
    uvicorn = require("uvicorn")
    from tierstore import __version__
    from tierstore.core.engine import Settings
    from tierstore.remote.server.app import Limits, build_app, check_workers
    from tierstore.store import TierStore

    # every setting checked before anything is bound, opened or created
    limits = Limits(**limits) if isinstance(limits, Mapping) else (limits or Limits())
    check_workers(workers)
    _check_seconds("graceful_timeout_s", graceful_timeout_s, zero_ok=True)
    _check_seconds("migrator_interval_s", migrator_interval_s, zero_ok=False)
    tokens = _tokens(host, token_file, insecure_no_auth)
    exposure = token_file_exposure(token_file)
    if exposure is not None:  # a warning, not a refusal: the file may sit in a directory only the owner reaches
        logging.getLogger("tierstore.remote.server").warning("%s", exposure)
        print(f"warning: {exposure}", file=sys.stderr, flush=True)
    sock = _bind(host, port)
    store: TierStore | None = None
    try:
        if cluster is not None:
            from tierstore.cluster import Cluster

            name = "tierstore" if cluster_name is None else cluster_name
            # an embedder embeds text here, in this router: the shards log vectors. Background sweeps
            # run here as for a store (two routers sweeping only sweep more often: each is a logged write).
            # A Cluster is not a TierStore, but it serves the calls the app, MCP and this function make.
            store = cast("TierStore", Cluster(address=cluster, name=name, embedder=embedder))
            path = f"cluster {name!r} at {cluster}"
        else:
            store = TierStore.open(
                path,
                dim=dim,
                embedder=embedder,
                cold=cold,
                cold_options=cold_options,
                allow_clock_jump=allow_clock_jump,
                policy=policy,
                settings=Settings(max_content_chars=limits.max_content_chars),
            )
        mcp = None
        if store.embedder is not None:
            from tierstore.remote.server.mcp_tools import build_mcp

            mcp = build_mcp(store, limits=limits)
        app = build_app(
            store,
            tokens=tokens,
            limits=limits,
            mcp=mcp,
            close_store=True,
            version=__version__,
            host=host,
            workers=workers,
        )
        if migrator:
            store.start_migrator(interval_s=migrator_interval_s)
        # keep-alive 75 s: clients reuse connections across an agent's pauses (a connection closed while idle
        # costs the next request a new one, and a close racing a request costs that request)
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_level=log_level,
            access_log=False,
            server_header=False,
            timeout_keep_alive=75,
            proxy_headers=False,  # client addresses are not used
            timeout_graceful_shutdown=graceful_timeout_s,
            http=head_timeout_protocol("httptools" if _have("httptools") else "h11", limits.header_timeout_s),
            loop="uvloop" if _have("uvloop") else "asyncio",
        )
        server = uvicorn.Server(config)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        print(
            f"serving {path} at http://{shown}:{bound_port}"
            + (" (MCP at /mcp)" if mcp is not None else " (no MCP: it takes text, start with --embedder to serve it)"),
            file=out,
            flush=True,
        )
        _run_until_signalled(server, sock)
        return 0 if server.started else 1
    finally:
        sock.close()
        if store is not None:
            store.close()  # idempotent: the app's shutdown closed it unless startup failed


def serve_mcp_stdio(
    path: str | os.PathLike[str],
    *,
    embedder: Any,
    dim: int | None = None,
    migrator: bool = True,
    migrator_interval_s: float = 60.0,
    cold: Any = None,
    cold_options: Mapping[str, Any] | None = None,
    allow_clock_jump: bool = False,
    policy: Any = None,
) -> int:
    """The MCP tools over stdio (for desktop agents); stdout is the protocol."""
    require("mcp")
    import anyio

    from tierstore.remote.server.mcp_tools import build_mcp
    from tierstore.store import TierStore

    _check_seconds("migrator_interval_s", migrator_interval_s, zero_ok=False)
    if embedder is None:
        raise StoreConfigError(
            "tierstore mcp takes text, so it needs an embedder: --embedder minilm "
            f"({install_hint('embed')}) or --embedder module:function"
        )
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    with TierStore.open(
        path,
        dim=dim,
        embedder=embedder,
        cold=cold,
        cold_options=cold_options,
        allow_clock_jump=allow_clock_jump,
        policy=policy,
    ) as store:
        server = build_mcp(store)
        if migrator:
            store.start_migrator(interval_s=migrator_interval_s)
        anyio.run(server.run_stdio_async)
    return 0


def _run_until_signalled(server: Any, sock: socket.socket) -> None:
    """Run uvicorn in a thread; SIGTERM/SIGINT here ask it to shut down gracefully (a second SIGINT: at once).

    uvicorn's own handlers re-raise the signal once it has shut down, so the
    process would end "killed by SIGTERM"; handled here, a graceful shutdown
    exits 0 and a failure to start exits 1."""

    def ask_to_exit(signum: int, frame: Any) -> None:
        if server.should_exit and signum == signal.SIGINT:
            server.force_exit = True
        server.should_exit = True

    previous = {sig: signal.signal(sig, ask_to_exit) for sig in (signal.SIGTERM, signal.SIGINT)}
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="tierstore-server")
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.5)  # wakes for the signal handlers, which run in this (the main) thread
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class OneWrite:
    """A connection's transport that sends a response's head with its body, in one write.

    uvicorn writes the head when the app starts its response and the body
    when it sends it: two system calls, and two segments, so the client
    wakes twice and reads twice. Here a head is held (it is all of one
    write, ``HTTP/1.1 ...`` to the blank line) until the next write, which
    in the same turn of the loop is its body; a response with no body
    written after it (a HEAD, a 204) goes out at the end of that turn
    (``call_soon``). Anything else passes through, in order."""

    def __init__(self, transport: Any, loop: Any) -> None:
        self._transport = transport
        self._loop = loop
        self._held = b""

    def write(self, data: bytes) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n"):
            self._held = data
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._held:
            data, self._held = self._held, b""
            self._transport.write(data)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, pause_reading, get_extra_info, abort...
        return getattr(self._transport, name)


def head_timeout_protocol(name: str, seconds: float) -> type:
    """uvicorn's HTTP protocol ``name`` ("httptools" or "h11") with a header
    timeout: a connection must send a whole request head (line and headers)
    within ``seconds`` of its first byte (of connecting, for a new one), or
    it is closed. uvicorn has no such setting: its only timer is keep-alive,
    armed after a response, so a client that connects and sends nothing (or
    half a head) would hold its connection forever. A request's body is not
    timed here (reading it costs the server a waiting coroutine, no thread).
    Its responses go out in one write each (:class:`OneWrite`)."""
    import importlib

    module, cls_name = {
        "httptools": ("uvicorn.protocols.http.httptools_impl", "HttpToolsProtocol"),
        "h11": ("uvicorn.protocols.http.h11_impl", "H11Protocol"),
    }[name]
    base = getattr(importlib.import_module(module), cls_name)

    class HeadTimeout(base):  # type: ignore[misc, valid-type]
        _head_timer: Any = None
        _head_of: Any = None  # the request cycle current when the timer started: a new one means a head arrived

        def connection_made(self, transport: Any) -> None:
            super().connection_made(OneWrite(transport, self.loop))
            self._start_head_timer()

        def _start_head_timer(self) -> None:
            self._head_of = self.cycle
            self._head_timer = self.loop.call_later(seconds, self._head_timed_out)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def data_received(self, data: bytes) -> None:
            # No timer per request: one starts only when bytes begin a head that
            # they do not complete (a request in one segment costs two checks).
            idle = self.cycle is None or self.cycle.response_complete  # these bytes start the next head
            before = self.cycle
            super().data_received(data)
            if self._head_timer is not None:
                if self.cycle is not self._head_of:
                    self._stop_head_timer()  # its head is complete: the request runs
            elif idle and self.cycle is before and not self.transport.is_closing():
                self._start_head_timer()  # half a head: the rest must come in time

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    HeadTimeout.__name__ = HeadTimeout.__qualname__ = f"{cls_name}WithHeadTimeout"
    return HeadTimeout


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None

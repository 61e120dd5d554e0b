"""A fault-injecting HTTP/1.1 proxy for S3 tests (stdlib only: sockets + threads).

Put it between an S3 client and moto's standalone server::

    proxy = FaultProxy("127.0.0.1", moto_port).start()
    store = S3ObjectStore(bucket, endpoint_url=proxy.url, ...)
    proxy.set_fault("503")                  # every request answered 503 until cleared
    proxy.set_fault("drop", count=1, methods={"PUT"})   # the next PUT only
    proxy.clear()                           # back to forwarding everything

Requests are forwarded byte for byte (the client's SigV4 signature and Host
header are untouched), one request at a time per client connection, so that a
fault switched on at run time applies to the next request even on a kept-alive
connection. Faults:

``500`` / ``503``
    answer with an S3 XML error (InternalError / SlowDown) without forwarding.
``drop``
    forward the request (the server acts on it), then send the client part of
    the response and reset the connection: for a PUT, "written but the
    response was lost"; for a GET, a body cut short.
``drop_before``
    reset the connection as soon as the request was read (nothing forwarded).
``stall``
    read the request, send nothing back for ``stall_s`` seconds (past the
    client's read timeout), then close. Nothing is forwarded.
``stall_response``
    forward the request (the server acts on it), then stall as above.

``injected`` counts the faults actually applied (per kind) and ``requests``
every request seen, so tests can assert that a fault really happened.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterable

__all__ = ["FaultProxy", "FAULTS"]

FAULTS = ("500", "503", "drop", "drop_before", "stall", "stall_response")

_ERRORS = {
    "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "Service Unavailable", "SlowDown", "Please reduce your request rate."),
}
_MAX_HEAD = 64 * 1024


class _Closed(Exception):
    """The peer closed the connection."""


def _read_head(rfile) -> tuple[bytes, list[bytes]]:  # type: ignore[no-untyped-def]
    """Start line and header lines (raw, without CRLF) of one HTTP message."""
    start = rfile.readline(_MAX_HEAD)
    while start in (b"\r\n", b"\n"):  # tolerate stray CRLF between messages
        start = rfile.readline(_MAX_HEAD)
    if not start:
        raise _Closed()
    headers = []
    while True:
        line = rfile.readline(_MAX_HEAD)
        if not line:
            raise _Closed()
        if line in (b"\r\n", b"\n"):
            break
        headers.append(line.rstrip(b"\r\n"))
    return start.rstrip(b"\r\n"), headers


def _header(headers: list[bytes], name: bytes) -> bytes | None:
    name = name.lower()
    for h in headers:
        k, _, v = h.partition(b":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def _read_chunked(rfile) -> bytes:  # type: ignore[no-untyped-def]
    """A chunked body, raw (size lines, data and trailers), to forward as is."""
    out = []
    while True:
        size_line = rfile.readline(_MAX_HEAD)
        if not size_line:
            raise _Closed()
        out.append(size_line)
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while True:  # trailers, then the final CRLF
                line = rfile.readline(_MAX_HEAD)
                if not line:
                    raise _Closed()
                out.append(line)
                if line in (b"\r\n", b"\n"):
                    return b"".join(out)
        data = rfile.read(size + 2)
        if len(data) != size + 2:
            raise _Closed()
        out.append(data)


def _read_body(
    rfile,
    headers: list[bytes],
    *,
    response_to: bytes | None = None,  # type: ignore[no-untyped-def]
    status: int = 0,
) -> tuple[bytes, bool]:
    """The raw body and whether it was delimited by the connection closing."""
    if response_to == b"HEAD" or status in (204, 304) or 100 <= status < 200:
        return b"", False
    te = _header(headers, b"transfer-encoding")
    if te is not None and b"chunked" in te.lower():
        return _read_chunked(rfile), False
    length = _header(headers, b"content-length")
    if length is not None:
        n = int(length)
        data = rfile.read(n)
        if len(data) != n:
            raise _Closed()
        return data, False
    if response_to is None:
        return b"", False  # a request without a length has no body
    return rfile.read(), True  # a response delimited by closing the connection


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), like a crashed peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class FaultProxy:
    """See the module docstring. Thread-safe; ``start()`` returns ``self``."""

    def __init__(
        self, upstream_host: str, upstream_port: int, *, stall_s: float = 10.0, host: str = "127.0.0.1"
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.stall_s = stall_s
        self.host = host
        self.port = 0
        self._lock = threading.Lock()
        self._fault: str | None = None
        self._count: int | None = None
        self._methods: frozenset[str] | None = None
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.log: list[tuple[str, str, str]] = []  # (method, path, fault or "pass")

    # -- control ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def set_fault(self, fault: str, *, count: int | None = None, methods: Iterable[str] | None = None) -> None:
        """Apply ``fault`` to the next ``count`` requests (all, if None) whose
        method is in ``methods`` (any, if None)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {FAULTS}")
        with self._lock:
            self._fault = fault
            self._count = count
            self._methods = None if methods is None else frozenset(m.upper() for m in methods)

    def clear(self) -> None:
        """Forward everything again."""
        with self._lock:
            self._fault = None
            self._count = None
            self._methods = None

    def _take(self, method: str) -> str | None:
        with self._lock:
            self.requests += 1
            fault = self._fault
            if fault is None or (self._methods is not None and method not in self._methods):
                return None
            if self._count is not None:
                self._count -= 1
                if self._count <= 0:
                    self._fault = None
                    self._count = None
            self.injected[fault] += 1
            return fault

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FaultProxy:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(64)
        sock.settimeout(0.1)  # accept() wakes up to notice stop()
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._stop.clear()
        self._thread = threading.Thread(target=self._accept_loop, name="faultproxy-accept", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _reset(c)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"FaultProxy({self.url} -> {self.upstream[0]}:{self.upstream[1]}, fault={self._fault!r})"

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="faultproxy-conn", daemon=True).start()

    # -- one client connection -----------------------------------------------------------

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        up_rfile = None
        rfile = client.makefile("rb")
        try:
            while not self._stop.is_set():
                try:
                    start, headers = _read_head(rfile)
                    expect = _header(headers, b"expect")
                    if expect is not None and expect.lower() == b"100-continue":
                        # Answer the interim response ourselves (a client waits ~1 s
                        # for it otherwise) and do not ask the server for another.
                        client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                        headers = [h for h in headers if not h.lower().startswith(b"expect:")]
                    body, _ = _read_body(rfile, headers)
                except (_Closed, OSError, ValueError):
                    return
                parts = start.split(b" ")
                method = parts[0].decode("latin-1").upper()
                path = parts[1].decode("latin-1") if len(parts) > 1 else ""
                fault = self._take(method)
                with self._lock:
                    self.log.append((method, path, fault or "pass"))
                raw_request = start + b"\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body
                if fault == "drop_before":
                    return
                if fault in _ERRORS:
                    client.sendall(self._error_response(fault, method))
                    continue
                if fault == "stall":
                    self._stop.wait(self.stall_s)
                    return
                # forward, over one upstream connection per client connection
                for attempt in (1, 2):
                    try:
                        if upstream is None:
                            upstream = socket.create_connection(self.upstream, timeout=30)
                            up_rfile = upstream.makefile("rb")
                        upstream.sendall(raw_request)
                        rstart, rheaders = _read_head(up_rfile)
                        status = int(rstart.split(b" ")[1])
                        while 100 <= status < 200:  # interim responses: not forwarded
                            rstart, rheaders = _read_head(up_rfile)
                            status = int(rstart.split(b" ")[1])
                        rbody, until_close = _read_body(up_rfile, rheaders, response_to=method.encode(), status=status)
                        break
                    except (_Closed, OSError, ValueError, IndexError):
                        if upstream is not None:
                            _reset(upstream)
                        upstream = up_rfile = None
                        if attempt == 2:
                            return  # upstream down: the client sees a reset connection
                raw_response = rstart + b"\r\n" + b"".join(h + b"\r\n" for h in rheaders) + b"\r\n" + rbody
                if fault == "drop":
                    head_len = len(raw_response) - len(rbody)
                    cut = head_len + len(rbody) // 2 if rbody else head_len // 2
                    client.sendall(raw_response[:cut])
                    return
                if fault == "stall_response":
                    self._stop.wait(self.stall_s)
                    return
                client.sendall(raw_response)
                if until_close or (_header(rheaders, b"connection") or b"").lower() == b"close":
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(client)
            _reset(client)
            if upstream is not None:
                _reset(upstream)

    @staticmethod
    def _error_response(fault: str, method: str) -> bytes:
        status, reason, code, message = _ERRORS[fault]
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>faultproxy</RequestId></Error>"
        ).encode()
        if method == "HEAD":
            body = b""
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nx-amz-request-id: faultproxy\r\n\r\n"
        ).encode()
        return head + body

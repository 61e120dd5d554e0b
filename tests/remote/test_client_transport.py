"""RemoteStore's HTTP/1.1 transport against a scripted socket server: the
responses a server may send (lengths, chunks, close, to the end of the
connection) and the ones it must refuse."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tierstore.errors import RemoteError
from tierstore.remote.client import _Pool


class Scripted:
    """A loopback server answering each request on a connection with the next canned reply."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = list(replies)
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.replies:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                while self.replies:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    if not data:
                        break
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    while len(body) < length:
                        body += conn.recv(65536)
                    self.requests.append(data)
                    reply = self.replies.pop(0)
                    conn.sendall(reply)
                    if reply.endswith(b"<close>"):
                        break

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def scripted() -> Iterator[type[Scripted]]:
    made: list[Scripted] = []

    def make(replies: list[bytes]) -> Scripted:
        s = Scripted(replies)
        made.append(s)
        return s

    yield make  # type: ignore[misc]
    for s in made:
        s.close()


def test_lengths_chunks_and_keep_alive(scripted):
    s = scripted(
        [
            b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{"a":1}',
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n{"b\r\n4\r\n":2}\r\n'
            b"0\r\nX-Trailer: t\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}",
        ]
    )
    pool = _Pool(s.url, timeout=5.0, size=2)
    assert pool.request("POST", "/v1/x", b"{}", {"accept": "application/json"}) == (200, b'{"a":1}', False)
    assert pool.request("GET", "/v1/y", None, {}) == (200, b'{"b":2}', False)
    assert pool.request("POST", "/v1/x", b"[1]", {}) == (404, b"{}", False)
    assert s.connections == 1  # one keep-alive connection for all three
    first, second = s.requests[0], s.requests[1]
    assert first.startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:") and b"Content-Length: 2\r\n\r\n{}" in first
    assert b"accept: application/json\r\n" in first
    assert second.startswith(b"GET /v1/y HTTP/1.1\r\n") and b"Content-Length" not in second
    pool.close()


def test_connection_close_and_a_body_to_the_end(scripted):
    s = scripted(
        [
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok<close>",
            b"HTTP/1.0 200 OK\r\n\r\nto the end<close>",
        ]
    )
    pool = _Pool(s.url, timeout=5.0, size=1)
    assert pool.request("GET", "/a", None, {}) == (200, b"ok", False)  # the "<close>" after the length is not read
    assert pool.request("GET", "/b", None, {}) == (200, b"to the end<close>", False)
    assert s.connections == 2 and pool._idle == []
    pool.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort<close>",  # closed before the whole body
        b"SMTP ready\r\n\r\n<close>",  # not HTTP
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n<close>",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n<close>",
    ],
)
def test_a_bad_response_is_a_remote_error(scripted, reply):
    from tierstore.remote.client import RemoteStore

    s = scripted([b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"dim": 4}\n', reply])
    remote = RemoteStore(s.url, token="t")
    with pytest.raises(RemoteError, match="cannot reach"):
        remote.get("ns", "id")
    remote.close()


def _wire_hit(i: int, explain: bool = False) -> dict:
    from tierstore.records import Explain, Memory
    from tierstore.remote import wire

    m = Memory(
        id=f"m{i}",
        namespace="u",
        content=f"text {i}",
        memory_type="fact",
        created_at=1.0,
        last_accessed_at=2.0,
        access_count=i,
        confidence=0.5,
        source="user_declaration",
        tags=("a",),
        ttl_seconds=None,
        pinned=False,
        tier="cold",
        weight=0.25,
        expires_at=None,
        due_at=3.0,
        embedding=None,
        metadata={"n": i},
    )
    ex = None
    if explain:
        ex = wire.explain_to_wire(
            Explain(
                mode="product",
                raw={"similarity": 0.5},
                normalised={"similarity": 0.5},
                weights={},
                terms={"similarity": 0.5},
                score=0.5,
                tier="cold",
            )
        )
    return {"id": m.id, "score": 1.0 / (i + 1), "memory": wire.memory_to_wire(m), "explain": ex}


def test_search_hits_from_the_wire_build_each_memory_on_first_use() -> None:
    from tierstore.remote import wire

    maps = [_wire_hit(i) for i in range(3)]
    rows = wire.WireRows(maps)
    hits = rows.hits()
    assert [h.id for h in hits] == ["m0", "m1", "m2"] and [h.score for h in hits] == [1.0, 0.5, 1 / 3]
    assert hits[1].content == "text 1" and rows._memories == [None, None, None]  # nothing built yet
    assert hits[1].memory == wire.memory_from_wire(maps[1]["memory"]) and hits[1].memory is hits[1].memory
    assert hits[2].metadata == {"n": 2} and hits[0].explain is None and rows._memories[0] is None
    with_explain = wire.WireRows([_wire_hit(0, explain=True), _wire_hit(1)]).hits()
    assert with_explain[0].explain.score == 0.5 and with_explain[1].explain is None


@pytest.mark.parametrize(
    "bad",
    [
        {"id": "m0", "score": 1.0},  # no memory
        {"id": 5, "score": 1.0, "memory": _wire_hit(0)["memory"]},
        {"id": "m0", "score": True, "memory": _wire_hit(0)["memory"]},
        {"id": "m0", "score": 1.0, "memory": {**_wire_hit(0)["memory"], "extra": 1}},
        {"id": "m0", "score": 1.0, "memory": {k: v for k, v in _wire_hit(0)["memory"].items() if k != "tier"}},
        ["m0", 1.0],
    ],
)
def test_a_malformed_search_hit_is_a_remote_error_at_the_search(bad) -> None:
    from tierstore.remote import wire

    with pytest.raises(RemoteError, match="search hit"):
        wire.WireRows([_wire_hit(1), bad])

"""The msgpack codec (negotiated by Content-Type and Accept), ``/v1/search_batch`` and one write
per response (issue 31, item 4: the server's own cost).

What must hold: a search answers the same through either codec and through
the library; JSON clients and servers that know only JSON keep working; a
msgpack body is checked as a JSON one is (types exact, counts and sizes
bounded before any work) and anything else in it is a clear 4xx that
changes nothing; a batch of searches is the searches one by one, and a bad
query anywhere in it changes nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
import pytest
import urllib3

from tierstore import ManualClock, TierStore
from tierstore.errors import DimensionMismatchError, InvalidInputError, InvalidVectorError
from tierstore.remote import wire
from tierstore.remote.client import RemoteStore
from tierstore.remote.server.app import Limits, build_app
from tierstore.remote.server.auth import Principal, TokenTable
from tierstore.remote.server.run import OneWrite
from tierstore.testing.embedders import DIM, T0, hash_embed
from tierstore.testing.live_server import ThreadedServer

ADMIN = "admin-token-0123456789abcdef"
LIMITS = Limits(max_body_bytes=400_000, max_k=50, max_batch=20, max_batch_hits=60)
PACKED = "application/msgpack"


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture
def store(tmp_path) -> Iterator[TierStore]:
    with TierStore.open(tmp_path / "store", embedder=hash_embed, clock=ManualClock(T0)) as s:
        s.add_batch("n", [{"content": f"memory {i}", "embedding": unit(i), "tags": ["t"]} for i in range(40)])
        s.add("n", "big numbers", unit(100), metadata={"n": 2**70, "s": "x"}, id="big")
        yield s


@pytest.fixture
def server(store) -> Iterator[str]:
    tokens = TokenTable([(ADMIN, Principal("admin")), ("acme-token-0123456789abcdef0", Principal("acme", ("acme.",)))])
    with ThreadedServer(build_app(store, tokens=tokens, limits=LIMITS)) as url:
        yield url


def post(url: str, path: str, data: bytes, ctype: str = PACKED, accept: str = PACKED) -> tuple[int, str, Any]:
    """(status, content type, decoded body) of a raw POST."""
    headers = {"content-type": ctype, "accept": accept, "authorization": f"Bearer {ADMIN}"}
    resp = urllib3.request("POST", url + path, body=data, headers=headers, retries=False)
    got = resp.headers.get("content-type", "")
    body = msgpack.unpackb(resp.data) if got.startswith(PACKED) else json.loads(resp.data)
    return resp.status, got, body


def state(store: TierStore) -> Any:
    """What a refused request must not change: every memory's access count and weight, and the events."""
    store.flush()
    rows = sorted((m.id, m.access_count, m.last_accessed_at) for m in store.memories("n"))
    return rows, store.engine.catalog.query("SELECT count(*) FROM events")[0][0]


def same(a: list[Any], b: list[Any]) -> None:
    assert [h.id for h in a] == [h.id for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)
    assert [h.memory.content for h in a] == [h.memory.content for h in b]


# ---------------------------------------------------------------- one answer, whichever codec


def test_searches_go_as_msgpack_and_answer_as_the_library_and_json_do(server, store):
    with RemoteStore(server, token=ADMIN) as packed, RemoteStore(server, token=ADMIN) as plain:
        assert packed._packed
        plain._packed = False  # a client that speaks JSON only
        for seed in range(200, 210):
            q = unit(seed)
            local = store.search("n", q, k=7, record_access=False)
            same(packed.search("n", q, k=7, record_access=False), local)
            same(plain.search("n", q, k=7, record_access=False), local)
            # options that are not the defaults go on the wire, and mean the same through both codecs
            kw: dict[str, Any] = {"k": 3, "context_tags": ["t"], "min_confidence": 0.5, "include_warm": False}
            same(packed.search("n", q, record_access=False, **kw), store.search("n", q, record_access=False, **kw))
        q = unit(300)
        explained = packed.search("n", q, k=2, explain=True, record_access=False)
        assert explained[0].explain == store.search("n", q, k=2, explain=True, record_access=False)[0].explain
        assert packed.search("n", "memory 3", k=1, record_access=False)[0].memory.content  # a text query too
        assert packed.search("n", [float(x) for x in q], k=3, record_access=False)[0].id == explained[0].id


def test_an_answer_msgpack_cannot_hold_goes_as_json(server, store):
    status, ctype, body = post(server, "/v1/search", msgpack.packb({"ns": "n", "query": unit(100).tobytes(), "k": 1}))
    assert status == 200 and ctype.startswith("application/json")  # 2**70 in the metadata: past msgpack's 64 bits
    assert body["hits"][0]["memory"]["metadata"] == {"n": 2**70, "s": "x"}
    with RemoteStore(server, token=ADMIN) as r:
        assert r.search("n", unit(100), k=1)[0].memory.metadata == {"n": 2**70, "s": "x"}


def test_json_bodies_and_answers_are_unchanged(server, store):
    body = {"ns": "n", "query": wire.vector_out(unit(201)), "k": 2, "record_access": False}
    status, ctype, out = post(server, "/v1/search", json.dumps(body).encode(), "application/json", "application/json")
    assert status == 200 and ctype.startswith("application/json")
    assert [h["id"] for h in out["hits"]] == [h.id for h in store.search("n", unit(201), k=2, record_access=False)]
    # JSON in, msgpack out: the answer's codec is the Accept header's
    status, ctype, packed_out = post(server, "/v1/search", json.dumps(body).encode(), "application/json", PACKED)
    assert status == 200 and ctype.startswith(PACKED) and packed_out == out
    # msgpack in and JSON asked for: JSON; msgpack in and no Accept: msgpack (the request's codec)
    packed_body = msgpack.packb({**body, "query": unit(201).tobytes()})
    status, ctype, json_out = post(server, "/v1/search", packed_body, PACKED, "application/json")
    assert status == 200 and ctype.startswith("application/json") and json_out == out
    headers = {"content-type": PACKED, "authorization": f"Bearer {ADMIN}"}
    resp = urllib3.request("POST", server + "/v1/search", body=packed_body, headers=headers, retries=False)
    assert resp.headers["content-type"].startswith(PACKED) and msgpack.unpackb(resp.data) == out
    # JSON in and no Accept: JSON, as before msgpack existed
    headers = {"content-type": "application/json", "authorization": f"Bearer {ADMIN}"}
    resp = urllib3.request("POST", server + "/v1/search", body=json.dumps(body).encode(), headers=headers)
    assert resp.headers["content-type"].startswith("application/json") and json.loads(resp.data) == out


def test_a_server_that_knows_only_json_gets_json(server, store, monkeypatch):
    monkeypatch.setattr(wire, "CODECS", ("json",))  # what /v1/info says: an older server says nothing
    with RemoteStore(server, token=ADMIN) as r:
        assert not r._packed
        same(r.search("n", unit(5), k=4, record_access=False), store.search("n", unit(5), k=4, record_access=False))
        assert len(r.search_batch("n", [unit(5), unit(6)], k=2)) == 2


# ---------------------------------------------------------------- a hostile msgpack body


def _nested(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]]


GOOD = {"ns": "n", "query": unit(1).tobytes(), "record_access": True}
BAD_BODIES = [
    ("not msgpack", b"\xc1\xc1\xc1", "not valid msgpack"),
    ("cut short", msgpack.packb(GOOD)[:-10], "not valid msgpack"),
    ("two values", msgpack.packb(GOOD) + b"\x01", "not valid msgpack"),
    ("nested past the unpacker's stack", _nested(5_000), "not valid msgpack"),
    ("an array declaring 2**31 entries", b"\xdd\x7f\xff\xff\xff", "not valid msgpack"),  # sizes bounded by the body's
    ("a map declaring 2**31 keys", b"\xdf\x7f\xff\xff\xff", "not valid msgpack"),
    ("a string declaring 2 GB", msgpack.packb(GOOD)[:-1] + b"\xdb\x7f\xff\xff\xff", "not valid msgpack"),
    ("an extension type", msgpack.packb({**GOOD, "k": msgpack.ExtType(5, b"xx")}), "not valid msgpack"),
    ("a timestamp", msgpack.packb({**GOOD, "query": msgpack.Timestamp(1, 0)}), "quer"),
    ("an int map key", b"\x81\x01\x02", "not valid msgpack"),
    ("a bytes key", msgpack.packb({**GOOD, b"ns2": "n"}), "unknown field"),
    ("mixed keys", msgpack.packb({**GOOD, b"a": 1, "b": 2}), "unknown field"),
    ("not a map", msgpack.packb([GOOD]), "expected a JSON object"),
    ("invalid UTF-8", msgpack.packb({**GOOD, "ns": "n"}).replace(b"\xa2ns\xa1n", b"\xa2ns\xa1\xff"), "msgpack"),
    ("bytes for a string", msgpack.packb({**GOOD, "ns": b"n"}), "ns"),
    ("bytes for a list", msgpack.packb({**GOOD, "context_tags": b"t"}), "context_tags"),
    ("a vector of 3 bytes", msgpack.packb({**GOOD, "query": b"abc"}), "quer"),
    ("a vector too long", msgpack.packb({**GOOD, "query": bytes(4 * 70_000)}), "quer"),
    ("a float for k", msgpack.packb({**GOOD, "k": 5.0}), "k"),
    ("k past the limit", msgpack.packb({**GOOD, "k": 51}), "k"),
    ("an int for a flag", msgpack.packb({**GOOD, "record_access": 1}), "record_access"),
    ("NaN confidence", msgpack.packb({**GOOD, "min_confidence": float("nan")}), "min_confidence"),
    ("a wrong dimension", msgpack.packb({**GOOD, "query": unit(1)[:-1].tobytes()}), "dimension"),
    ("a NaN vector", msgpack.packb({**GOOD, "query": np.full(DIM, np.nan, np.float32).tobytes()}), "NaN"),
]


@pytest.mark.parametrize("why,data,says", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_a_bad_msgpack_search_is_a_400_that_changes_nothing(server, store, why, data, says):
    before = state(store)
    for path, body in (("/v1/search", data), ("/v1/search_batch", None)):
        if body is None:  # the same fault inside a batch's body, where it can be put there
            try:
                fields = msgpack.unpackb(data, strict_map_key=False)
            except Exception:  # noqa: BLE001 - not a map: send it as it is
                fields = None
            if not isinstance(fields, dict) or "query" not in fields:
                continue
            fields["queries"] = [unit(2).tobytes(), fields.pop("query")]
            body = msgpack.packb(fields)
        status, ctype, out = post(server, path, body)
        assert status == 400, (path, status, out)
        assert ctype.startswith("application/json")  # errors are JSON whatever was asked
        assert says.lower() in out["error"]["message"].lower(), out
        assert len(out["error"]["message"]) < 600
    assert state(store) == before
    assert post(server, "/v1/search", msgpack.packb(GOOD))[0] == 200  # and the server goes on


def test_an_oversize_msgpack_body_is_a_413(server, store):
    before = state(store)
    for path, fields in (
        ("/v1/search", {**GOOD, "context_tags": ["x" * 60] * 8000}),
        ("/v1/search_batch", {"ns": "n", "queries": [unit(1).tobytes()] * 20, "context_tags": ["x" * 60] * 8000}),
    ):
        data = msgpack.packb(fields)
        assert len(data) > LIMITS.max_body_bytes
        status, _, out = post(server, path, data)
        assert status == 413 and "limit" in out["error"]["message"], (path, out)
    assert state(store) == before


def test_msgpack_bodies_go_to_the_search_routes_only(server, store):
    before = state(store)
    for path, fields in (
        ("/v1/add", {"ns": "n", "content": "x", "embedding": unit(3).tobytes()}),
        ("/v1/add_batch", {"ns": "n", "items": [{"content": "x", "metadata": {"b": b"bytes"}}]}),
        ("/v1/touch", {"ns": "n", "ids": ["big"]}),
    ):
        status, _, out = post(server, path, msgpack.packb(fields))
        assert status == 415 and "takes a JSON body" in out["error"]["message"], (path, out)
    assert state(store) == before
    # any route answers in msgpack when asked
    status, ctype, out = post(server, "/v1/get", json.dumps({"ns": "n", "id": "big"}).encode(), "application/json")
    assert status == 200 and ctype.startswith("application/json")  # 2**70: JSON, as above
    status, ctype, out = post(server, "/v1/get_context", json.dumps({"ns": "n"}).encode(), "application/json")
    assert status == 200 and ctype.startswith(PACKED) and out == {"tags": []}


def test_a_tenant_token_is_checked_in_msgpack_as_in_json(server, store):
    headers = {"content-type": PACKED, "accept": PACKED, "authorization": "Bearer acme-token-0123456789abcdef0"}
    for path, body in (("/v1/search", GOOD), ("/v1/search_batch", {"ns": "n", "queries": [unit(1).tobytes()]})):
        resp = urllib3.request("POST", server + path, body=msgpack.packb(body), headers=headers, retries=False)
        assert resp.status == 403 and json.loads(resp.data)["error"]["type"] == "AuthError"


# ---------------------------------------------------------------- search_batch


def test_search_batch_is_the_searches_one_by_one(server, store):
    Q = np.stack([unit(400 + i) for i in range(6)])
    with RemoteStore(server, token=ADMIN) as r:
        for packed in (True, False):
            r._packed = packed
            for kw in ({"k": 4}, {"k": 2, "context_tags": ["t"], "explain": True}, {"k": 3, "include_cold": False}):
                got = r.search_batch("n", Q, record_access=False, **kw)
                assert len(got) == len(Q)
                for q, hits in zip(Q, got):
                    same(hits, store.search("n", q, record_access=False, **kw))
            lists = r.search_batch("n", [list(map(float, Q[0])), Q[1]], k=2, record_access=False)
            assert [h.id for h in lists[0]] == [h.id for h in store.search("n", Q[0], k=2, record_access=False)]
        before = store.get("n", got[0][0].id).access_count
        r.search_batch("n", Q[:1], k=1, record_access=True)  # accesses recorded as a search records them
        store.flush()
        assert store.get("n", store.search("n", Q[0], k=1, record_access=False)[0].id).access_count >= before


def test_a_bad_batch_raises_before_any_search(server, store):
    good = [unit(500 + i) for i in range(3)]
    before = state(store)
    with RemoteStore(server, token=ADMIN) as r:
        for packed in (True, False):
            r._packed = packed
            with pytest.raises(DimensionMismatchError, match=r"queries\[2\]"):
                r.search_batch("n", [*good[:2], good[2][:-1]], record_access=True)
            with pytest.raises(InvalidVectorError, match=r"queries\[1\]"):
                r.search_batch("n", [good[0], np.full(DIM, np.nan, np.float32)], record_access=True)
            with pytest.raises(InvalidVectorError, match=r"queries\[0\]"):
                r.search_batch("n", ["a text"], record_access=True)  # vectors only
            with pytest.raises(InvalidInputError, match="21 queries, more than this server's limit of 20"):
                r.search_batch("n", [good[0]] * 21, record_access=True)
            with pytest.raises(InvalidInputError, match="above this server's limit of 60 hits"):
                r.search_batch("n", [good[0]] * 7, k=10, record_access=True)
            assert r.search_batch("n", [], record_access=True) == []  # as TierStore.search_batch answers
            with pytest.raises(InvalidVectorError, match="queries"):
                r.search_batch("n", 5, record_access=True)  # type: ignore[arg-type]
    assert state(store) == before


# ---------------------------------------------------------------- one write per response


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_a_response_head_goes_out_with_its_body():
    loop = asyncio.new_event_loop()
    try:
        inner = Recorder()
        t = OneWrite(inner, loop)
        head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
        t.write(head)
        assert inner.writes == []  # held
        t.write(b"{}")
        assert inner.writes == [head + b"{}"]  # one write, in order
        t.write(b"HTTP/1.1 204 No Content\r\n\r\n")  # no body follows: out at the end of the loop's turn
        assert len(inner.writes) == 1
        loop.run_until_complete(asyncio.sleep(0))
        assert inner.writes[-1] == b"HTTP/1.1 204 No Content\r\n\r\n"
        t.write(b"5\r\nhello\r\n")  # anything else (a chunk) passes through at once
        assert inner.writes[-1] == b"5\r\nhello\r\n"
        t.write(head)
        t.close()  # a held head is written before the connection closes
        assert inner.writes[-1] == head and inner.closed
        assert t.is_closing()  # the rest is the transport's
        loop.run_until_complete(asyncio.sleep(0))
        assert inner.writes.count(head) == 1  # and not written twice
    finally:
        loop.close()

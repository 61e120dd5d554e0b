"""A hostile client against a live server (issue 26): every route and field
with the wrong JSON type, counts and sizes past every bound, broken Unicode,
non-finite times, oversized and chunked bodies (also to /mcp), idle
connections, a token file others can read, long values echoed in errors,
long text for a windowed embedder, and the MCP tools read as an agent would.

Each attack must be refused with a 4xx that says why, change nothing, and
cost the server a bounded amount of work: checked structurally (the server
still answers /health while it refuses; the number of entries a check
reads; the thread a large body is parsed on), never by wall-clock asserts."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import numpy as np
import pytest
import urllib3
from mcp import Client
from server_process import ServerProcess
from test_mcp import error_text, result

from tierstore import ManualClock, TierStore
from tierstore.errors import InvalidInputError
from tierstore.remote import api_schema
from tierstore.remote.api_schema import (
    ROUTES,
    ColdChoice,
    Count,
    Flag,
    Items,
    Number,
    Obj,
    Queries,
    Strings,
    Text,
    Vector,
)
from tierstore.remote.client import RemoteStore
from tierstore.remote.server import app as server_app
from tierstore.remote.server.app import Limits, build_app
from tierstore.remote.server.auth import Principal, TokenTable, token_file_exposure
from tierstore.remote.server.mcp_tools import build_mcp
from tierstore.rules import validation
from tierstore.testing.embedders import DIM, T0, hash_embed
from tierstore.testing.live_server import ThreadedServer

ADMIN = "admin-token-0123456789abcdef"
LIMITS = Limits(
    max_body_bytes=2_000_000,
    max_k=50,
    max_batch=20,
    max_restore=10,
    max_sweep_items=100,
    max_sweep_seconds=2.0,
    max_page=4,
    max_content_chars=5_000,
)


def windowed_embed(texts: list[str]) -> np.ndarray:
    """hash_embed with a 16-token window and a tokenizer (a word a token, plus two): the calls are counted."""
    windowed_embed.calls += len(texts)  # type: ignore[attr-defined]
    return hash_embed(texts)


windowed_embed.dim = DIM  # type: ignore[attr-defined]
windowed_embed.name = "windowed-hash-32"  # type: ignore[attr-defined]
windowed_embed.max_tokens = 16  # type: ignore[attr-defined]
windowed_embed.count_tokens = lambda text: len(text.split()) + 2  # type: ignore[attr-defined]
windowed_embed.calls = 0  # type: ignore[attr-defined]


def _store(path: Any) -> TierStore:
    s = TierStore.open(path, embedder=hash_embed, clock=ManualClock(T0))
    s.add("n", "hello world", id="m1", tags=["a"], key="home")
    return s


def _serve(store: TierStore) -> ThreadedServer:
    tokens = TokenTable([(ADMIN, Principal("admin"))])
    return ThreadedServer(build_app(store, tokens=tokens, limits=LIMITS, mcp=build_mcp(store, limits=LIMITS)))


@pytest.fixture
def store(tmp_path) -> Iterator[TierStore]:
    with _store(tmp_path / "store") as s:
        yield s


@pytest.fixture
def server(store) -> Iterator[str]:
    with _serve(store) as url:
        yield url


@pytest.fixture(scope="module")
def refusing(tmp_path_factory) -> Iterator[tuple[str, TierStore]]:
    """One server for the attacks that must all be refused (each asserts that nothing changed)."""
    with _store(tmp_path_factory.mktemp("refusing") / "store") as s, _serve(s) as url:
        yield url, s


_pool = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=10, read=60))


def call(
    url: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    hdrs = {"content-type": "application/json", "authorization": f"Bearer {ADMIN}", **(headers or {})}
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    resp = _pool.request(method, url + path, body=data, headers=hdrs)
    try:
        return resp.status, json.loads(resp.data)
    except ValueError:
        return resp.status, resp.data.decode(errors="replace")


def state(store: TierStore) -> Any:
    """What an attack must not change: every memory's visible state, the context, the events."""
    store.flush()
    memories = sorted(
        (m.id, m.content, m.access_count, m.pinned, m.confidence, m.tier, m.tags) for m in store.memories("n")
    )
    events = store.engine.catalog.query("SELECT count(*) FROM events")[0][0]
    return memories, store.get_context("n"), store.namespaces(), events


# ---------------------------------------------------------------- every field of every route, wrong types

VALID: dict[str, dict[str, Any]] = {
    "/v1/add": {"ns": "n", "content": "a new memory", "embedding": [0.5] * DIM},
    "/v1/add_batch": {"ns": "n", "items": [{"content": "batch one", "embedding": [0.5] * DIM}]},
    "/v1/upsert_batch": {"ns": "n", "items": [{"content": "replaced", "embedding": [0.5] * DIM, "id": "m1"}]},
    "/v1/search": {"ns": "n", "query": "hello", "record_access": False},
    "/v1/search_batch": {"ns": "n", "queries": [[0.5] * DIM, [0.25] * DIM], "record_access": False},
    "/v1/get": {"ns": "n", "id": "m1"},
    "/v1/get_by_key": {"ns": "n", "key": "home"},
    "/v1/memories": {"ns": "n"},
    "/v1/touch": {"ns": "n", "ids": ["m1"]},
    "/v1/feedback": {"ns": "n", "id": "m1", "positive": True},
    "/v1/pin": {"ns": "n", "id": "m1"},
    "/v1/delete": {"ns": "n", "id": "m1"},
    "/v1/set_context": {"ns": "n", "tags": ["work"]},
    "/v1/get_context": {"ns": "n"},
    "/v1/restore": {"ns": "n", "text": "hello"},
    "/v1/sweep": {"dry_run": True},
}
assert set(VALID) == set(ROUTES)


def wrong_values(kind: Any) -> list[Any]:
    """Values of the wrong JSON type (or past a bound) for a field of ``kind``."""
    if isinstance(kind, Flag):
        return ["no", 1, 0, "true", [], {}]
    if isinstance(kind, Count):
        return ["5", 5.5, True, [5], 10**6]
    if isinstance(kind, Number):
        return ["0.5", True, [0.5], {"x": 1}]
    if isinstance(kind, Strings):
        return [{"a": "b"}, [1], [["x"]], ["x"] * 10_000, [True]] + ([] if kind.one_ok else ["x"])
    if isinstance(kind, Text):
        return [5, True, ["x"], {"a": 1}, "x" * 200_000]
    if isinstance(kind, Vector):
        return [True, 5, [0.5] * 70_000]
    if isinstance(kind, ColdChoice):
        return ["sometimes", 1, ["auto"]]
    if isinstance(kind, Obj):
        return [["a"], "x", 5, True]
    if isinstance(kind, Queries):  # not a list, too many, a text, a bad vector inside (empty is [] answered: [])
        return ["hello", {"a": 1}, [[0.5] * DIM] * 21, ["hello"], [[0.5] * 70_000], [True]]
    if isinstance(kind, Items):
        return [{"content": "x"}, "x", [1], [[]], [{"content": "x", "embedding": [0.5] * DIM}] * 21]
    raise AssertionError(f"no wrong values for {kind!r}")


CASES = [(path, f.name, bad) for path, route in ROUTES.items() for f in route.fields for bad in wrong_values(f.kind)]
ITEM_CASES = [(f.name, bad) for f in api_schema.ITEM.fields for bad in wrong_values(f.kind)]


@pytest.mark.parametrize("path,name,bad", CASES, ids=[f"{p[4:]}-{n}-{i}" for i, (p, n, _) in enumerate(CASES)])
def test_every_field_of_every_route_refuses_the_wrong_type(refusing, path, name, bad):
    server, store = refusing
    before = state(store)
    status, body = call(server, path, {**VALID[path], name: bad})
    assert status == 400, (status, body)
    message = body["error"]["message"]
    assert name in message or "items" in message, message  # it names the field
    assert len(message) < 600  # and never echoes a long value back
    assert state(store) == before


@pytest.mark.parametrize("name,bad", ITEM_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ITEM_CASES)])
def test_every_field_of_a_batch_item_refuses_the_wrong_type(refusing, name, bad):
    server, store = refusing
    before = state(store)
    item = {**VALID["/v1/add_batch"]["items"][0], name: bad}
    for path in ("/v1/add_batch", "/v1/upsert_batch"):
        status, body = call(server, path, {"ns": "n", "items": [item]})
        assert status == 400 and "items[0]" in body["error"]["message"], body
    assert state(store) == before


def test_the_valid_bodies_are_accepted(server, store):
    """The baseline the attacks above change one field of."""
    for path in ROUTES:
        status, body = call(server, path, VALID[path])
        assert status == 200, (path, body)


def test_booleans_are_booleans_not_truthy_values(server, store):
    before = state(store)
    for value in ("no", "false", 0, 1):
        status, body = call(server, "/v1/search", {"ns": "n", "query": "hello", "record_access": value})
        assert status == 400 and "record_access must be true or false" in body["error"]["message"]
    assert state(store) == before and store.get("n", "m1").access_count == 0  # "no" recorded no access
    status, body = call(server, "/v1/search", {"ns": "n", "query": "hello", "memory_types": True})
    assert status == 400 and "memory_types must be an array of strings" in body["error"]["message"]  # not a 500
    status, body = call(server, "/v1/set_context", {"ns": "n", "tags": {"a": 1}})
    assert status == 400 and store.get_context("n") == ()  # an object is not iterated as a list of its keys
    status, body = call(server, "/v1/touch", {"ns": "n", "ids": {"m1": 1}})
    assert status == 400 and store.get("n", "m1").access_count == 0
    assert call(server, "/v1/search", {"ns": "n", "query": "hello", "record_access": None})[0] == 200  # null: default
    for kwargs in (dict(record_access="no"), dict(include_warm=0), dict(memory_types=True)):  # the library too
        with pytest.raises(InvalidInputError):
            store.search("n", "hello", **kwargs)
        with pytest.raises(InvalidInputError):
            store.search_in_memory("n", "hello", **kwargs)
    assert store.get("n", "m1").access_count == 1  # the one search that left record_access to the policy


# ---------------------------------------------------------------- counts: refused before per-entry work


def test_a_huge_tag_list_is_refused_by_its_count_while_the_server_answers(server, store):
    before = state(store)
    results: list[Any] = []
    attacks = [
        threading.Thread(
            target=lambda: results.append(
                call(
                    server,
                    "/v1/search",
                    {"ns": "n", "query": "hello", "context_tags": [f"t{i}" for i in range(25_000)]},
                )
            )
        )
        for _ in range(4)
    ]
    for t in attacks:
        t.start()
    health = call(server, "/health", method="GET")  # answered while four 25 000-tag searches are refused
    for t in attacks:
        t.join(timeout=120)
    assert health == (200, {"status": "ok"})
    assert [r[0] for r in results] == [400] * 4
    assert "25000 entries, more than the limit of 1024" in results[0][1]["error"]["message"]
    status, body = call(server, "/v1/add", {"ns": "n", "content": "x", "tags": ["same"] * 25_000})
    assert status == 400 and "25000 entries" in body["error"]["message"]
    assert state(store) == before


class Counting:
    """An iterable that counts the entries read from it."""

    def __init__(self, values: list[Any]) -> None:
        self.values, self.read = values, 0

    def __iter__(self) -> Iterator[Any]:
        for v in self.values:
            self.read += 1
            yield v


def test_the_library_counts_before_it_looks_at_entries(store):
    tags = Counting(["t"] * 100_000)
    with pytest.raises(InvalidInputError, match="more than the limit of 1024"):
        validation.check_tags(tags, 64)
    assert tags.read == validation.TAGS_MAX_LISTED + 1  # one past the limit, no further
    ids = Counting(["m1"] * 100_000)
    with pytest.raises(InvalidInputError, match="supersedes"):
        validation.check_supersedes(ids)
    assert ids.read == validation.SUPERSEDES_MAX + 1
    assert validation.check_tags(["a", "b", "a"] * 300, 64) == ("a", "b")  # duplicates dropped, order kept
    before = state(store)
    with pytest.raises(InvalidInputError, match="more than the limit of 1024"):
        store.search("n", "hello", context_tags=[f"t{i}" for i in range(25_000)])
    assert state(store) == before


def test_supersedes_is_bounded_and_each_id_marked_once(server, store):
    before = state(store)
    status, body = call(server, "/v1/add", {"ns": "n", "content": "newer", "supersedes": ["m1"] * 6000})
    assert status == 400 and "6000 entries, more than the limit of 100" in body["error"]["message"]
    with pytest.raises(InvalidInputError, match="supersedes: 6000 entries"):
        store.add("n", "newer", supersedes=["m1"] * 6000)  # the library too
    assert state(store) == before
    events = store.engine.catalog.query("SELECT count(*) FROM events WHERE kind = 'supersede'")[0][0]
    status, body = call(server, "/v1/add", {"ns": "n", "content": "Henry moved", "supersedes": ["m1"] * 100})
    assert status == 200
    after = store.engine.catalog.query("SELECT count(*) FROM events WHERE kind = 'supersede'")[0][0]
    assert after - events == 1  # one id named 100 times: one mark, one event
    assert store.get("n", "m1").superseded_by == body["id"]


def test_a_large_search_body_is_parsed_off_the_event_loop(server, store, monkeypatch):
    threads: list[str] = []
    real = server_app._parse

    def parse(raw: bytes, path: str, limits: Any, packed: bool = False) -> Any:
        threads.append(threading.current_thread().name)
        return real(raw, path, limits, packed)

    monkeypatch.setattr(server_app, "_parse", parse)
    small = {"ns": "n", "query": [0.5] * DIM, "record_access": False}
    big = {**small, "context_tags": [f"tag-{i:07d}" * 3 for i in range(1000)]}  # ~40 KB, 1000 tags: allowed
    assert len(json.dumps(small)) < server_app.LOOP_PARSE_MAX < len(json.dumps(big))
    assert call(server, "/v1/search", small)[0] == 200
    assert call(server, "/v1/search", big)[0] == 200
    assert threads[0] == "MainThread" or not threads[0].startswith("tierstore-call")  # the loop's thread
    assert threads[-1].startswith("tierstore-call")  # a worker's


# ---------------------------------------------------------------- encodings, times


SURROGATE = "\\ud800"  # as JSON escapes it: valid JSON, not valid Unicode text


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/add", '{"ns": "n", "content": "bad %s text"}'),
        ("/v1/add", '{"ns": "n", "content": "fine", "embedding": "bad %s text"}'),
        ("/v1/add_batch", '{"ns": "n", "items": [{"content": "bad %s text"}]}'),
        ("/v1/upsert_batch", '{"ns": "n", "items": [{"content": "bad %s text", "id": "m1"}]}'),
        ("/v1/search", '{"ns": "n", "query": "bad %s text"}'),
        ("/v1/restore", '{"ns": "n", "query": "bad %s text"}'),
        ("/v1/restore", '{"ns": "n", "text": "bad %s text"}'),
        ("/v1/set_context", '{"ns": "n", "tags": ["bad %s"]}'),
        ("/v1/add", '{"ns": "n", "content": "x", "metadata": {"k": "bad %s"}}'),
    ],
)
def test_lone_surrogates_are_a_400_before_the_embedder(server, store, path, body, monkeypatch):
    before = state(store)
    calls: list[Any] = []
    monkeypatch.setattr(store.embedder, "_embed_batch", lambda texts: calls.append(texts) or hash_embed(texts))
    status, out = call(server, path, raw=(body % SURROGATE).encode())
    assert status == 400 and "not valid Unicode" in out["error"]["message"], out
    assert calls == [] and state(store) == before


@pytest.mark.parametrize("value", ["NaN", "inf", "-inf", "1e999", "Infinity", " nan "])
@pytest.mark.parametrize("key", ["created_after", "created_before", "archived_after"])
def test_time_filters_refuse_non_finite_values(server, store, key, value):
    status, body = call(server, "/v1/restore", {"ns": "n", "where": {key: value}})
    assert status == 400 and "finite" in body["error"]["message"] or "not a time" in body["error"]["message"], body
    raw = b'{"ns": "n", "where": {"%s": NaN}}' % key.encode()  # JSON's NaN literal, as Python writes it
    status, body = call(server, "/v1/restore", raw=raw)
    assert status == 400


# ---------------------------------------------------------------- sizes


def test_errors_cut_long_values(server, store):
    status, body = call(server, "/v1/get", {"ns": "n" * 500_000, "id": "m1"})
    assert status == 400 and body["error"]["type"] == "InvalidNamespaceError"
    message = body["error"]["message"]
    assert len(message) < 400 and "500000" in message, message
    with pytest.raises(InvalidInputError) as info:
        store.get("n" * 1_000_000, "m1")  # the library's message is cut too
    assert len(str(info.value)) < 400 and "1000000 characters" in str(info.value)
    with pytest.raises(InvalidInputError) as info:
        store.add("n", "x", confidence="9" * 1_000_000)
    assert len(str(info.value)) < 400


def test_a_chunked_body_too_large_for_mcp_is_a_413_like_every_route(server):
    def chunks() -> Iterator[bytes]:
        yield (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_memory", "arguments": '
            b'{"namespace": "n", "content": "'
        )
        for _ in range(300):
            yield b"y" * 10_000  # 3 MB, over the 2 MB limit, without a Content-Length
        yield b'"}}}'

    for path in ("/mcp", "/v1/add"):
        resp = _pool.urlopen(
            "POST",
            server + path,
            body=chunks(),
            chunked=True,
            headers={
                "authorization": f"Bearer {ADMIN}",
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
            },
        )
        assert resp.status == 413, (path, resp.status, resp.data[:200])
        assert json.loads(resp.data)["error"]["type"] == "InvalidInputError"


def test_content_is_bounded_before_the_embedder(server, store, monkeypatch):
    calls: list[Any] = []
    monkeypatch.setattr(store.embedder, "_embed_batch", lambda texts: calls.append(texts) or hash_embed(texts))
    before = state(store)
    status, body = call(server, "/v1/add", {"ns": "n", "content": "word " * 1001})  # 5005 > 5000 characters
    assert status == 400 and "--max-content-chars" in body["error"]["message"]
    status, body = call(server, "/v1/search", {"ns": "n", "query": "word " * 1001})
    assert status == 400 and "split it" in body["error"]["message"]
    with pytest.raises(InvalidInputError, match="Settings.max_content_chars"):
        store.add("n", "x" * (validation.CONTENT_MAX_CHARS + 1))  # the store's own limit
    assert calls == [] and state(store) == before


def test_text_longer_than_the_embedders_window_is_refused_saying_why(tmp_path):
    windowed_embed.calls = 0  # type: ignore[attr-defined]
    with TierStore.open(tmp_path / "w", embedder=windowed_embed, clock=ManualClock(T0)) as store:
        assert store.embedder.max_tokens == 16
        fits = " ".join(f"w{i}" for i in range(14))  # 14 words + 2 = 16 tokens: read whole
        mid = store.add("n", fits)
        assert windowed_embed.calls == 1  # type: ignore[attr-defined]
        for text in (fits + " w14", "word " * 5000):
            with pytest.raises(InvalidInputError, match="Split it into several memories, or pass an embedding"):
                store.add("n", text)
            with pytest.raises(InvalidInputError, match="the embedder 'windowed-hash-32' reads"):
                store.search("n", text)
        assert windowed_embed.calls == 1  # type: ignore[attr-defined]  # nothing refused reached the model
        long_text = "word " * 5000
        other = store.add("n", long_text, np.ones(DIM, np.float32))  # with a vector the text may be long
        assert {m.id for m in store.memories("n")} == {mid, other}
        with pytest.raises(InvalidInputError, match="at least 5002 tokens"):  # words counted, never tokenized
            store.add("n", long_text)


# ---------------------------------------------------------------- the process: headers, token file, memory


@pytest.mark.slow
def test_the_served_process_times_out_idle_heads_warns_about_the_token_file_and_stays_small(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(ADMIN + "\n")
    os.chmod(tokens, 0o644)
    assert "chmod 600" in token_file_exposure(tokens)
    os.chmod(tokens, 0o600)
    assert token_file_exposure(tokens) is None
    os.chmod(tokens, 0o640)
    server = ServerProcess(
        tmp_path / "s",
        "--token-file",
        str(tokens),
        "--header-timeout",
        "1",
        "--embedder",
        "tierstore.testing.embedders:hash_embed",
        "--no-migrator",
        cwd=tmp_path,
    )
    try:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        silent = socket.create_connection((host, int(port)), timeout=60)
        half = socket.create_connection((host, int(port)), timeout=60)
        half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # half a head, then nothing
        assert silent.recv(1) == b"" and half.recv(1) == b""  # both closed by the server (else: a 60 s timeout)
        silent.close()
        half.close()
        kept = socket.create_connection((host, int(port)), timeout=60)
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _health_response(kept).startswith(b"HTTP/1.1 200")
        time.sleep(2.5)  # idle between requests, longer than the header timeout: keep-alive still holds
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _health_response(kept).startswith(b"HTTP/1.1 200")
        kept.close()

        remote = RemoteStore(server.url, token=ADMIN)
        remote.add("n", "warm up the embedder and the catalog")
        rss_before = _rss_kib(server.proc.pid)
        big = json.dumps({"ns": "n", "content": "x " * 7_500_000}).encode()  # 15 MB, under the 16 MiB body limit
        results: list[Any] = []
        worker = threading.Thread(target=lambda: results.extend(call(server.url, "/v1/add", raw=big) for _ in range(3)))
        worker.start()
        health = [call(server.url, "/health", method="GET")[0] for _ in range(5)]
        worker.join(timeout=300)
        assert health == [200] * 5 and [r[0] for r in results] == [400] * 3
        assert "content is 15000000 characters" in results[0][1]["error"]["message"]
        grown_mib = (_rss_kib(server.proc.pid) - rss_before) / 1024
        assert grown_mib < 200, grown_mib  # before: +1.5 GB for good (a 15 MB text through the model)
        assert remote.search("n", "warm up", k=1)[0].content.startswith("warm up")
        remote.close()
    finally:
        server.kill()
    assert "readable or writable by other users (mode 640)" in server.proc.stderr.read()


def _health_response(sock: socket.socket) -> bytes:
    """One whole response to GET /health (its body ends the response)."""
    data = b""
    while not data.endswith(b'{"status":"ok"}'):
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    return data


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


# ---------------------------------------------------------------- MCP, read as an agent would


def test_mcp_tools_describe_every_parameter_and_state_their_limits(store):
    async def session() -> dict[str, Any]:
        async with Client(build_mcp(store, limits=LIMITS)) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    tools = anyio.run(session)
    assert {
        "add_memory",
        "search_memories",
        "get_memory",
        "list_memories",
        "update_memory",
        "delete_memory",
        "restore_memories",
    } <= set(tools)
    for tool in tools.values():
        assert tool.description and "\n    " not in tool.description, tool.name  # dedented
        for name, prop in tool.input_schema["properties"].items():
            assert prop.get("description"), (tool.name, name)
    search = tools["search_memories"].input_schema["properties"]
    assert search["limit"]["maximum"] == 4 and search["limit"]["minimum"] == 1  # min(100, max_k, max_page)
    assert "record_access" in search and "include_archived" in search
    assert "one per user" in search["namespace"]["description"]
    assert "ai_inference" in tools["add_memory"].input_schema["properties"]["source"]["description"]


def test_mcp_errors_speak_the_tools_words_and_types_are_strict(store):
    async def session() -> list[Any]:
        async with Client(build_mcp(store)) as c:
            return [
                await c.call_tool("restore_memories", {"namespace": "n"}),
                await c.call_tool("search_memories", {"namespace": "n", "query": "x", "limit": 101}),
                await c.call_tool("search_memories", {"namespace": "n", "query": "x", "limit": 0}),
                await c.call_tool("search_memories", {"namespace": "n", "query": "x", "record_access": "no"}),
                await c.call_tool("add_memory", {"namespace": "n", "content": "x", "pinned": "yes"}),
                await c.call_tool("add_memory", {"namespace": "n", "content": "x", "tags": {"a": 1}}),
                await c.call_tool("add_memory", {"namespace": "n", "content": "bad \ud800"}),
                await c.call_tool("get_memory", {"namespace": "n" * 10_000, "memory_id": "m1"}),
            ]

    before = state(store)
    restore, over, zero, truthy, pinned, tags, surrogate, long_ns = anyio.run(session)
    assert "restore_memories needs query, text or memory_ids" in error_text(restore)
    assert "limit" in error_text(over) and "less than or equal to 100" in error_text(over)
    assert "limit" in error_text(zero) and "k must be" not in error_text(zero)
    assert "record_access" in error_text(truthy)
    assert "pinned" in error_text(pinned) and "tags" in error_text(tags)
    assert "content" in error_text(surrogate) and "unicode" in error_text(surrogate).lower()
    assert "namespace" in error_text(long_ns) and len(error_text(long_ns)) < 1000
    assert state(store) == before


def test_mcp_does_what_the_published_memory_servers_do(store):
    clock = store.clock

    async def session() -> None:
        async with Client(build_mcp(store)) as c:
            looked = result(
                await c.call_tool("search_memories", {"namespace": "n", "query": "hello world", "record_access": False})
            )["results"]
            assert looked[0]["id"] == "m1" and store.get("n", "m1").access_count == 0  # looking is not using
            chat = result(
                await c.call_tool(
                    "add_memory", {"namespace": "n", "content": "we talked about rain", "memory_type": "conversation"}
                )
            )["id"]
            got = result(await c.call_tool("get_memory", {"namespace": "n", "memory_id": chat}))
            assert got["tier"] == "hot" and T0 < got["expires_at"] <= T0 + 3600  # a conversation: an hour at most
            assert got["superseded_by"] is None and got["source"] == "user_declaration"
            clock.advance(2 * 3600)
            assert store.sweep().archived == 1
            cold = result(
                await c.call_tool(
                    "search_memories", {"namespace": "n", "query": "rain talked", "include_archived": True}
                )
            )["results"]
            assert [(m["id"], m["tier"]) for m in cold][:1] == [(chat, "cold")]  # archived results included
            pages, cursor = [], None
            while True:
                page = result(await c.call_tool("list_memories", {"namespace": "n", "limit": 1, "cursor": cursor}))
                pages.append([m["id"] for m in page["memories"]])
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert pages == [["m1"], [chat]]
            edited = result(
                await c.call_tool(
                    "update_memory",
                    {"namespace": "n", "memory_id": "m1", "content": "hello there, world", "pinned": True},
                )
            )
            assert edited["content"] == "hello there, world" and edited["pinned"] and edited["tags"] == ["a"]
            assert result(await c.call_tool("delete_memory", {"namespace": "n", "memory_id": chat}))["deleted"]

    anyio.run(session)
    assert store.get("n", "m1").content == "hello there, world" and [m.id for m in store.memories("n")] == ["m1"]

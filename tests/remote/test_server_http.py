"""The HTTP API as a client that is not RemoteStore sees it: wire forms, bad
input, auth and tenants, limits, errors that leak nothing, OpenAPI."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import urllib3

from tierstore import ManualClock, TierStore
from tierstore.errors import AuthError, CorruptDataError, InvalidInputError, RemoteError, StoreClosedError
from tierstore.policy import Policy
from tierstore.remote.client import RemoteStore
from tierstore.remote.server.app import Limits, build_app
from tierstore.remote.server.auth import Principal, TokenTable, is_loopback
from tierstore.remote.server.schema import GET_ROUTES, POST_ROUTES
from tierstore.rules.validation import check_vector
from tierstore.testing.embedders import DIM, T0, hash_embed
from tierstore.testing.live_server import ThreadedServer

ADMIN = "admin-token-0123456789abcdef"
ACME = "acme-token-0123456789abcdef0"


@pytest.fixture
def store(tmp_path) -> Iterator[TierStore]:
    with TierStore.open(tmp_path / "store", embedder=hash_embed, clock=ManualClock(T0)) as s:
        yield s


@pytest.fixture
def server(store) -> Iterator[str]:
    tokens = TokenTable([(ADMIN, Principal("admin")), (ACME, Principal("acme", ("acme.", "acme-")))])
    limits = Limits(
        max_body_bytes=200_000,
        max_k=50,
        max_batch=20,
        max_restore=10,
        max_sweep_items=100,
        max_sweep_seconds=2.0,
        max_page=4,
    )
    with ThreadedServer(build_app(store, tokens=tokens, limits=limits)) as url:
        yield url


def call(
    url: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = ADMIN,
    raw: bytes | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    hdrs = {"content-type": "application/json", **(headers or {})}
    if token is not None:
        hdrs["authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    resp = urllib3.request(method, url + path, body=data, headers=hdrs, retries=False)
    try:
        return resp.status, json.loads(resp.data)
    except ValueError:
        return resp.status, resp.data.decode()


def b64(v: np.ndarray) -> dict[str, str]:
    return {"base64": base64.b64encode(np.asarray(v, "<f4").tobytes()).decode()}


def unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


# ---------------------------------------------------------------- wire forms


def test_vectors_as_json_arrays_base64_or_text(server, store):
    v = unit(1)
    s, a = call(server, "/v1/add", {"ns": "n", "content": "as list", "embedding": v.tolist(), "id": "a"})
    assert (s, a) == (200, {"id": "a"})
    s, _ = call(server, "/v1/add", {"ns": "n", "content": "as base64", "embedding": b64(v), "id": "b"})
    s2, _ = call(server, "/v1/add", {"ns": "n", "content": "lives in tokyo", "id": "c"})  # text: the embedder
    assert s == s2 == 200
    np.testing.assert_array_equal(store.get("n", "b").embedding, check_vector(v, DIM))  # as a local add stores it
    np.testing.assert_allclose(store.get("n", "a").embedding, v, rtol=1e-6)
    s, body = call(server, "/v1/search", {"ns": "n", "query": b64(v), "k": 2, "record_access": False})
    assert s == 200 and {h["id"] for h in body["hits"]} == {"a", "b"}
    hit = body["hits"][0]
    assert set(hit) == {"id", "score", "memory", "explain"} and hit["explain"] is None
    assert hit["memory"]["embedding"] is None and hit["memory"]["tier"] == "hot"
    s, body = call(server, "/v1/search", {"ns": "n", "query": "where is tokyo", "k": 1})
    assert body["hits"][0]["id"] == "c"
    s, body = call(server, "/v1/get", {"ns": "n", "id": "b"})
    got = np.frombuffer(base64.b64decode(body["memory"]["embedding"]["base64"]), "<f4")
    np.testing.assert_array_equal(got, store.get("n", "b").embedding)  # exact bits both ways


@pytest.mark.parametrize(
    "raw,fragment",
    [
        (b"{bad json", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"ns": "n", "content": "x", "colour": "red"}', "unknown field"),
        (b'{"ns": "n"}', "missing field"),
        (b'{"ns": "n", "content": "x", "embedding": {"base64": "!!!"}}', "base64"),
        (b'{"ns": "n", "content": "x", "embedding": {"base64": "AAA="}}', "float32"),
        (b'{"ns": "n", "content": "x", "embedding": {"b64": "AAAA"}}', "base64"),
        (b'{"ns": "n", "content": "x", "embedding": [1, 2, 3]}', "dimension"),
        (b'{"ns": "n", "content": "x", "embedding": [NaN' + b", 1" * (DIM - 1) + b"]}", "NaN"),
        (b'{"ns": "n", "content": "x", "confidence": 1e999}', "confidence"),
        (b'{"ns": "n", "content": "x", "confidence": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b'{"ns": "../x", "content": "x"}', "namespace"),
    ],
)
def test_malformed_requests_get_a_4xx_that_says_why_and_change_nothing(server, store, raw, fragment):
    status, body = call(server, "/v1/add", raw=raw)
    assert 400 <= status < 500
    assert fragment in body["error"]["message"], body
    assert store.namespaces() == [] and store.stats(lifecycle=False).total == 0


def test_huge_bodies_are_refused_before_they_are_read(server, store):
    big = json.dumps({"ns": "n", "content": "x" * 300_000}).encode()
    status, body = call(server, "/v1/add", raw=big)
    assert status == 413 and "limit" in body["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"ns": "n", "content": "'
        for _ in range(40):
            yield b"y" * 10_000
        yield b'"}'

    resp = urllib3.PoolManager().urlopen(
        "POST",
        server + "/v1/add",
        body=chunks(),
        chunked=True,
        headers={"authorization": f"Bearer {ADMIN}"},
        retries=False,
    )
    assert resp.status == 413
    assert store.stats(lifecycle=False).total == 0


def test_limits_on_k_batches_and_work(server, store):
    v = unit(2).tolist()
    call(server, "/v1/add", {"ns": "n", "content": "x", "embedding": v})
    status, body = call(server, "/v1/search", {"ns": "n", "query": v, "k": 51})
    assert status == 400 and "limit of 50" in body["error"]["message"] and "--max-k" in body["error"]["message"]
    assert call(server, "/v1/search", {"ns": "n", "query": v, "k": 50})[0] == 200
    items = [{"content": f"m{i}", "embedding": v} for i in range(21)]
    status, body = call(server, "/v1/add_batch", {"ns": "n", "items": items})
    assert status == 400 and "21 items" in body["error"]["message"]
    assert call(server, "/v1/touch", {"ns": "n", "ids": ["a"] * 21})[1]["error"]["type"] == "InvalidInputError"
    assert call(server, "/v1/restore", {"ns": "n", "text": "x", "limit": 11})[0] == 400
    assert call(server, "/v1/sweep", {"max_items": 101})[0] == 400
    status, body = call(server, "/v1/sweep", {})
    assert status == 200 and body["report"]["examined"] == 0
    assert store.stats(lifecycle=False).total == 1


def cursor(*value: Any) -> str:
    """A page cursor as a client could forge one: unpadded base64url of JSON."""
    return base64.urlsafe_b64encode(json.dumps(list(value)).encode()).rstrip(b"=").decode()


def test_memories_come_in_pages_bounded_by_the_server(server, store):
    ids = store.add_batch("n", [{"content": f"m{i}", "embedding": unit(20 + i)} for i in range(6)])
    seen, after, pages = [], None, 0
    while True:
        status, body = call(server, "/v1/memories", {"ns": "n", "after": after})  # no limit: --max-page
        assert status == 200 and set(body) == {"memories", "next"}
        assert len(body["memories"]) <= 4 and all(m["embedding"] is None for m in body["memories"])
        seen += [m["id"] for m in body["memories"]]
        pages, after = pages + 1, body["next"]
        if after is None:
            break
    assert (seen, pages) == (ids, 2)
    status, body = call(server, "/v1/memories", {"ns": "n", "limit": 1, "with_embedding": True})
    got = np.frombuffer(base64.b64decode(body["memories"][0]["embedding"]["base64"]), "<f4")
    np.testing.assert_array_equal(got, store.get("n", ids[0]).embedding)
    assert call(server, "/v1/memories", {"ns": "n", "with_embedding": None})[0] == 200  # null: the default
    status, body = call(server, "/v1/memories", {"ns": "n", "limit": 5})
    assert status == 400 and "limit=5 is above this server's limit of 4 (--max-page)" in body["error"]["message"]


@pytest.mark.parametrize(
    "fields,fragment",
    [
        ({"after": "not a cursor!"}, "is not a cursor"),
        ({"after": 12}, "after must be a string, got an integer 12"),
        ({"after": cursor("n", 10**20)}, "is not a cursor"),  # valid JSON, a rid SQLite cannot hold
        ({"after": cursor("n", -1)}, "is not a cursor"),
        ({"after": cursor("other", 1)}, "another namespace"),
        ({"after": "A" * 5000}, "5000 characters"),
        ({"limit": 0}, "limit must be a positive integer"),
        ({"limit": "2"}, "limit must be a positive integer"),
        ({"with_embedding": "yes"}, "with_embedding must be true or false (a JSON boolean), got a string 'yes'"),
        ({"ns": "../n"}, "namespace"),
    ],
)
def test_bad_memories_requests_get_a_400_that_says_why(server, store, fields, fragment):
    mid = store.add("n", "x", unit(30))
    store.touch("n", [mid])
    status, body = call(server, "/v1/memories", {"ns": "n", **fields})
    assert status == 400 and fragment in body["error"]["message"], body
    assert body["error"]["type"] in ("InvalidInputError", "InvalidNamespaceError")
    assert store.get("n", mid).access_count == 1 and store.stats(lifecycle=False).total == 1


def test_a_listing_over_pages_holds_a_memory_replaced_meanwhile_once(server, store):
    ids = store.add_batch("n", [{"content": f"v1 {i}", "embedding": unit(40 + i), "id": f"d{i}"} for i in range(6)])
    remote = RemoteStore(server, token=ADMIN)
    real_post, calls = remote._post, []

    def post(path: str, body: dict[str, Any]) -> Any:  # between the first and the second page: replace d0
        calls.append(body.get("after"))
        if len(calls) == 2:
            store.upsert_batch("n", [{"content": "v2 0", "embedding": unit(50), "id": "d0"}])
        return real_post(path, body)

    remote._post = post  # type: ignore[method-assign]
    listed = remote.memories("n")
    assert len(calls) == 2 and calls[0] is None  # two pages of at most 4
    assert [m.id for m in listed] == ids[1:] + ["d0"] == [m.id for m in store.memories("n")]
    assert listed[-1].content == "v2 0"  # its new version, where that version is


def test_info_says_what_the_store_is_and_the_client_keeps_it(server, store):
    info = call(server, "/v1/info", method="GET")[1]
    assert info["store_id"] == store.store_id and len(info["store_id"]) == 32
    with RemoteStore(server, token=ACME) as tenant:  # a tenant may ask too: it names no namespace
        assert info["migrator_running"] is False and not tenant.migrator_running
    store.start_migrator(interval_s=3600)
    try:
        assert call(server, "/v1/info", method="GET")[1]["migrator_running"] is True
    finally:
        store.stop_migrator()
    assert Policy.from_dict(info["policy"]) == store.policy
    remote = RemoteStore(server, token=ACME)  # a tenant may read it too: it names no namespace
    assert (remote.dim, remote.store_id, remote.policy) == (store.dim, store.store_id, store.policy)
    assert (remote.embedder.name, remote.embedder.dim) == (store.embedder.name, store.embedder.dim)
    remote.close()
    # read once, at connection: still there with no connection, where a call to the server is refused
    assert (remote.dim, remote.store_id, remote.embedder.name) == (DIM, store.store_id, "hash_embed-32")
    with pytest.raises(StoreClosedError):
        remote.now()


# ---------------------------------------------------------------- auth and tenants


def test_tokens_are_required_and_checked(server):
    for token, why in [(None, "missing bearer token"), ("wrong-token-0123456789abcdef", "unknown bearer token")]:
        status, body = call(server, "/v1/get", {"ns": "n", "id": "x"}, token=token)
        assert status == 401 and body["error"]["type"] == "AuthError" and why in body["error"]["message"]
    status, body = call(
        server, "/v1/get", {"ns": "n", "id": "x"}, token=None, headers={"authorization": f"Basic {ADMIN}"}
    )
    assert status == 401 and "Bearer" in body["error"]["message"]
    resp = urllib3.request("GET", server + "/metrics", retries=False)
    assert resp.status == 401 and resp.headers["www-authenticate"].startswith("Bearer")
    for path in ("/health", "/ready", "/openapi.json"):  # probes and the schema need no token
        assert urllib3.request("GET", server + path, retries=False).status == 200
    with pytest.raises(AuthError, match="unknown bearer token"):
        RemoteStore(server, token="wrong-token-0123456789abcdef")


def test_a_tenant_token_reaches_only_its_namespaces(server, store):
    store.add("alice", "not acme's", unit(3), id="secret")
    acme = RemoteStore(server, token=ACME)
    mid = acme.add("acme.bob", "acme memory", unit(4))
    acme.add("acme-carol", "another", unit(5))
    assert acme.get("acme.bob", mid).content == "acme memory"
    assert acme.namespaces() == ["acme-carol", "acme.bob"]  # alice is not listed
    for fn in (
        lambda: acme.get("alice", "secret"),
        lambda: acme.search("alice", unit(3)),
        lambda: acme.memories("alice"),
        lambda: acme.memories_page("alice", limit=1),
        lambda: acme.delete("alice", "secret"),
        lambda: acme.touch("alice", ["secret"]),
        lambda: acme.add("acmex", "prefix is 'acme.' not 'acme'", unit(6)),
        lambda: acme.sweep(),
        lambda: acme.stats(),
        lambda: acme.metrics_text(),
    ):
        with pytest.raises(AuthError):
            fn()
    assert store.get("alice", "secret").access_count == 0 and store.namespaces() == ["acme-carol", "acme.bob", "alice"]
    assert [m.id for m in acme.memories("acme.bob")] == [mid]
    admin = RemoteStore(server, token=ADMIN)
    assert admin.namespaces() == ["acme-carol", "acme.bob", "alice"] and admin.stats().total == 3
    # a cursor is no key: one made for alice gets acme nothing of alice's
    store.add("alice", "a second one, so that a next page exists", unit(9))
    _, alice_cursor = admin.memories_page("alice", limit=1)
    assert alice_cursor is not None
    status, body = call(server, "/v1/memories", {"ns": "alice", "after": alice_cursor}, token=ACME)
    assert status == 403 and body["error"]["type"] == "AuthError"
    with pytest.raises(InvalidInputError, match="another namespace"):
        acme.memories_page("acme.bob", after=alice_cursor)


def test_token_file_env_and_loopback(tmp_path):
    f = tmp_path / "tokens"
    f.write_text("# operators and tenants\n" + ADMIN + "\n" + ACME + "   acme.,acme-   # tenant acme\n\n")
    table = TokenTable.load(f, env={"TIERSTORE_TOKEN": "env-token-0123456789abcdef"})
    assert len(table) == 3
    assert table.lookup(f"Bearer {ACME}").prefixes == ("acme.", "acme-")
    assert table.lookup(f"bearer {ADMIN}").prefixes is None
    assert table.lookup("Bearer env-token-0123456789abcdef").name == "TIERSTORE_TOKEN"
    with pytest.raises(AuthError):
        table.lookup(f"Bearer {ADMIN[:-1]}")
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(Exception, match="at least 16"):
        TokenTable.load(tmp_path / "short", env={})
    with pytest.raises(Exception, match="cannot read the token file"):
        TokenTable.load(tmp_path / "missing", env={})
    assert [
        is_loopback(h)
        for h in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost", "0.0.0.0", "192.168.1.4", "example.com")
    ] == [True] * 5 + [False] * 3


# ---------------------------------------------------------------- errors


def test_internal_errors_leak_no_path_or_trace(server, store, caplog, monkeypatch):
    secret_path = str(store.path / "catalog.sqlite")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise CorruptDataError(f"checksum mismatch in {secret_path} at byte 42")

    monkeypatch.setattr(store, "get", broken)
    with caplog.at_level(logging.ERROR, logger="tierstore.remote.server"):
        status, body = call(server, "/v1/get", {"ns": "n", "id": "x"})
    assert status == 500
    assert body["error"]["type"] == "CorruptDataError"
    message = body["error"]["message"]
    assert secret_path not in message and "Traceback" not in message and str(store.path) not in message
    error_id = message.rsplit(" ", 1)[-1]
    assert any(error_id in r.getMessage() and r.exc_info for r in caplog.records)  # the log has the details
    with pytest.raises(CorruptDataError) as info:
        RemoteStore(server, token=ADMIN).get("n", "x")  # the client raises the store's class
    assert secret_path not in str(info.value)

    monkeypatch.setattr(store, "get", lambda *a, **k: 1 / 0)
    status, body = call(server, "/v1/get", {"ns": "n", "id": "x"})
    assert status == 500 and body["error"]["type"] == "RemoteError" and "ZeroDivision" not in str(body)


def test_unknown_routes_and_methods_answer_json(server):
    status, body = call(server, "/v1/nothing", {})
    assert status == 404 and body["error"]["type"] == "RemoteError"
    status, body = call(server, "/v1/add", method="GET")
    assert status == 405 and "GET /v1/add" in body["error"]["message"]


def test_client_errors_when_the_server_is_gone():
    with pytest.raises(RemoteError, match="cannot reach"):
        RemoteStore("http://127.0.0.1:9", timeout=2.0)  # port 9 (discard): nothing listens


# ---------------------------------------------------------------- schema, metrics, probes


def test_openapi_describes_every_route_as_served(server):
    status, doc = call(server, "/openapi.json", method="GET", token=None)
    assert status == 200 and doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == set(POST_ROUTES) | set(GET_ROUTES)
    schemas = doc["components"]["schemas"]
    for path, (route, _, _) in POST_ROUTES.items():
        ref = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        props = schemas[ref.rsplit("/", 1)[1]]["properties"]
        assert set(props) == set(route.by_name), path  # the fields the server accepts, no more, no less
        assert all(p.get("description") for p in props.values()), path
        required = {f.name for f in route.fields if f.required}
        assert set(schemas[ref.rsplit("/", 1)[1]].get("required", [])) == required
    # the server's own limits, as it applies them
    assert schemas["SearchBody"]["properties"]["k"]["maximum"] == 50
    assert schemas["AddBatchBody"]["properties"]["items"]["maxItems"] == 20
    # and the server enforces exactly that: an unknown field is refused on every route
    for path in POST_ROUTES:
        status, body = call(server, path, {"ns": "n", "not_a_field": 1})
        assert status == 400 and "unknown field" in body["error"]["message"], path


def test_metrics_health_and_readiness(server, store):
    store.add("n", "x", unit(7))
    resp = urllib3.request("GET", server + "/metrics", headers={"authorization": f"Bearer {ADMIN}"})
    assert resp.status == 200 and resp.headers["content-type"].startswith("text/plain")
    assert 'tierstore_memories{tier="hot",type="fact"} 1' in resp.data.decode()
    assert call(server, "/health", method="GET", token=None) == (200, {"status": "ok"})
    assert call(server, "/ready", method="GET", token=None) == (200, {"ready": True})
    info = call(server, "/v1/info", method="GET")[1]
    assert (info["dim"], info["embedder"], info["now"]) == (DIM, "hash_embed-32", T0)


def test_ready_says_no_once_the_store_is_closed(server, store):
    store.close()
    assert call(server, "/ready", method="GET", token=None) == (503, {"ready": False})
    status, body = call(server, "/v1/get", {"ns": "n", "id": "x"})
    assert status == 503 and body["error"]["type"] == "StoreClosedError"


def test_a_server_without_auth_serves_everyone(store):
    with ThreadedServer(build_app(store, tokens=None)) as url:
        remote = RemoteStore(url)
        assert remote.add("n", "no token needed", unit(8)) and remote.stats().total == 1

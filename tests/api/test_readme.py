"""The README's quick start runs as written (issue 14): its python block is
executed in a fresh directory, and prints what the README says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.slow
def test_the_quick_start_runs_as_written_and_prints_what_the_readme_shows(tmp_path):
    code = _blocks("python")[0]
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    shown = re.search(r"It prints:\n\n```\n(.*?)```", README.read_text(), flags=re.S).group(1).splitlines()
    got = out.stdout.splitlines()
    assert len(got) == len(shown)
    for want, line in zip(shown, got):
        prefix = want.split("…")[0]  # the README elides the random id
        assert line.startswith(prefix), (want, line)
    assert (tmp_path / "agent-memory" / "catalog.sqlite").exists()


def test_the_readme_shows_the_two_commands_first():
    first = _blocks("sh")[0]
    assert "make demo" in first and "make test" in first


def test_the_serving_example_runs_against_a_server(tmp_path):
    """The README's RemoteStore block, against a server on a free port (the
    README's address replaced) with a toy embedder in place of MiniLM."""
    from tierstore import TierStore
    from tierstore.remote.server.app import build_app
    from tierstore.remote.server.auth import Principal, TokenTable
    from tierstore.testing.embedders import hash_embed
    from tierstore.testing.live_server import ThreadedServer

    code = next(b for b in _blocks("python") if "RemoteStore" in b)
    token = "readme-token-0123456789abcdef"
    with TierStore.open(tmp_path / "s", embedder=hash_embed) as store:
        with ThreadedServer(build_app(store, tokens=TokenTable([(token, Principal("readme"))]))) as url:
            scope: dict = {"TOKEN": token}
            exec(code.replace("http://127.0.0.1:8765", url), scope)  # noqa: S102 - our own README
            assert [h.memory.content for h in scope["hits"]] == ["Alice lives in Tokyo"]
        assert store.get("alice", scope["hits"][0].id).access_count == 1

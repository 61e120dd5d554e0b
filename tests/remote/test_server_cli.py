"""``tierstore serve``'s refusals: no tokens, no auth off loopback, a port in use — each a clear
message before anything is created."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from server_process import child_env


def serve(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tierstore.tools.cli", "serve", str(tmp_path / "store"), *args],
        capture_output=True,
        text=True,
        env=child_env(**env),
        cwd=tmp_path,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,env,message",
    [
        ((), {"TIERSTORE_TOKEN": ""}, "no tokens: give --token-file FILE or set TIERSTORE_TOKEN"),
        (("--insecure-no-auth", "--host", "0.0.0.0"), {"TIERSTORE_TOKEN": ""}, "only on loopback"),
        (("--insecure-no-auth",), {}, "choose one"),
        ((), {"TIERSTORE_TOKEN": "short"}, "at least 16 characters"),
        (("--token-file", "/nonexistent/tokens"), {"TIERSTORE_TOKEN": ""}, "cannot read the token file"),
        (("--max-k", "0"), {}, "max_k must be a positive integer"),
        (("--max-page", "0"), {}, "max_page must be a positive integer"),
        (("--max-sweep-seconds", "nan"), {}, "max_sweep_seconds must be a positive, finite number"),
        (("--workers", "0"), {}, "workers must be a positive integer"),
        (("--graceful-timeout", "-1"), {}, "graceful_timeout_s must be a non-negative"),
        (("--migrator-interval", "0"), {}, "migrator_interval_s must be a positive"),
    ],
    ids=[
        "no-token",
        "insecure-off-loopback",
        "insecure-with-token",
        "short-token",
        "missing-token-file",
        "max-k-0",
        "max-page-0",
        "sweep-seconds-nan",
        "workers-0",
        "graceful-negative",
        "migrator-interval-0",
    ],
)
def test_serve_refuses_unsafe_or_broken_settings(tmp_path, args, env, message):
    out = serve(tmp_path, *args, **env)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not (tmp_path / "store").exists()  # nothing was created


def test_serve_says_when_the_port_is_taken(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = serve(tmp_path, "--port", str(port))
    assert out.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in out.stderr
    assert not (tmp_path / "store").exists()


def test_serve_without_the_server_extra_names_it(tmp_path):
    code = (
        "import sys; sys.modules['uvicorn'] = None\n"
        "from tierstore.tools.cli import main\n"
        f"sys.exit(main(['serve', {str(tmp_path / 'store')!r}]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=tmp_path, timeout=120
    )
    assert out.returncode == 2 and "pip install '.[server]' in a clone of tierstore" in out.stderr
    assert not (tmp_path / "store").exists()

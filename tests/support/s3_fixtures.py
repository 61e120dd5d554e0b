"""pytest fixtures for S3 tests: moto's standalone server, spoken to over real HTTP.

Not moto's in-process ``mock_aws``: the code under test opens sockets and signs requests
exactly as it does against MinIO or AWS, so timeouts, retries and connection failures
are real. ``tests/conftest.py`` re-exports these fixtures with
``from s3_fixtures import *``.

* ``moto_server`` (session): one server on a free loopback port, with dummy credentials
  in the environment. ``stop()`` / ``start()`` take it down and bring it back on the
  same port for fault tests; moto keeps its state in memory, so a restart loses every
  bucket and object.
* ``s3_bucket`` (function): a fresh, uniquely named, empty bucket on that server.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["MotoServer", "moto_server", "s3_bucket"]

# Dummy credentials and a region for boto3. The config-file variables point at paths
# that do not exist so a developer's ~/.aws cannot leak into (or break) the tests.
_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/nonexistent/tierstore-tests/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/tierstore-tests/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}
_AWS_UNSET = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
# Loopback traffic must not go through a proxy configured in the environment.
_NO_PROXY = "127.0.0.1,localhost"

_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 5.0


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class MotoServer:
    """A moto standalone server subprocess on a fixed loopback port."""

    host = "127.0.0.1"

    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path  # server stdout+stderr; a file, so a full pipe cannot block it
        self.process: subprocess.Popen[bytes] | None = None
        self._client: Any = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __repr__(self) -> str:
        return f"MotoServer({self.endpoint_url}, running={self.running})"

    def _log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return "<no server log>"

    def _answers_http(self) -> bool:
        # Any HTTP answer (even an error status) means the server is up; a refused or
        # reset connection means it is not yet.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.endpoint_url}/moto-api/", timeout=1.0):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout: float = _START_TIMEOUT_S) -> None:
        """Start the server (no-op if running) and wait until it answers HTTP."""
        if self.running:
            return
        env = {**os.environ, "NO_PROXY": _NO_PROXY, "no_proxy": _NO_PROXY}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while not self._answers_http():
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise RuntimeError(
                    f"moto server on port {self.port} exited with {code} before answering; log:\n{self._log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"moto server on port {self.port} did not answer HTTP within {timeout} s; log:\n{self._log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, *, hard: bool = False) -> None:
        """Stop the server: SIGTERM (SIGKILL if ``hard``), then SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        if hard:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=_STOP_TIMEOUT_S)

    def restart(self) -> None:
        """Stop and start again on the same port (all buckets and objects are lost)."""
        self.stop()
        self.start()

    def client(self) -> Any:
        """A boto3 S3 client for test setup and inspection (not the code under test)."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name="us-east-1",
                config=Config(
                    retries={"max_attempts": 2, "mode": "standard"},
                    connect_timeout=2,
                    read_timeout=10,
                ),
            )
        return self._client


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A moto standalone server for the whole session, stopped at the end even on failure."""
    pytest.importorskip("boto3")
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in _AWS_ENV.items():
            mp.setenv(name, value)
        for name in _AWS_UNSET:
            mp.delenv(name, raising=False)
        mp.setenv("NO_PROXY", _NO_PROXY)
        mp.setenv("no_proxy", _NO_PROXY)
        log_path = tmp_path_factory.mktemp("moto") / "server.log"
        server = MotoServer(_free_port(MotoServer.host), log_path)
        # atexit as a second line of defence: if the session is torn down abnormally
        # (KeyboardInterrupt mid-setup), the subprocess must still not outlive pytest.
        atexit.register(server.stop, hard=True)
        try:
            server.start()
            yield server
        finally:
            server.stop()
            atexit.unregister(server.stop)


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> Iterator[str]:
    """A fresh, empty bucket on the moto server; its name is yielded."""
    if not moto_server.running:  # a fault test may have left the server down
        moto_server.start()
    client = moto_server.client()
    name = f"ts-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=name)
    yield name
    # Best effort: after a fault test the server may be down or restarted (bucket gone).
    with contextlib.suppress(Exception):
        if moto_server.running:
            paginator = client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=name):
                objects = [{"Key": obj["Key"]} for obj in page.get("Contents", ())]
                if objects:
                    client.delete_objects(Bucket=name, Delete={"Objects": objects})
            client.delete_bucket(Bucket=name)

"""``tierstore serve`` in a child process on a free loopback port, for the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import urllib3

TOKEN = "process-token-0123456789abcdef"


def child_env(**extra: str) -> dict[str, str]:
    """This interpreter's sys.path for a child (source checkout or install alike)."""
    paths = [p or os.getcwd() for p in sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "TIERSTORE_TOKEN": TOKEN, **extra}


class ServerProcess:
    """``tierstore serve PATH --port 0 ...``; ``url`` once it printed where it listens and answers /ready."""

    def __init__(self, path: Path, *args: str, cwd: Path, timeout_s: float = 120.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tierstore.tools.cli", "serve", str(path), "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=cwd,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("serving "):
            self.proc.kill()
            raise RuntimeError(f"the server did not start: {line!r} {self.proc.stderr.read()}")  # type: ignore[union-attr]
        self.url = line.split(" at ", 1)[1].split()[0]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if urllib3.request("GET", self.url + "/ready", retries=False, timeout=5).status == 200:
                    break
            except urllib3.exceptions.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                raise RuntimeError("the server did not become ready")
            time.sleep(0.05)

    def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait: the graceful shutdown."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

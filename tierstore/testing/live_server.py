"""An ASGI app served by uvicorn on a free loopback port, in a background thread (tests, benchmarks)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

__all__ = ["ThreadedServer"]


class ThreadedServer:
    """``with ThreadedServer(app) as url:`` serves ``app`` at ``url`` (127.0.0.1, a free port) until the block ends.

    The port is bound before the server starts (no race for a "free" port);
    the block is entered once the app's startup (its lifespan) has run."""

    def __init__(self, app: Any, *, timeout_s: float = 30.0) -> None:
        import uvicorn

        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False, timeout_graceful_shutdown=10)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, name=f"uvicorn-{self.port}", daemon=True
        )
        self._timeout = timeout_s

    def __enter__(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()

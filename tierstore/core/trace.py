"""Workload traces: a store's calls recorded as JSON lines, for replay.

``TierStore.start_trace(path)`` appends one JSON object per successful call
(add, search, touch, feedback, pin, delete, set_context, restore) with its
time ``t`` (seconds, from the store's clock) and its arguments; vectors are
base64 of little-endian float32 (as stored: L2-normalised). Added memories
carry their id, so a replay keeps ids. A search line may carry labels for
evaluation (``stale``: ids whose retrieval at rank 1 is a stale hit,
``live``: ids that should be found); the recorder never writes them, a
workload generator may.

``tierstore simulate`` replays a trace under several policies.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tierstore.errors import CorruptDataError

OPS = ("add", "search", "touch", "feedback", "pin", "delete", "set_context", "restore")


def encode_vector(v: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<f4").astype(np.float32)


class TraceWriter:
    """Appends trace lines to a file; thread-safe; flushed per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._f = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, op: str, t: float, **fields: Any) -> None:
        line = json.dumps({"op": op, "t": t, **fields}, separators=(",", ":"))
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()

    def close(self) -> None:
        with self._lock:
            self._f.close()


def read_trace(path: str | Path) -> Iterator[dict[str, Any]]:
    """Trace records in file order; each checked to be an object with a known
    ``op`` and a numeric ``t``. Vectors stay base64 (see :func:`decode_vector`)."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorruptDataError(f"trace {path} line {n}: not JSON ({exc.msg})") from None
            if not isinstance(rec, dict) or rec.get("op") not in OPS or not isinstance(rec.get("t"), (int, float)):
                raise CorruptDataError(f"trace {path} line {n}: expected an object with a known op and a time t")
            yield rec

"""Progress bars for long operations, on a terminal only.

Library calls stay quiet: a bar draws only when ``enabled`` is true, which by
default means stderr is a terminal. No dependency: a carriage-return line."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        unit: str = "",
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.label = label
        self.unit = unit
        self.done = 0
        self._start = time.perf_counter()
        self._last = 0.0

    def update(self, n: int = 1, *, note: str = "") -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < 0.1 and (self.total is None or self.done < self.total):
            return
        self._last = now
        self._draw(note)

    def _draw(self, note: str = "") -> None:
        elapsed = time.perf_counter() - self._start
        if self.total:
            frac = min(1.0, self.done / self.total)
            filled = int(frac * 30)
            bar = "#" * filled + "-" * (30 - filled)
            text = f"\r{self.label} [{bar}] {self.done}/{self.total}{self.unit} {elapsed:5.1f}s {note}"
        else:
            text = f"\r{self.label} {self.done}{self.unit} {elapsed:5.1f}s {note}"
        self.stream.write(text[:120].ljust(80))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

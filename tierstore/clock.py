"""Clocks. Every time computation in tierstore reads one, so that tests and
policy simulations can drive ninety days in a second.

Times are POSIX seconds (float).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Current time in seconds since the epoch."""
        ...


class SystemClock:
    """Wall-clock time (``time.time``)."""

    def now(self) -> float:
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to. Thread-safe.

    >>> clock = ManualClock(1_700_000_000.0)
    >>> clock.advance(3600)   # one hour later
    1700003600.0
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (>= 0) and return the new time."""
        seconds = float(seconds)
        if not seconds >= 0.0:
            raise ValueError(f"ManualClock.advance: seconds must be >= 0, got {seconds!r}")
        with self._lock:
            self._t += seconds
            return self._t

    def set(self, t: float) -> None:
        """Jump to time ``t``; time never moves backwards."""
        t = float(t)
        with self._lock:
            if t < self._t:
                raise ValueError(f"ManualClock.set: {t} is before the current time {self._t}")
            self._t = t

    def __repr__(self) -> str:
        return f"ManualClock({self._t!r})"

"""A writer-preferring readers-writer lock.

hnswlib's ``knn_query`` may run concurrently with itself but not with
``add_items`` or a resize, so each hot index has one of these: searches take
it shared (``with lock.read():``), structural changes exclusive
(``with lock.write():``). Not re-entrant.
"""

from __future__ import annotations

import threading


class _Side:
    """``with`` support without a generator (this sits on the search path)."""

    __slots__ = ("_enter", "_exit")

    def __init__(self, enter, exit) -> None:  # type: ignore[no-untyped-def]
        self._enter = enter
        self._exit = exit

    def __call__(self) -> "_Side":
        return self

    def __enter__(self) -> None:
        self._enter()

    def __exit__(self, *exc: object) -> None:
        self._exit()


class RWLock:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0
        self.read = _Side(self._acquire_read, self._release_read)
        self.write = _Side(self._acquire_write, self._release_write)

    def _acquire_read(self) -> None:
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1

    def _release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def _acquire_write(self) -> None:
        with self._cond:
            self._waiting_writers += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._waiting_writers -= 1
            self._writer = True

    def _release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()

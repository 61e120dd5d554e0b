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

    def __init__(self, enter, exit) -> None:
        self._enter = enter
        self._exit = exit

    def __call__(self) -> _Side:
        return self

    def __enter__(self) -> None:
        self._enter()

    def __exit__(self, *exc: object) -> None:
        self._exit()


class _ReadSide:
    """The shared side as a context manager, built once per lock (entered once
    per search, so no object is made per entry)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock) -> None:
        self._lock = lock

    def __call__(self) -> _ReadSide:
        return self

    def __enter__(self) -> None:
        self._lock.acquire_read()

    def __exit__(self, *exc: object) -> None:
        self._lock.release_read()


class RWLock:
    def __init__(self) -> None:
        # The readers' fast paths take the mutex directly, without the
        # Condition's Python-level wrappers; waiting goes through the Condition,
        # which shares the mutex.
        self._mutex = threading.Lock()
        self._cond = threading.Condition(self._mutex)
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0
        self.read = _ReadSide(self)
        self.write = _Side(self._acquire_write, self._release_write)

    def acquire_read(self) -> None:
        """Take the shared side, waiting while a writer holds or waits for the
        lock, as ``with lock.read():`` does (release with :meth:`release_read`):
        for a caller that may have taken it with :meth:`try_read` instead."""
        mutex = self._mutex
        mutex.acquire()
        if not (self._writer or self._waiting_writers):  # the uncontended path: no Condition, one lock round
            self._readers += 1
            mutex.release()
            return
        try:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1
        finally:
            mutex.release()

    def try_read(self) -> bool:
        """Take the shared side if no writer holds or waits for the lock,
        without waiting; True if taken (release with :meth:`release_read`)."""
        mutex = self._mutex
        mutex.acquire()
        try:
            if self._writer or self._waiting_writers:
                return False
            self._readers += 1
            return True
        finally:
            mutex.release()

    def release_read(self) -> None:
        """Release the shared side taken by :meth:`acquire_read` or :meth:`try_read`."""
        mutex = self._mutex
        mutex.acquire()
        try:
            self._readers -= 1
            if self._readers == 0 and self._waiting_writers:
                self._cond.notify_all()
        finally:
            mutex.release()

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

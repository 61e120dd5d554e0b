"""Files kept open for repeated ranged reads of immutable objects.

A cold search reads ~100 small ranges from ~60 archive objects. On a local
directory each ``get`` is an open, fstat, pread and close: four system calls
where one pread does the work (on sandboxed kernels a system call costs
several µs). Archive objects are written once and never rewritten, so their
files can stay open between searches and each later read is one ``pread``.

An entry is reference-counted: evicting it (least recently used first, or
because the store replaced or deleted the key) closes its descriptor only when
no reader holds it, so a descriptor number is never reused under a reader.
"""

from __future__ import annotations

import os
import stat
import threading

from tierstore.storage.lru import LRU

_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class OpenFile:
    """One open descriptor and how many readers hold it."""

    __slots__ = ("fd", "users", "evicted")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.evicted = False


class OpenFiles:
    """At most ``capacity`` open files by key, least recently used closed first. Thread-safe."""

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative integer, got {capacity!r}")
        self.capacity = capacity
        self._lock = threading.Lock()
        # every call under self._lock: a hold is a lookup and a count, atomically
        self._files: LRU[str, OpenFile] = LRU(capacity, on_evict=lambda _key, entry: self._evict(entry))

    def __len__(self) -> int:
        return len(self._files)

    def hold(self, key: str) -> OpenFile | None:
        """The open file of ``key``, held until :meth:`release`; None if it is not open."""
        with self._lock:
            entry = self._files.get(key)
            if entry is not None:
                entry.users += 1
            return entry

    def acquire(self, key: str, path: str) -> OpenFile:
        """The open file of ``key`` (opening ``path`` if it is not open), held
        until :meth:`release`. Raises FileNotFoundError, IsADirectoryError or
        another OSError as ``os.open`` does."""
        entry = self.hold(key)
        if entry is not None:
            return entry
        fd = os.open(path, _FLAGS)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # os.open does not refuse a directory
                raise IsADirectoryError(f"not a regular file: {path}")
        except BaseException:
            os.close(fd)
            raise
        entry = OpenFile(fd)
        entry.users = 1
        with self._lock:
            other = self._files.get(key)
            if other is not None:  # opened by another thread meanwhile: keep that one
                os.close(fd)
                other.users += 1
                return other
            self._files.put(key, entry)  # evicts the least recently used beyond capacity (this one if 0)
        return entry

    def release(self, entry: OpenFile) -> None:
        with self._lock:
            entry.users -= 1
            if entry.evicted and entry.users == 0:
                os.close(entry.fd)

    def forget(self, key: str) -> None:
        """Close ``key``'s file once its readers are done (the key was replaced or deleted)."""
        with self._lock:
            entry = self._files.pop(key)
            if entry is not None:
                self._evict(entry)

    def close_all(self) -> None:
        with self._lock:
            while self._files:
                _, entry = self._files.popitem()
                self._evict(entry)

    @staticmethod
    def _evict(entry: OpenFile) -> None:
        # caller holds the lock
        entry.evicted = True
        if entry.users == 0:
            os.close(entry.fd)

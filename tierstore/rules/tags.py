"""Tag vocabulary: tag strings <-> small integer ids used by the kernels.

Ids live only in memory (they are rebuilt as namespaces load), so they never
need to agree across processes."""

from __future__ import annotations

import threading
from collections.abc import Iterable


class TagVocab:
    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._names: list[str] = []
        self._lock = threading.Lock()

    def id(self, tag: str) -> int:
        """The id of ``tag``, assigned on first use."""
        i = self._ids.get(tag)
        if i is not None:
            return i
        with self._lock:
            i = self._ids.get(tag)
            if i is None:
                i = len(self._names)
                self._names.append(tag)
                self._ids[tag] = i
            return i

    def ids(self, tags: Iterable[str]) -> list[int]:
        return [self.id(t) for t in tags]

    def lookup(self, tag: str) -> int | None:
        """The id of ``tag`` if any memory or rule has used it."""
        return self._ids.get(tag)

    def name(self, i: int) -> str:
        return self._names[i]

    def __len__(self) -> int:
        return len(self._names)

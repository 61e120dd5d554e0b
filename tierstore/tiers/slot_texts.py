"""A hot namespace's texts, one per slot, in one UTF-8 buffer.

A Python ``str`` costs a 49-byte header and an 8-byte list entry beside its
characters; a short memory ("prefers tea") paid four times its length for
them. Here a slot costs its UTF-8 bytes and 12 bytes (start and length):
``benchmarks/hot_bytes.py`` measured 45 bytes less per memory of short text.

Append-only: a slot's text is set once and never changes, so a search
snapshot reads it without a lock while later slots are added (growth copies
the starts and lengths before it replaces them; the buffer only grows). A
compaction builds a new one and leaves the old one to the snapshots that
hold it. A slot never set reads as ``""``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class SlotTexts:
    """Texts by slot (``texts[slot]``, ``texts[slot] = text``)."""

    __slots__ = ("_buf", "_start", "_len")

    def __init__(self, capacity: int = 0) -> None:
        self._buf = bytearray()
        self._start = np.zeros(capacity, np.int64)
        self._len = np.zeros(capacity, np.int32)

    @classmethod
    def of(cls, texts: Iterable[str]) -> SlotTexts:
        """Slots ``0 .. n - 1`` holding ``texts`` in order (capacity n)."""
        items = list(texts)
        out = cls(len(items))
        for slot, text in enumerate(items):
            out[slot] = text
        return out

    @property
    def capacity(self) -> int:
        return int(self._start.shape[0])

    def reserve(self, capacity: int) -> None:
        """Room for slots below ``capacity`` (new slots read ``""``)."""
        if capacity <= self._start.shape[0]:
            return
        start = np.zeros(capacity, np.int64)
        length = np.zeros(capacity, np.int32)
        have = self._start.shape[0]
        start[:have] = self._start
        length[:have] = self._len
        self._start, self._len = start, length

    def __setitem__(self, slot: int, text: str) -> None:
        data = text.encode("utf-8", "surrogatepass")
        if len(data) >= 2**31:
            raise ValueError(f"a text of {len(data)} bytes does not fit a slot (at most 2**31 - 1)")
        at = len(self._buf)
        self._buf += data
        self._start[slot] = at
        self._len[slot] = len(data)

    def __getitem__(self, slot: int) -> str:
        at = int(self._start[slot])
        return self._buf[at : at + int(self._len[slot])].decode("utf-8", "surrogatepass")

    def nbytes(self) -> int:
        """Bytes held: the buffer, the starts and the lengths."""
        return len(self._buf) + self._start.nbytes + self._len.nbytes

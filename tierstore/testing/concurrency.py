"""A reader thread beside a writer, for tests of what concurrent readers see."""

from __future__ import annotations

import threading
from collections.abc import Callable


def gaps_while(read_ok: Callable[[], bool], write: Callable[[], object]) -> tuple[int, list[int]]:
    """Call ``read_ok`` in another thread, again and again, while ``write``
    runs in this one. Returns how many reads were made and the numbers of the
    reads that returned False (the gaps)."""
    stop = threading.Event()
    gaps: list[int] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            if not read_ok():
                gaps.append(reads[0])
            reads[0] += 1

    t = threading.Thread(target=reader)
    t.start()
    try:
        write()
    finally:
        stop.set()
        t.join()
    return reads[0], gaps

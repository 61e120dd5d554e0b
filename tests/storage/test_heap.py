"""storage.heap: freed memory the allocator holds goes back to the system."""

from __future__ import annotations

import os
import platform

import pytest

from tierstore.storage.heap import release_freed


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_freed_pages_between_live_objects_are_returned() -> None:
    # 1.5 KB objects (the allocator's, not Python's small-object pools) with a small live one after each
    # batch: the heap cannot shrink from its top, only malloc_trim's madvise gives the pages back
    pinned, blocks = [], []
    for _ in range(40):
        blocks.append([bytes(1500) for _ in range(1000)])
        pinned.append(bytearray(600))
    del blocks
    held = rss()
    assert release_freed() is True
    assert held - rss() > 20 * 2**20  # of the ~60 MiB freed
    assert len(pinned) == 40

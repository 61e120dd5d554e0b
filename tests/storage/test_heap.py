"""storage.heap: freed memory the allocator holds goes back to the system."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# Run in a fresh interpreter: in a test worker that has run hundreds of tests
# the allocator's free lists and arenas are in any state, and the 60 MiB this
# allocates may land in chunks that were already resident.
_SCRIPT = """
import os
from tierstore.storage.heap import release_freed

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

# 1.5 KB objects (the allocator's, not Python's small-object pools) with a small live one after each
# batch: the heap cannot shrink from its top, only malloc_trim's madvise gives the pages back
pinned, blocks = [], []
for _ in range(40):
    blocks.append([bytes(1500) for _ in range(1000)])
    pinned.append(bytearray(600))
del blocks
held = rss()
released = release_freed()
print(released, held - rss(), len(pinned))
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_freed_pages_between_live_objects_are_returned() -> None:
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True, timeout=120)
    released, returned, live = out.stdout.split()
    assert released == "True"
    assert int(returned) > 20 * 2**20  # of the ~60 MiB freed
    assert live == "40"

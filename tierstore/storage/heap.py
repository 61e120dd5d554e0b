"""Give the system back memory the C allocator holds freed.

glibc's malloc keeps what a process frees in its heaps, and a heap shrinks
only from its top: after a bulk ingest (each batch's rows, parameter tuples and
vector copies, freed between hnswlib's small per-node allocations, which pin
the pages around them) a process measured here held 3.3 KB per memory freed
but resident, more than the hot tier's own 2.3 KB (benchmarks/hot_bytes.py).
``malloc_trim(0)`` returns every free page of every heap (madvise); it costs
microseconds to a few milliseconds. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable

_lock = threading.Lock()
_trim: Callable[[int], int] | None = None
_looked = False


def _find_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None


def release_freed() -> bool:
    """Return the allocator's free pages to the system; whether it could (glibc)."""
    global _trim, _looked
    with _lock:
        if not _looked:
            _trim, _looked = _find_trim(), True
        trim = _trim
    if trim is None:
        return False
    trim(0)
    return True

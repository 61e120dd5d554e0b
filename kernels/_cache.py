"""Numba cache invalidation for the kernels package as a whole.

Numba keys a cached kernel on its own source file only. Our kernels inline
helpers from other files (``_scalar.py``, ``_topk.py``), so an edit there would
leave stale machine code in the cache. This registers a cache locator, used
for files of this package only, whose source stamp is a hash of every kernel
source file: any change recompiles every kernel once.

It relies on ``numba.core.caching.CacheImpl._locator_classes`` (not public
API); if that is missing, Numba's default per-file caching applies.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_DIR = Path(__file__).resolve().parent


def _package_stamp() -> bytes:
    h = hashlib.sha256()
    for path in sorted(_DIR.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.digest()


def _install() -> None:
    try:
        from numba.core import caching
    except ImportError:  # pragma: no cover - numba is a hard dependency
        return
    impl = getattr(caching, "CacheImpl", None)
    names = ("UserProvidedCacheLocator", "InTreeCacheLocator", "UserWideCacheLocator")
    if impl is None or not all(hasattr(caching, name) for name in names) or not hasattr(impl, "_locator_classes"):
        return
    bases = [getattr(caching, name) for name in names]
    stamp = _package_stamp()

    def ours(py_file: str) -> bool:
        try:
            return Path(py_file).resolve().parent == _DIR
        except OSError:
            return False

    class _PackageMixin:
        def get_source_stamp(self) -> bytes:
            return stamp

        @classmethod
        def from_function(cls, py_func, py_file):
            if not ours(py_file):
                return None
            return super().from_function(py_func, py_file)  # type: ignore[misc]

    # Same order as Numba's own: NUMBA_CACHE_DIR if set, in-tree __pycache__
    # if writable, else the user-wide cache directory.
    ours_classes = [type(f"Kernels{base.__name__}", (_PackageMixin, base), {}) for base in bases]
    classes = impl._locator_classes
    if not any(c.__name__.startswith("Kernels") for c in classes):
        classes[0:0] = ours_classes


_install()

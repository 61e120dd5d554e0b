"""LocalObjectStore: objects as files under a directory — the embedded default cold tier.

Durability and atomicity come from the file system, not from locks, so the store is
safe across threads and processes alike:

* ``put`` writes a temp file in the object's directory, fsyncs it, renames it over the
  object (``os.replace`` is atomic) and fsyncs the directory so the rename survives a
  crash. A reader sees the old bytes or the new bytes, never a mix.
* ``put_if_absent`` writes and fsyncs the temp file the same way, then ``os.link``\\ s it
  to the object's name: link fails with EEXIST if the name is taken, which makes
  "check and create" a single atomic step even between processes, and the object only
  ever appears with its full content.
* ``delete`` leaves the directories it empties (a night's sweep deletes and writes
  objects in the same namespaces' directories: it removed them and created them
  again every night, an rmdir, a mkdir and their parents' fsyncs each); a put whose
  key is such an empty directory tree removes it first.
* Temp files are named ``.tmp-*``; names starting with "." are never valid keys, so a
  temp file left by a crash is invisible to ``list`` and unreachable by ``get``.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from tierstore.errors import InvalidInputError, ObjectNotFoundError, ObjectStoreError
from tierstore.storage.objectstore._base import (
    _SEGMENT,
    validate_data,
    validate_key,
    validate_prefix,
    validate_range,
)
from tierstore.storage.objectstore._open_files import OpenFiles

__all__ = ["LocalObjectStore"]

_TMP_PREFIX = ".tmp-"
_HAVE_PREAD = hasattr(os, "pread")
# How often put retries when another process removes the directory it just created (a put of
# a key where empty directories were, or an older version's delete, which removed what it emptied).
_DIR_RETRIES = 20


def _fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flush a directory's entries (a create, rename or unlink in it) to disk."""
    if os.name == "nt":  # Windows cannot open a directory; NTFS journals metadata itself
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except (FileNotFoundError, NotADirectoryError):
        # Another thread or process removed the emptied directory after our change; what
        # we would have made durable is gone, and the remover fsyncs the parent itself.
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pread(fd: int, first: int, end: int) -> bytes:
    """Bytes ``[first, end)`` of an open file; fewer past its end. ``pread``
    may return less than asked, so it is called until the range is read or
    it returns b"" (the end of the file)."""
    chunks = []
    while first < end:
        chunk = os.pread(fd, end - first, first)
        if not chunk:
            break
        chunks.append(chunk)
        first += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class LocalObjectStore:
    """An :class:`~tierstore.storage.objectstore.ObjectStore` backed by files under ``root``.

    A key ``a/b/c`` is the file ``root/a/b/c``. The directory is created if missing
    (unless ``create=False``: a reader that must change nothing sees a missing
    directory as an empty store).
    Thread- and process-safe: atomicity comes from rename and link, not from locks.
    """

    # A read is a pread from (usually) the page cache, tens of µs: callers
    # reading many objects gain nothing from threads (see cold_index.fetch_vectors).
    serial_reads = True
    # Files :meth:`read_ranges` keeps open (archive objects a cold search reads again).
    open_files = 256

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        if not isinstance(root, (str, os.PathLike)):
            raise InvalidInputError(f"root must be a path, got {type(root).__name__}")
        self._root = Path(os.path.abspath(os.fspath(root)))
        self._root_str = str(self._root)
        # Orders directory creation against removal within this process (see _write_temp);
        # file contents are never written under it.
        self._dir_lock = threading.Lock()
        self._open = OpenFiles(self.open_files)
        weakref.finalize(self, self._open.close_all)
        if not create:
            return
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ObjectStoreError(f"cannot create object store directory {str(self._root)!r}: {exc}") from exc

    @property
    def root(self) -> Path:
        """The absolute directory holding the objects."""
        return self._root

    def __repr__(self) -> str:
        return f"LocalObjectStore(root={str(self._root)!r})"

    # -- helpers ---------------------------------------------------------------------

    def _file(self, key: str) -> str:
        """The file of ``key`` (built without pathlib: ``Path.joinpath`` and
        ``commonpath`` cost more than a read, and a sweep's puts and deletes
        pay them thousands of times a night). ``key`` is valid: segments of
        safe characters, none "." or ".."."""
        path = os.path.join(self._root_str, *key.split("/"))
        # validate_key already guarantees this; checked again because escaping the root
        # is the one mistake this class must never make.
        if not path.startswith(self._root_str + os.sep):  # pragma: no cover - validate_key prevents it
            raise InvalidInputError(f"invalid object key {key!r}: escapes the store root")
        return path

    def _conflict(self, key: str, path: str) -> ObjectStoreError:
        return ObjectStoreError(
            f"cannot store object {key!r} in {self!r}: {path!r} or one of its parents "
            "is a directory of other keys or a file in the way "
            "(a local store cannot hold both 'a' and 'a/b')"
        )

    def _ensure_dir(self, key: str, directory: str) -> None:
        """Create ``directory`` level by level, fsyncing each parent that gains an entry."""
        if os.path.isdir(directory):
            return
        current = self._root_str
        for part in directory[len(self._root_str) + 1 :].split(os.sep):
            parent, current = current, os.path.join(current, part)
            try:
                os.mkdir(current)
            except FileExistsError:
                if os.path.isdir(current):
                    continue
                if not os.path.lexists(current):
                    # Removed by another process between mkdir and the check: retry.
                    raise FileNotFoundError(errno.ENOENT, "removed", current) from None
                raise self._conflict(key, current) from None
            _fsync_dir(parent)

    def _write_temp(self, key: str, directory: str, data: bytes) -> str:
        """Write ``data`` to a new fsynced temp file in ``directory``; return its path."""
        for attempt in range(_DIR_RETRIES):
            try:
                # The lock keeps this store's own removal of an empty directory in the way
                # of a key (_clear_empty) from racing mkdir and mkstemp. Once the temp
                # file exists the directory is not empty and cannot be removed at all.
                with self._dir_lock:
                    self._ensure_dir(key, directory)
                    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=directory)
            except (FileNotFoundError, NotADirectoryError) as exc:
                # Another process removed the directory under us: go round again.
                last_exc: OSError = exc
                time.sleep(0.001 * attempt)
                continue
            break
        else:
            raise ObjectStoreError(f"cannot create directory for {key!r} in {self!r}: {last_exc}")
        try:
            # mkstemp creates the file with mode 0600: archived memories stay private
            # to the owning user, whatever the umask.
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            _unlink_quiet(tmp)
            raise
        return tmp

    def _clear_empty(self, key: str, path: str) -> None:
        """Remove ``path``, a directory in the way of ``key``'s file, if it
        holds no file at any depth (what deletes of keys below it left:
        deletes do not remove the directories they empty, which a store's
        deletes and puts would otherwise remove and create again every
        night); raise the conflict error if it holds one."""
        with self._dir_lock:
            for current, _dirs, files in os.walk(path, topdown=False):
                if files:
                    raise self._conflict(key, path)
                try:
                    os.rmdir(current)
                except FileNotFoundError:
                    continue
                except OSError:  # not empty: a key was stored below it meanwhile
                    raise self._conflict(key, path) from None
            _fsync_dir(os.path.dirname(path))

    # -- protocol --------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, atomically replacing any existing object."""
        key = validate_key(key)
        data = validate_data(data)
        path = self._file(key)
        try:
            tmp = self._write_temp(key, os.path.dirname(path), data)
            try:
                try:
                    os.replace(tmp, path)
                except OSError:
                    if not os.path.isdir(path):
                        raise
                    self._clear_empty(key, path)  # directories left by deleted keys below it
                    os.replace(tmp, path)
                self._open.forget(key)
            except OSError:
                _unlink_quiet(tmp)
                if os.path.isdir(path):
                    raise self._conflict(key, path) from None
                raise
            except BaseException:
                _unlink_quiet(tmp)
                raise
            _fsync_dir(os.path.dirname(path))
        except ObjectStoreError:
            raise
        except OSError as exc:
            raise ObjectStoreError(f"put {key!r} in {self!r} failed: {exc}") from exc

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store ``data`` only if ``key`` is free; True if written. Atomic across processes."""
        key = validate_key(key)
        data = validate_data(data)
        path = self._file(key)
        try:
            if os.path.lexists(path):  # cheap fast path; the link below is the real test
                if not os.path.isdir(path):
                    return False
                self._clear_empty(key, path)  # directories left by deleted keys below it
            tmp = self._write_temp(key, os.path.dirname(path), data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                if os.path.isdir(path):
                    raise self._conflict(key, path) from None
                return False
            finally:
                _unlink_quiet(tmp)
            # One fsync covers both the new link and the removed temp name.
            _fsync_dir(os.path.dirname(path))
            return True
        except ObjectStoreError:
            raise
        except OSError as exc:
            raise ObjectStoreError(f"put_if_absent {key!r} in {self!r} failed: {exc}") from exc

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` of the object; raises ObjectNotFoundError."""
        key = validate_key(key)
        first, end = validate_range(start, end)
        if end is not None and first == end:
            return b""
        path = self._file(key)
        if not _HAVE_PREAD:  # pragma: no cover - Windows
            return self._get_buffered(key, path, first, end)
        try:
            # os.open and pread, not open(): no buffered file object per read
            # (a cold search reads ~100 small ranges from as many objects).
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):  # open() refused a directory; os.open does not
                    raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
                return _pread(fd, first, st.st_size if end is None else end)
            finally:
                os.close(fd)
        except OSError as exc:
            self._raise_read_error(key, exc)

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Bytes ``[start, end)`` of the object for each of ``ranges``, read as
        :meth:`get` reads them, for an object written once and never
        rewritten (an archive batch). Its file stays open afterwards (up to
        :attr:`open_files` of them, least recently used closed first), so a
        later read of it is one ``pread``; :meth:`put` and :meth:`delete` of
        the key through this store close it. An object deleted by another
        process while open here still reads as it was (it is immutable).
        Raises ObjectNotFoundError if the object does not exist."""
        checked = []
        for rng in ranges:
            if (
                type(rng) is tuple
                and len(rng) == 2
                and type(rng[0]) is int
                and type(rng[1]) is int
                and 0 <= rng[0] <= rng[1]
            ):
                checked.append(rng)  # the common case, checked without validate_range's generality
                continue
            if not isinstance(rng, tuple) or len(rng) != 2:
                raise InvalidInputError(f"a range is (start, end), got {rng!r}")
            first, end = validate_range(*rng)
            if end is None:
                raise InvalidInputError(f"a range needs its end, got {rng!r}")
            checked.append((first, end))
        # A key held open was validated when it was opened.
        entry = self._open.hold(key) if type(key) is str else None
        if entry is None:
            key = validate_key(key)
            if not _HAVE_PREAD:  # pragma: no cover - Windows
                return [self.get(key, first, end) for first, end in checked]
            try:
                entry = self._open.acquire(key, self._file(key))
            except OSError as exc:
                self._raise_read_error(key, exc)
        try:
            return [_pread(entry.fd, first, end) for first, end in checked]
        except OSError as exc:
            raise ObjectStoreError(f"get {key!r} from {self!r} failed: {exc}") from exc
        finally:
            self._open.release(entry)

    def close_open_files(self) -> None:
        """Close the files :meth:`read_ranges` keeps open (the store stays usable)."""
        self._open.close_all()

    def _get_buffered(self, key: str, path: str, first: int, end: int | None) -> bytes:  # pragma: no cover
        """``get`` where the OS has no ``pread``."""
        try:
            with open(path, "rb") as f:
                if first:
                    f.seek(first)  # seeking past EOF is fine: read() then returns b""
                return f.read() if end is None else f.read(end - first)
        except OSError as exc:
            self._raise_read_error(key, exc)

    def _raise_read_error(self, key: str, exc: OSError) -> NoReturn:
        """Raise what a failed open or read of ``key`` means: ObjectNotFoundError
        when there is no such file (a segment over NAME_MAX cannot exist
        either), else ObjectStoreError."""
        if (
            isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError))
            or exc.errno == errno.ENAMETOOLONG
        ):
            raise ObjectNotFoundError(key) from None
        raise ObjectStoreError(f"get {key!r} from {self!r} failed: {exc}") from exc

    def delete(self, key: str) -> bool:
        """Remove the object; True if it existed. The directories it leaves
        empty stay (a key stored where they are removes them)."""
        key = validate_key(key)
        path = self._file(key)
        self._open.forget(key)
        try:
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return False
            except PermissionError:
                if os.path.isdir(path):  # macOS reports unlink(dir) as EPERM
                    return False
                raise
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    return False
                raise
            _fsync_dir(os.path.dirname(path))
            return True
        except OSError as exc:
            raise ObjectStoreError(f"delete {key!r} from {self!r} failed: {exc}") from exc

    def list(self, prefix: str = "") -> list[str]:
        """Return the sorted keys starting with ``prefix``; temp and hidden files are skipped."""
        prefix = validate_prefix(prefix)
        # Start at the deepest directory the prefix names in full: listing "ns/batch-"
        # should not walk the other namespaces.
        base_rel = prefix.rpartition("/")[0]
        base = self._root.joinpath(*base_rel.split("/")) if base_rel else self._root
        keys: list[str] = []
        stack = [(base, base_rel)]
        try:
            while stack:
                directory, rel = stack.pop()
                try:
                    entries = os.scandir(directory)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                with entries:
                    for entry in entries:
                        # Names that are not valid key segments (".tmp-*" files, stray
                        # dotfiles, "a b") cannot be read by get(), so list skips them.
                        if not _SEGMENT.fullmatch(entry.name):
                            continue
                        key = f"{rel}/{entry.name}" if rel else entry.name
                        if entry.is_dir(follow_symlinks=False):
                            sub = key + "/"
                            if sub.startswith(prefix) or prefix.startswith(sub):
                                stack.append((Path(entry.path), key))
                        elif entry.is_file() and key.startswith(prefix):
                            keys.append(key)
        except OSError as exc:
            raise ObjectStoreError(f"list {prefix!r} in {self!r} failed: {exc}") from exc
        keys.sort()
        return keys

    def _stat(self, key: str) -> os.stat_result | None:
        try:
            st = os.stat(self._file(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return None
            raise ObjectStoreError(f"stat {key!r} in {self!r} failed: {exc}") from exc
        return st if stat.S_ISREG(st.st_mode) else None

    def exists(self, key: str) -> bool:
        """True if an object is stored under ``key``."""
        return self._stat(validate_key(key)) is not None

    def size(self, key: str) -> int:
        """The object's length in bytes; raises ObjectNotFoundError."""
        key = validate_key(key)
        st = self._stat(key)
        if st is None:
            raise ObjectNotFoundError(key)
        return st.st_size

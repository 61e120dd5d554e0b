"""The object-store protocol shared by every cold-tier backend, and key validation.

Keys are relative, ``/``-separated paths made of ``[A-Za-z0-9_.=-]`` segments. They are
validated before any backend touches a file or sends a request, so a bad key changes
nothing and no key can name a file outside the store's directory or prefix.
"""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from tierstore.errors import InvalidInputError

__all__ = [
    "KEY_MAX_BYTES",
    "ObjectStore",
    "url_without_userinfo",
    "validate_data",
    "validate_key",
    "validate_prefix",
    "validate_range",
]

#: S3's own limit on an object key, applied to every backend so that keys are portable.
KEY_MAX_BYTES = 1024

# One key segment. A segment may not start with "." — that rules out "." and ".." and
# also reserves hidden names for backends (the local store's ".tmp-*" files), so a key
# that one backend accepts is never silently hidden by another.
_SEGMENT = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9_.=-]*")
# A list prefix may end with a partial segment, which may be empty (trailing "/").
_PARTIAL_SEGMENT = re.compile(r"(?:[A-Za-z0-9_=-][A-Za-z0-9_.=-]*)?")


@runtime_checkable
class ObjectStore(Protocol):
    """A flat key -> bytes store: the cold tier's only view of its storage.

    Implementations must be safe to call from several threads at once.
    """

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing any existing object atomically."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store ``data`` only if no object exists under ``key``; never overwrites.

        Returns True if this call wrote the object, False if one already existed. The
        check and the write are one atomic step against other writers.
        """
        ...

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Return the bytes ``[start, end)`` of the object (the whole object by default).

        A range reaching past the end returns the bytes available (as S3 does); an empty
        range (``start == end``) returns ``b""`` without reading anything. Raises
        ObjectNotFoundError if there is no object under ``key``.
        """
        ...

    def delete(self, key: str) -> bool:
        """Remove the object; True if one was deleted, False if there was none."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """Return every key that starts with ``prefix``, sorted."""
        ...

    def exists(self, key: str) -> bool:
        """True if an object is stored under ``key``."""
        ...

    def size(self, key: str) -> int:
        """Return the object's length in bytes; raises ObjectNotFoundError if absent."""
        ...


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a str, got {type(value).__name__}: {value!r}")
    if "\x00" in value:
        raise InvalidInputError(f"invalid {what} {value!r}: contains NUL")
    if "\\" in value:
        raise InvalidInputError(f"invalid {what} {value!r}: contains a backslash")
    if len(value.encode("utf-8", "surrogatepass")) > KEY_MAX_BYTES:
        raise InvalidInputError(f"invalid {what} {value[:64]!r}...: longer than {KEY_MAX_BYTES} bytes")
    if value.startswith("/"):
        raise InvalidInputError(f"invalid {what} {value!r}: must be relative, not absolute")
    return value


def _check_segment(segment: str, value: str, what: str, pattern: re.Pattern[str]) -> None:
    if segment in (".", ".."):
        raise InvalidInputError(f"invalid {what} {value!r}: contains a {segment!r} segment")
    if segment == "" and pattern is _SEGMENT:
        raise InvalidInputError(f"invalid {what} {value!r}: contains an empty segment")
    if not pattern.fullmatch(segment):
        raise InvalidInputError(
            f"invalid {what} {value!r}: segment {segment!r} must match [A-Za-z0-9_=-][A-Za-z0-9_.=-]*"
        )


def validate_key(key: object) -> str:
    """Return ``key`` unchanged if it is a valid object key, else raise InvalidInputError.

    The message names the key and the rule it breaks.
    """
    key = _check_text(key, "object key")
    if key == "":
        raise InvalidInputError("invalid object key '': must not be empty")
    for segment in key.split("/"):
        _check_segment(segment, key, "object key", _SEGMENT)
    return key


def validate_prefix(prefix: object) -> str:
    """Validate a ``list`` prefix: ``""``, or a key whose last segment may be partial.

    ``"a/b"`` matches ``a/b``, ``a/bc`` and ``a/b/c``; ``"a/b/"`` matches only keys
    inside ``a/b/``.
    """
    prefix = _check_text(prefix, "prefix")
    if prefix == "":
        return prefix
    *whole, last = prefix.split("/")
    for segment in whole:
        _check_segment(segment, prefix, "prefix", _SEGMENT)
    _check_segment(last, prefix, "prefix", _PARTIAL_SEGMENT)
    return prefix


def validate_range(start: object, end: object) -> tuple[int, int | None]:
    """Check a half-open byte range and return it as ``(start, end)`` with start >= 0.

    ``end`` stays None for "to the end of the object".
    """
    lo, hi = _range_bound("start", start), _range_bound("end", end)
    first = 0 if lo is None else lo
    if hi is not None and first > hi:
        raise InvalidInputError(f"byte range start {first} is after end {hi}")
    return first, hi


def _range_bound(name: str, value: object) -> int | None:
    # bool is an int subclass; get(key, True) is a bug, not a range.
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise InvalidInputError(f"byte range {name} must be an int or None, got {value!r}")
    if value is not None and value < 0:
        raise InvalidInputError(f"byte range {name} must be >= 0, got {value}")
    return value


def validate_data(data: object) -> bytes:
    """Return ``data`` as bytes; bytes-like objects are accepted, anything else rejected."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise InvalidInputError(f"object data must be bytes, got {type(data).__name__}")


def url_without_userinfo(url: str | None) -> str | None:
    """``url`` without a ``user:password@`` part (anything else unchanged).

    S3 endpoints authenticate with SigV4 request signatures, never with URL
    user info, so it is dropped before an endpoint reaches botocore (whose
    messages and DEBUG logs quote the endpoint) or is remembered anywhere."""
    if not url or "@" not in url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rsplit("@", 1)[1], parts.path, parts.query, parts.fragment))

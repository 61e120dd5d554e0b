"""Input checks. Each raises a specific :mod:`tierstore.errors` exception
before anything is written, so bad input never changes the store."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from tierstore.errors import (
    DimensionMismatchError,
    InvalidConfidenceError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidVectorError,
)
from tierstore.kernels import squared_length

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
ID_MAX_LEN = 256
KEY_MAX_LEN = 128
# A key names a slot ("home_city", "project:sparrow/deadline", "住所"): letters and
# digits of any script and a few separators; no spaces or control characters, so
# that a key is one word in logs, URLs and the command line.
KEY_RE = re.compile(rf"[\w.:/@#+-]{{1,{KEY_MAX_LEN}}}")
TAG_MAX_LEN = 128
# Entries a list of tags may hold before duplicates are dropped: refused
# above this before any entry is looked at, so a list of 25 000 costs nothing.
TAGS_MAX_LISTED = 1024
SUPERSEDES_MAX = 100  # ids one memory may supersede (each is looked up and gets a logged mark)
CONTENT_MAX_CHARS = 65_536  # a memory's text, in characters: the default of Settings.max_content_chars
SHOWN_CHARS = 100  # characters of an offending value an error message repeats


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters
    with the full length noted: an error never echoes a megabyte back. Costs
    O(limit) for a long string, list or dict (only its start is formatted)."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        head = list(value)[:8] if not isinstance(value, dict) else list(value.items())[:8]
        text = repr(head)
        text = text if len(text) <= limit else text[:limit]
        return f"{type(value).__name__} starting {text}... ({len(value)} entries)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_namespace(ns: Any) -> str:
    """A namespace is a name ``[A-Za-z0-9_.-]{1,128}``, not ``.`` or ``..``;
    it is used as a directory name and an object-key segment."""
    if not isinstance(ns, str) or len(ns) > 128 or not NAMESPACE_RE.fullmatch(ns) or ns in (".", ".."):
        raise InvalidNamespaceError(
            f"invalid namespace {shown(ns)}: expected 1-128 characters of [A-Za-z0-9_.-], not '.' or '..'"
        )
    return ns


F32 = np.dtype(np.float32)  # native float32: numpy keeps one instance, so `is` compares


F32_MAX = float(np.finfo(np.float32).max)


def _numeric(vec: Any, what: str) -> np.ndarray:
    """``vec`` as a numpy array of real numbers: strings, booleans, complex
    numbers and objects are refused (numpy would convert "1.5", drop an
    imaginary part with a warning, or fail later)."""
    try:
        arr = np.asarray(vec)
    except (TypeError, ValueError):
        raise InvalidVectorError(f"{what} is not a numeric vector") from None
    if arr.dtype.kind not in "iuf":
        kind = {"c": "complex numbers", "b": "booleans", "U": "strings", "S": "bytes", "O": "non-numbers"}.get(
            arr.dtype.kind, f"values of type {arr.dtype}"
        )
        raise InvalidVectorError(f"{what} must hold real numbers, got {kind}")
    return arr


def _unit_rows(a64: np.ndarray, what: str) -> np.ndarray:
    """Rows of a finite float64 matrix scaled to unit length, in float32.
    Norms and the division are done in float64: a float32 norm overflows for
    components near float32's maximum (3e38 became all zeros) and loses
    precision for subnormal ones (1e-45 became a vector of length 0.94)."""
    if np.abs(a64).max(initial=0.0) > F32_MAX:
        raise InvalidVectorError(f"{what} has values beyond float32's range (±3.4e38)")
    norms = np.sqrt(np.einsum("ij,ij->i", a64, a64))
    if not (norms > 0).all():
        bad = int(np.flatnonzero(~(norms > 0))[0])
        where = what if a64.shape[0] == 1 else f"{what}[{bad}]"
        raise InvalidVectorError(f"{where} has zero length and cannot be normalised")
    out = (a64 / norms[:, None]).astype(np.float32)
    lengths = np.sqrt(np.einsum("ij,ij->i", out.astype(np.float64), out.astype(np.float64)))
    if not (np.abs(lengths - 1.0) <= 1e-3).all():  # every component underflowed to 0 in float32
        raise InvalidVectorError(f"{what} cannot be stored as a unit float32 vector")
    return np.ascontiguousarray(out)


def check_vector(vec: Any, dim: int, what: str = "embedding") -> np.ndarray:
    """A finite, non-zero vector of ``dim`` real numbers, returned
    L2-normalised as a contiguous float32 array (the argument itself when it
    already is one: callers copy before they keep it)."""
    if type(vec) is np.ndarray and vec.dtype is F32 and vec.shape == (dim,) and vec.flags.c_contiguous:
        # Fast path for the common case: NaN or inf in any element makes the
        # squared length (summed in float64) non-finite, so one pass checks everything.
        n2 = squared_length(vec)
        if 0.0 < n2 < math.inf:
            if abs(n2 - 1.0) <= 1e-7:  # already unit length (float32 rounding): no copy
                return vec
            if 2.0**-100 <= n2 <= 2.0**100:  # no overflow or subnormal trouble in float32
                return vec / np.float32(math.sqrt(n2))
    arr = _numeric(vec, what)
    if arr.ndim != 1:
        if arr.ndim == 2 and arr.shape[0] == 1:
            arr = arr[0]
        else:
            raise DimensionMismatchError(f"{what} must be one vector of length {dim}, got shape {arr.shape}")
    if arr.shape[0] != dim:
        raise DimensionMismatchError(f"{what} has dimension {arr.shape[0]}, the store's dimension is {dim}")
    a64 = arr.astype(np.float64)
    if not np.isfinite(a64).all():
        raise InvalidVectorError(f"{what} contains NaN or infinite values")
    return _unit_rows(a64[None, :], what)[0]


def check_vectors(mat: Any, dim: int, what: str = "embeddings") -> np.ndarray:
    """A ``(n, dim)`` matrix of valid vectors, each L2-normalised (float32)."""
    arr = _numeric(mat, what)
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise DimensionMismatchError(f"{what} must have shape (n, {dim}), got {arr.shape}")
    a64 = arr.astype(np.float64)
    if not np.isfinite(a64).all():
        bad = int(np.flatnonzero(~np.isfinite(a64).all(axis=1))[0])
        raise InvalidVectorError(f"{what}[{bad}] contains NaN or infinite values")
    return _unit_rows(a64, what)


def check_query_vectors(queries: Any, dim: int) -> list[np.ndarray]:
    """Query vectors for a batch of searches: a list or tuple of vectors, or a 2-D array with one per
    row; each checked as :func:`check_vector` does (named ``queries[i]``), all before any is used."""
    if isinstance(queries, np.ndarray):
        if queries.ndim != 2:
            raise DimensionMismatchError(f"queries must be a 2-D array (one query per row), got shape {queries.shape}")
        return list(check_vectors(queries, dim, "queries"))
    if not isinstance(queries, list | tuple):
        raise InvalidInputError(f"queries must be a list of vectors or a 2-D array, got {type(queries).__name__}")
    return [check_vector(q, dim, f"queries[{i}]") for i, q in enumerate(queries)]


def check_confidence(value: Any, what: str = "confidence") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise InvalidConfidenceError(f"{what} must be a number in [0, 1], got {shown(value)}")
    x = float(value)
    if not (0.0 <= x <= 1.0):
        raise InvalidConfidenceError(f"{what} must be in [0, 1], got {shown(value)}")
    return x


def _text(value: str, what: str | Callable[[], str]) -> str:
    """``value`` if it is valid Unicode text: a lone surrogate (from a bad
    decode, ``surrogateescape``) cannot be stored as UTF-8. ``what`` names it
    in the error (a callable: formatted only then)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        label = what if isinstance(what, str) else what()
        raise InvalidInputError(
            f"{label} is not valid Unicode text: a lone surrogate at position {exc.start}"
        ) from None
    return value


def _named(what: str, value: Any) -> Callable[[], str]:
    """``what`` and the value shown, formatted when called (for :func:`_text`'s error only)."""
    return lambda: f"{what} {shown(value)}"


def fresh_id() -> str:
    """The id a memory gets when its caller gives none: 32 hex digits, the
    creation time in milliseconds (12) then 80 random bits (20). Ids made in
    a later millisecond sort after: new ids go to the end of the catalog's
    (ns, id) index, where random ids (uuid4) dirtied one of its pages per
    memory, each written to the WAL again (an add of 1 000 memories wrote
    ~1 000 of them; docs/benchmarks.md, issue 31)."""
    return f"{time.time_ns() // 1_000_000:012x}{os.urandom(10).hex()}"


def check_id(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > ID_MAX_LEN or "\x00" in value:
        raise InvalidInputError(
            f"invalid memory id {shown(value)}: expected a non-empty string of at most {ID_MAX_LEN} characters"
        )
    return _text(value, _named("memory id", value))


def check_key(value: Any) -> str | None:
    """A memory's slot: ``None``, or 1-128 characters of letters, digits
    (any script) and ``_ . : / - @ # +``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidKeyError(f"key must be a string or None, got {type(value).__name__}")
    if not KEY_RE.fullmatch(value):
        raise InvalidKeyError(
            f"invalid key {shown(value, 40)} ({len(value)} characters): expected 1-{KEY_MAX_LEN} characters of "
            "letters, digits and _ . : / - @ # + (no spaces)"
        )
    return _text(value, _named("key", value))


def listed(values: Any, what: str, max_count: int) -> list[Any]:
    """``values`` (a list, tuple, set or other iterable, not a str, bytes or
    mapping) as a list of at most ``max_count`` entries; InvalidInputError
    otherwise. The count is checked before any entry is looked at: an
    iterable is read to one entry past the limit, no further."""
    if isinstance(values, (str, bytes, Mapping)):
        raise InvalidInputError(f"{what} must be a list of strings, got {type(values).__name__} {shown(values)}")
    if isinstance(values, (list, tuple)):
        if len(values) > max_count:
            raise InvalidInputError(f"{what}: {len(values)} entries, more than the limit of {max_count}")
        return list(values)
    try:
        items = list(itertools.islice(iter(values), max_count + 1))
    except TypeError:
        raise InvalidInputError(f"{what} must be a list of strings, got {type(values).__name__}") from None
    if len(items) > max_count:
        raise InvalidInputError(f"{what}: more than the limit of {max_count} entries")
    return items


def check_tags(tags: Any, max_tags: int, what: str = "tags") -> tuple[str, ...]:
    """Tags are non-empty strings; duplicates are dropped, order kept. At most
    :data:`TAGS_MAX_LISTED` entries as given and ``max_tags`` distinct ones;
    linear time."""
    if tags is None:
        return ()
    out: dict[str, None] = {}  # insertion-ordered set: dropping duplicates in one pass
    for t in listed(tags, what, max(TAGS_MAX_LISTED, max_tags)):
        if not isinstance(t, str) or not t or len(t) > TAG_MAX_LEN or "\x00" in t:
            raise InvalidInputError(
                f"invalid tag {shown(t)}: expected a non-empty string of at most {TAG_MAX_LEN} characters"
            )
        if t not in out:
            out[_text(t, _named("tag", t))] = None
    if len(out) > max_tags:
        raise InvalidInputError(f"a memory may carry at most {max_tags} tags, got {len(out)}")
    return tuple(out)


def check_search_flags(include_warm: Any, record_access: Any, explain: Any, memory_types: Any) -> list[str] | None:
    """``search``'s switches as booleans (``record_access`` may be None: the
    policy's), not truthy values (``record_access="no"`` would record); its
    ``memory_types`` as a list of at most 64 labels, or None. Returns the list."""
    for name, value, none_ok in (
        ("include_warm", include_warm, False),
        ("record_access", record_access, True),
        ("explain", explain, False),
    ):
        if type(value) is not bool and not (none_ok and value is None):
            raise InvalidInputError(f"{name} must be True or False{' or None' if none_ok else ''}, got {shown(value)}")
    if memory_types is None:
        return None
    return [check_str(t, "memory_types", LABEL_MAX_CHARS) for t in listed(memory_types, "memory_types", 64)]


def check_ttl(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise InvalidInputError(f"ttl_seconds must be a positive number or None, got {shown(value)}")
    x = float(value)
    if not (x > 0.0 and math.isfinite(x)):
        raise InvalidInputError(f"ttl_seconds must be positive and finite, got {shown(value)}")
    return x


def check_positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInputError(f"{what} must be a positive integer, got {shown(value)}")
    return int(value)


def check_seconds(value: Any, what: str, *, optional: bool = False) -> Any:
    """A positive, finite number of seconds (or None when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 < float(value) < math.inf):
        raise InvalidInputError(f"{what} must be a positive, finite number of seconds, got {shown(value)}")
    return float(value)


LABEL_MAX_CHARS = 128  # a memory's type or source: a label, not text


def check_str(value: Any, what: str, max_chars: int | None = None) -> str:
    """A valid Unicode string; at most ``max_chars`` characters when given (checked first)."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, got {type(value).__name__}")
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInputError(f"{what} {shown(value)} is longer than {max_chars} characters")
    return _text(value, what)


def check_text(value: Any, what: str, max_chars: int = CONTENT_MAX_CHARS) -> str:
    """Text to store or embed: a non-empty string (whitespace alone says
    nothing) of valid Unicode, at most ``max_chars`` characters (the length
    is checked first, so a long text costs nothing to refuse)."""
    if isinstance(value, str) and len(value) > max_chars:
        raise InvalidInputError(
            f"{what} is {len(value)} characters, more than the limit of {max_chars} "
            "(Settings.max_content_chars; a server's --max-content-chars): split it into "
            "several memories"
        )
    value = check_str(value, what)
    if not value.strip():
        raise InvalidInputError(f"{what} must not be empty")
    return value


def check_content(value: Any, max_chars: int = CONTENT_MAX_CHARS) -> str:
    """A memory's text: see :func:`check_text`."""
    return check_text(value, "content", max_chars)


def check_time(value: Any, what: str) -> float:
    """A point in time: POSIX seconds (a finite number), an aware
    ``datetime``, or an ISO 8601 string (UTC unless it has an offset)."""
    import datetime as _dt

    from tierstore.core.store_clock import parse_time

    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        return value.timestamp()
    if isinstance(value, str):
        try:
            t = parse_time(value[:64])  # no time is longer: a long string is refused as it is
            if len(value) > 64:
                raise ValueError(f"{shown(value)} is not a time")
        except ValueError as exc:
            raise InvalidInputError(f"{what}: {exc}") from None
        if not math.isfinite(t):  # "NaN", "inf", "1e999" read as floats
            raise InvalidInputError(f"{what} must be a finite time, got {shown(value)}")
        return t
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(float(value))
    ):
        raise InvalidInputError(f"{what} must be POSIX seconds, a datetime or an ISO 8601 string, got {shown(value)}")
    return float(value)


def check_id_list(ids: Any, what: str = "ids", max_count: int | None = None) -> list[str]:
    """One id or a list (any iterable but a mapping) of ids; at most
    ``max_count`` of them when given, counted before any is checked."""
    if isinstance(ids, str):
        return [check_id(ids)]
    if isinstance(ids, (bytes, Mapping)) or not isinstance(ids, Iterable):
        raise InvalidInputError(f"{what} must be a string or a list of strings, got {type(ids).__name__}")
    items = listed(ids, what, max_count) if max_count is not None else ids
    return [check_id(i) for i in items]


def check_supersedes(ids: Any) -> list[str]:
    """``add``'s ``supersedes``: one id or a list of at most
    :data:`SUPERSEDES_MAX` ids (counted first), duplicates dropped in order
    (linear time: each id is looked up and marked once)."""
    if ids is None:
        return []
    return list(dict.fromkeys(check_id_list(ids, "supersedes", SUPERSEDES_MAX)))


METADATA_MAX_BYTES = 65_536  # a memory's metadata, as compact UTF-8 JSON
METADATA_MAX_DEPTH = 32  # nesting of dicts and lists


def check_metadata(value: Any, max_bytes: int = METADATA_MAX_BYTES) -> str | None:
    """A memory's free-form metadata: ``None`` or a mapping with string keys
    whose values are JSON (``None``, bool, int, finite float, str, lists and
    tuples of them, mappings with string keys), at most ``max_bytes`` bytes as
    compact UTF-8 JSON. Returns that JSON text (``None`` for none); a tuple
    reads back as a list. Raises InvalidInputError naming the offending path."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"metadata must be a dict with string keys, got {type(value).__name__}")
    _check_json(value, "metadata", 0)
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise InvalidInputError(f"metadata is {size} bytes as JSON, more than the limit of {max_bytes}")
    return text


_fast_loads: Callable[[str], Any] | None
try:  # a faster parser when installed (LangChain's own dependencies bring it); json otherwise
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = None

# 19 digits in a row: maybe an integer beyond 64 bits, which orjson reads as a float (json keeps it exact)
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def load_metadata(text: str) -> dict[str, Any]:
    """A memory's metadata back from the JSON text :func:`check_metadata`
    made: a fresh dict each call (the caller may change it). orjson when
    installed (about 2 us less per call than json on a small dict: a search
    hit's metadata is read per hit), json when the text may hold an integer
    orjson would not keep exact."""
    if _fast_loads is None or _LONG_DIGITS.search(text) is not None:
        return json.loads(text)
    return _fast_loads(text)


def _check_json(value: Any, path: str, depth: int) -> None:
    if depth > METADATA_MAX_DEPTH:
        raise InvalidInputError(f"{path}: nested deeper than {METADATA_MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{path}: {shown(value)} is not a finite number (JSON has no NaN or infinity)")
        return
    if isinstance(value, str):
        _text(value, path)
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidInputError(f"{path}: key {k!r} is not a string (JSON keys are strings)")
            _text(k, f"{path} key {k[:40]!r}")
            _check_json(v, f"{path}[{k[:40]!r}]", depth + 1)
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(v, f"{path}[{i}]", depth + 1)
        return
    raise InvalidInputError(
        f"{path}: {type(value).__name__} is not JSON (expected None, bool, int, float, str, list or dict)"
    )

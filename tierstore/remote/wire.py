"""The HTTP API's JSON vocabulary, shared by the server and :class:`RemoteStore`.

One module so that the two sides cannot drift: how a vector, a
:class:`Memory`, a :class:`Hit`, an :class:`Explain`, a :class:`SweepReport`,
:class:`Stats` and an error travel as JSON, and back.

Vectors: a JSON array of numbers, or ``{"base64": "..."}`` holding
little-endian float32 bytes (exact, and a quarter of the size of decimal
text). A JSON string where a vector goes is *text*, embedded by the server's
embedder. Errors: ``{"error": {"type": "<class in tierstore.errors>",
"message": "..."}}`` with the status of :func:`status_of`.

Two codecs, negotiated per request: JSON (the default, what any HTTP client
sends) and msgpack (``Content-Type`` / ``Accept: application/msgpack``): the
same maps, and a vector may be a bin of little-endian float32 bytes. A
msgpack body is taken by the search routes only (:data:`PACKED_ROUTES`: their
fields are all checked by type; no free-form object that bytes could hide
in); any route answers in msgpack when the client accepts it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack
import numpy as np

from tierstore import errors
from tierstore.errors import (
    ClockSkewError,
    DuplicateIdError,
    InvalidInputError,
    InvalidVectorError,
    MemoryNotFoundError,
    ReadOnlyStoreError,
    RemoteError,
    StoreClosedError,
    TierStoreError,
)
from tierstore.records import Explain, Hit, Memory, Stats, SweepReport

API_VERSION = "v1"

JSON = b"application/json"
MSGPACK = b"application/msgpack"
CODECS = ("json", "msgpack")  # what /v1/info says this server reads and writes
PACKED_ROUTES = frozenset({"/v1/search", "/v1/search_batch"})  # the routes that take a msgpack body


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of this API")


def unpack_body(raw: bytes) -> Any:
    """A msgpack request body: maps with string keys only, no extension
    types; strings must be valid UTF-8. InvalidInputError when it is not one
    whole msgpack value (the sizes it declares are bounded by the body's own
    length, which the server bounds before it reads it)."""
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=True, ext_hook=_no_ext)
    except Exception as exc:  # noqa: BLE001 - msgpack raises ValueError, TypeError, StackError, UnicodeDecodeError
        raise InvalidInputError(f"the body is not valid msgpack: {type(exc).__name__}: {str(exc)[:200]}") from None


# ------------------------------------------------------------------ vectors


def encode_vector(v: np.ndarray) -> dict[str, str]:
    """A float32 vector as ``{"base64": little-endian float32}``."""
    return {"base64": base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode("ascii")}


def vector_out(v: Any) -> Any:
    """A vector argument as it goes on the wire: float32 arrays as base64
    (exact bits); other numeric arrays and lists as JSON numbers (float64
    survives exactly, as the store would convert it); a str as text. Anything
    else goes in a form the server refuses with the error the store raises
    for it (never as text, which the server would embed)."""
    if isinstance(v, str) or v is None:
        return v
    if isinstance(v, np.ndarray):
        if v.dtype == np.float32 and v.ndim == 1:
            return encode_vector(v)
        if v.dtype.kind in "iufb":
            return v.tolist()
        return {"unsupported": f"array of {v.dtype}"}
    if isinstance(v, (list, tuple)):
        return [x.item() if isinstance(x, np.generic) else x for x in v]
    if isinstance(v, (int, float, np.generic)) and not isinstance(v, (complex, np.complexfloating)):
        return v.item() if isinstance(v, np.generic) else v
    return {"unsupported": type(v).__name__}


def vector_out_packed(v: Any) -> Any:
    """:func:`vector_out` for a msgpack body: a float32 vector as its little-endian bytes (no base64)."""
    if isinstance(v, np.ndarray) and v.dtype == np.float32 and v.ndim == 1:
        return np.ascontiguousarray(v, dtype="<f4").tobytes()
    return vector_out(v)


def vector_in(v: Any, what: str) -> Any:
    """A vector from the wire: ``{"base64": ...}`` or msgpack bytes decoded to
    float32; a list or a str passed on (the store checks lists, and embeds text)."""
    if isinstance(v, bytes):
        if len(v) % 4:
            raise InvalidVectorError(f"{what}: {len(v)} bytes is not a whole number of float32 values")
        return np.frombuffer(v, dtype="<f4").astype(np.float32)
    if isinstance(v, dict):
        if "unsupported" in v:  # what the client could not send as numbers (complex, bytes, objects)
            raise InvalidVectorError(f"{what} must hold real numbers, got {v['unsupported']}")
        if set(v) != {"base64"} or not isinstance(v["base64"], str):
            raise InvalidVectorError(f'{what} as an object must be {{"base64": "<little-endian float32>"}}')
        try:
            raw = base64.b64decode(v["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidVectorError(f"{what}: not valid base64") from None
        if len(raw) % 4:
            raise InvalidVectorError(f"{what}: {len(raw)} bytes is not a whole number of float32 values")
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    return v


def array_from_wire(v: Any) -> np.ndarray | None:
    """An embedding the server sent (base64 float32) as a numpy array."""
    if v is None:
        return None
    return np.frombuffer(base64.b64decode(v["base64"]), dtype="<f4").astype(np.float32)


# ------------------------------------------------------------------ records

_MEMORY_FIELDS = [f.name for f in dataclasses.fields(Memory)]
_memory_values = operator.attrgetter(*_MEMORY_FIELDS)


def memory_to_wire(m: Memory) -> dict[str, Any]:
    out = dict(zip(_MEMORY_FIELDS, _memory_values(m)))  # one C call for the fields: encoded per hit, per search
    out["tags"] = list(m.tags)
    out["embedding"] = None if m.embedding is None else encode_vector(m.embedding)
    return out


def memory_from_wire(d: Mapping[str, Any]) -> Memory:
    fields = dict(d)
    fields["tags"] = tuple(fields["tags"])
    fields["embedding"] = array_from_wire(fields.get("embedding"))
    return Memory(**fields)


def explain_to_wire(e: Explain | None) -> dict[str, Any] | None:
    return None if e is None else dataclasses.asdict(e)


def explain_from_wire(d: Mapping[str, Any] | None) -> Explain | None:
    return None if d is None else Explain(**d)


def hit_to_wire(h: Hit) -> dict[str, Any]:
    return {"id": h.id, "score": h.score, "memory": memory_to_wire(h.memory), "explain": explain_to_wire(h.explain)}


_MEMORY_KEYS = frozenset(_MEMORY_FIELDS)


class WireRows:
    """The hits of one search response (:class:`~tierstore.records.Hit`'s
    source): ids, scores and explanations read at once, each Memory built
    from its map on first use, as an in-process search builds its hits'
    (a caller reading ids, scores and contents builds none). Each hit's shape
    is checked here, so a malformed response fails at the search."""

    __slots__ = ("ids", "scores", "explains", "_maps", "_memories")

    def __init__(self, hits: Sequence[Mapping[str, Any]]) -> None:
        ids: list[str] = []
        scores: list[float] = []
        maps: list[dict[str, Any]] = []
        explained = False
        keys = _MEMORY_KEYS
        try:  # one pass; a hit that is not a map, or lacks a key, fails in it (TypeError, KeyError)
            for h in hits:
                m, hid, score = h["memory"], h["id"], h["score"]
                if type(m) is not dict or m.keys() != keys or type(hid) is not str or type(score) not in (float, int):
                    raise TypeError
                ids.append(hid)
                scores.append(float(score))
                maps.append(m)
                explained = explained or h.get("explain") is not None
        except (TypeError, KeyError, AttributeError):
            raise RemoteError("the server sent a search hit that is not an id, a score and a memory") from None
        self.ids = ids
        self.scores = scores
        self.explains = [explain_from_wire(h.get("explain")) for h in hits] if explained else None
        self._maps = maps
        self._memories: list[Memory | None] = [None] * len(maps)

    def hits(self) -> list[Hit]:
        return [Hit(self, j) for j in range(len(self.ids))]

    def memory(self, j: int) -> Memory:
        m = self._memories[j]
        if m is None:  # two threads may both build it: the same value
            m = self._memories[j] = memory_from_wire(self._maps[j])
        return m

    def content(self, j: int) -> str:
        return self._maps[j]["content"]

    def metadata(self, j: int) -> dict[str, Any] | None:
        return self.memory(j).metadata


def sweep_report_from_wire(d: Mapping[str, Any]) -> SweepReport:
    return SweepReport(**d)


def stats_from_wire(d: Mapping[str, Any]) -> Stats:
    return Stats(**d)


def dumps(obj: Any) -> bytes:
    """Compact JSON. NaN and infinities are written as Python's json writes
    them (``NaN``, ``Infinity``): both ends of this API read them back."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ------------------------------------------------------------------ errors

# Errors a client caused (or may act on): their messages name its input, not
# the server's files, so they go back as they are. Order matters: the first
# class an error is an instance of decides its status.
CLIENT_ERRORS: list[tuple[type[TierStoreError], int]] = [
    (MemoryNotFoundError, 404),
    (DuplicateIdError, 409),
    (InvalidInputError, 400),
    (ReadOnlyStoreError, 409),
    (ClockSkewError, 409),
    (StoreClosedError, 503),
]


def client_status(exc: BaseException) -> int | None:
    """The HTTP status of an error whose message may go to the client, or None (an internal error)."""
    for cls, status in CLIENT_ERRORS:
        if isinstance(exc, cls):
            return status
    return None


ERROR_MAX_CHARS = 2000  # an error message's length on the wire: a message quoting a huge value is cut


def error_body(type_name: str, message: str) -> dict[str, Any]:
    if len(message) > ERROR_MAX_CHARS:
        message = f"{message[:ERROR_MAX_CHARS]}... (cut: {len(message)} characters)"
    return {"error": {"type": type_name, "message": message}}


def error_from_wire(status: int, body: Any) -> TierStoreError:
    """The exception a response stands for: the same ``tierstore.errors``
    class the store raised, with its message."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return RemoteError(f"the server answered {status} without an error body")
    name, message = err.get("type"), str(err.get("message", ""))
    cls = getattr(errors, name, None) if isinstance(name, str) else None
    if isinstance(cls, type) and issubclass(cls, TierStoreError):
        return cls(message)
    return RemoteError(f"{name}: {message}" if name else message)

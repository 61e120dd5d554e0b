"""The cold tier's archive batch format: self-describing msgpack, with checksums.

An archive object is::

    MAGIC (8 bytes "TSARCH01")
    frame(header)                 msgpack map: format, version, namespace, key, created_at, dim, count
                                  (and ``layout``: "code" in an object a compaction ordered by meaning)
    frame(record) * count         msgpack map per memory (every field, embedding as raw float32 bytes;
                                  ``metadata``, JSON text or nil, is absent from records of earlier code)
    frame(index)                  msgpack map: ids, offsets, lengths (of the record frames)
    index offset (u64 LE) + END (8 bytes "TSAEND01")

and a frame is ``length (u32 LE) | crc32 (u32 LE) | payload``. Restoring one
memory is one ranged GET of its record frame (offset and length are in the
catalog); rebuilding the catalog needs only the objects. Nothing here is
pickled: msgpack with ``raw=False`` and strict map keys, then every field is
type-checked before use.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from tierstore.errors import CorruptDataError
from tierstore.rules.supersession import KINDS

MAGIC = b"TSARCH01"
END = b"TSAEND01"
FORMAT = "tierstore-archive"
VERSION = 1
_FRAME = struct.Struct("<II")
_TAIL = struct.Struct("<Q")

# Record fields and their types, checked on every read.
RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "ns": (str,),
    "id": (str,),
    "content": (str,),
    "embedding": (bytes,),
    "memory_type": (str,),
    "source": (str,),
    "tags": (list,),
    "created_at": (float, int),
    "last_accessed_at": (float, int),
    "access_count": (int,),
    "conf_llm": (float, int, type(None)),
    "conf_rule": (float, int, type(None)),
    "conf_feedback": (float, int, type(None)),
    "confidence": (float, int),
    "t_conf": (float, int),
    "ttl_seconds": (float, int, type(None)),
    "pinned": (bool,),
    "w_ref": (float, int),
    "t_ref": (float, int),
    "half_life": (float, int),
    "ttl": (float, int, type(None)),
    "ttl_anchor": (float, int),
    "ctx_mult": (float, int),
    "archived_at": (float, int),
}
# Fields added later, absent from records written before them: name -> types.
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "metadata": (str, type(None)),  # the caller's metadata, compact JSON text
    "key": (str, type(None)),  # the memory's slot (add(key=...))
    # Supersession marks as the catalog held them when the record was written
    # (MARK_FIELDS each), so that a catalog rebuilt from the bucket keeps a
    # retired statement retired: the mark on this memory, and the marks it made.
    "superseded_by": (dict, type(None)),
    "supersedes": (list, type(None)),
}
# A mark in a record: the other memory's id, then the supersessions columns.
MARK_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "kind": (str,),
    "similarity": (float, int, type(None)),
    "t": (float, int),
    "prior_ttl_seconds": (float, int, type(None)),
}


def frame(payload: bytes) -> bytes:
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(payload: bytes, where: str) -> Any:
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=True, use_list=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise CorruptDataError(f"{where}: not valid msgpack ({exc})") from None


def read_frame(data: bytes, offset: int, where: str) -> tuple[bytes, int]:
    """The payload of the frame at ``offset`` and the offset after it."""
    if offset + _FRAME.size > len(data):
        raise CorruptDataError(f"{where}: truncated frame at byte {offset}")
    length, crc = _FRAME.unpack_from(data, offset)
    start = offset + _FRAME.size
    payload = data[start : start + length]
    if len(payload) != length:
        raise CorruptDataError(f"{where}: truncated frame at byte {offset}")
    if zlib.crc32(payload) != crc:
        raise CorruptDataError(f"{where}: checksum mismatch in the frame at byte {offset}")
    return payload, start + length


@dataclass(frozen=True)
class ArchiveEntry:
    """Where one record sits in an archive object: its frame's ``offset`` and
    ``length`` in bytes, and ``vector_at``, where its embedding's bytes start
    within that frame (a search reads them alone: :func:`vector_at`)."""

    id: str
    offset: int
    length: int
    vector_at: int = -1


def vector_at(frame: bytes, embedding: bytes) -> int:
    """Where ``embedding`` (a record's embedding bytes) starts in ``frame``
    (that record's frame), so that a search can read the vector alone and
    check it against its CRC32 (:func:`vector_crc`) without decoding the
    record. The first occurrence: should an earlier field hold the same
    bytes, reading them there gives the same vector. -1 if absent."""
    return frame.find(embedding) if embedding else -1


def vector_crc(embedding: bytes) -> int:
    """The CRC32 of an embedding's bytes, as the cold index keeps it."""
    return zlib.crc32(embedding)


def encode_batch(
    key: str, namespace: str, dim: int, created_at: float, records: Sequence[dict[str, Any]]
) -> tuple[bytes, list[ArchiveEntry]]:
    """Serialise ``records`` (dicts with RECORD_FIELDS) into one archive object."""
    framed = []
    for rec in records:
        f = frame(pack(rec))
        framed.append((rec["id"], f, vector_at(f, rec["embedding"])))
    return encode_frames(key, namespace, dim, created_at, framed)


def encode_frames(
    key: str,
    namespace: str,
    dim: int,
    created_at: float,
    frames: Sequence[tuple[str, bytes, int]],
    layout: str | None = None,
) -> tuple[bytes, list[ArchiveEntry]]:
    """One archive object from record frames already made: ``(id, frame,
    vector_at)`` each, copied as they are (a compaction moves records
    between objects without decoding them again; a frame carries its own
    length and CRC32, and ``vector_at`` is relative to the frame, so it stays
    right). ``layout``: how the records were ordered (``"code"``: by meaning,
    ``cold_layout``), kept in the header for whoever reads the object; readers
    ignore header fields they do not know."""
    parts = [MAGIC]
    header: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "namespace": namespace,
        "key": key,
        "created_at": float(created_at),
        "dim": int(dim),
        "count": len(frames),
    }
    if layout is not None:
        header["layout"] = layout
    parts.append(frame(pack(header)))
    offset = sum(len(p) for p in parts)
    entries: list[ArchiveEntry] = []
    for mid, framed, at in frames:
        entries.append(ArchiveEntry(mid, offset, len(framed), at))
        parts.append(framed)
        offset += len(framed)
    index = {
        "ids": [e.id for e in entries],
        "offsets": [e.offset for e in entries],
        "lengths": [e.length for e in entries],
    }
    index_offset = offset
    parts.append(frame(pack(index)))
    parts.append(_TAIL.pack(index_offset) + END)
    return b"".join(parts), entries


def decode_record(frame: bytes, where: str, dim: int) -> dict[str, Any]:
    """One record from its frame (a ranged GET), checked field by field."""
    return check_record(_record_map(frame, where), where, dim)


def _record_map(frame: bytes, where: str) -> Any:
    """The unpacked payload of one record frame, checked against its CRC32 and length."""
    payload, end = read_frame(frame, 0, where)
    if end != len(frame):
        raise CorruptDataError(f"{where}: record frame has {len(frame) - end} trailing bytes")
    return unpack(payload, where)


def decode_vector(frame: bytes, where: str, dim: int) -> tuple[str, bytes]:
    """``(id, embedding bytes)`` of a record from its frame: the frame
    checked against its checksum, the id's and embedding's types and the
    embedding's length against ``dim``; the other fields are not checked (a
    search rescoring candidates reads only these two; :func:`decode_record`
    checks every field). Raises CorruptDataError as :func:`decode_record`
    does for a damaged frame."""
    rec = _record_map(frame, where)
    if not isinstance(rec, dict):
        raise CorruptDataError(f"{where}: a record is not a map")
    mid, emb = rec.get("id"), rec.get("embedding")
    if not isinstance(mid, str) or not isinstance(emb, bytes):
        raise CorruptDataError(f"{where}: record lacks its id or embedding")
    _check_embedding(mid, emb, where, dim)
    return mid, emb


def _check_embedding(mid: str, emb: bytes, where: str, dim: int) -> None:
    if len(emb) != 4 * dim:
        raise CorruptDataError(f"{where}: record {mid!r} has a {len(emb)}-byte embedding, expected {4 * dim}")


def check_record(rec: Any, where: str, dim: int) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise CorruptDataError(f"{where}: a record is not a map")
    for name, types in RECORD_FIELDS.items():
        if name not in rec:
            raise CorruptDataError(f"{where}: record lacks field {name!r}")
        value = rec[name]
        if not isinstance(value, types) or (types == (int,) and isinstance(value, bool)):
            raise CorruptDataError(f"{where}: record field {name!r} has type {type(value).__name__}")
    _check_embedding(rec["id"], rec["embedding"], where, dim)
    if not all(isinstance(t, str) for t in rec["tags"]):
        raise CorruptDataError(f"{where}: record {rec['id']!r} has a non-string tag")
    for name, types in OPTIONAL_FIELDS.items():
        if not isinstance(rec.get(name), types):
            raise CorruptDataError(f"{where}: record field {name!r} has type {type(rec[name]).__name__}")
    marks = ([rec["superseded_by"]] if rec.get("superseded_by") is not None else []) + (rec.get("supersedes") or [])
    for mark in marks:
        if (
            not isinstance(mark, dict)
            or any(not isinstance(mark.get(f, ...), t) or isinstance(mark.get(f), bool) for f, t in MARK_FIELDS.items())
            or mark["kind"] not in KINDS
        ):
            raise CorruptDataError(f"{where}: record {rec['id']!r} holds a malformed supersession mark")
    if rec.get("metadata") is not None:
        try:
            json.loads(rec["metadata"])
        except ValueError:
            raise CorruptDataError(f"{where}: record {rec['id']!r} has metadata that is not JSON") from None
    return rec


def decode_batch(data: bytes, where: str) -> tuple[dict[str, Any], list[tuple[ArchiveEntry, dict[str, Any]]]]:
    """Header and every (entry, record) of a whole archive object."""
    if not data.startswith(MAGIC):
        raise CorruptDataError(f"{where}: not a tierstore archive (bad magic)")
    if len(data) < len(MAGIC) + _TAIL.size + len(END) or not data.endswith(END):
        raise CorruptDataError(f"{where}: truncated archive (no end marker)")
    payload, offset = read_frame(data, len(MAGIC), where)
    header = unpack(payload, where)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CorruptDataError(f"{where}: bad archive header")
    if header.get("version") != VERSION:
        raise CorruptDataError(f"{where}: unsupported archive version {header.get('version')!r}")
    dim, count = header.get("dim"), header.get("count")
    if not isinstance(dim, int) or not isinstance(count, int) or dim <= 0 or count < 0:
        raise CorruptDataError(f"{where}: bad archive header fields")
    (index_offset,) = _TAIL.unpack_from(data, len(data) - len(END) - _TAIL.size)
    ipayload, _ = read_frame(data, index_offset, where)
    index = unpack(ipayload, where)
    if not isinstance(index, dict) or not all(isinstance(index.get(k), list) for k in ("ids", "offsets", "lengths")):
        raise CorruptDataError(f"{where}: bad archive index")
    if not len(index["ids"]) == len(index["offsets"]) == len(index["lengths"]) == count:
        raise CorruptDataError(f"{where}: archive index does not match its header")
    out = []
    for mid, off, length in zip(index["ids"], index["offsets"], index["lengths"]):
        if not isinstance(off, int) or not isinstance(length, int) or off < 0 or off + length > index_offset:
            raise CorruptDataError(f"{where}: archive index entry out of range")
        framed = data[off : off + length]
        rec = decode_record(framed, where, dim)
        if rec["id"] != mid or rec["ns"] != header.get("namespace"):
            raise CorruptDataError(f"{where}: archive index names {mid!r}, the record holds {rec['id']!r}")
        out.append((ArchiveEntry(mid, off, length, vector_at(framed, rec["embedding"])), rec))
    return header, out


def read_index(data: bytes, where: str) -> list[ArchiveEntry]:
    """Entries of a whole archive object without decoding every record."""
    return [entry for entry, _ in decode_batch(data, where)[1]]

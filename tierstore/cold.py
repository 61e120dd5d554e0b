"""The cold tier: archive batches in an object store.

The catalog keeps each archived memory's metadata, text and location (object
key, offset, length), so restore by id is one ranged GET per memory (adjacent
records of one object are fetched together), and restore by filter or keyword
is a catalog query first. Objects are immutable; a batch is deleted once none
of its memories is still cold there.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .archive import ArchiveEntry, decode_batch, decode_record, encode_batch
from .catalog import MemoryRow
from .errors import CorruptDataError
from .objectstore import ObjectStore

ARCHIVE_PREFIX = "archive"
_COALESCE_GAP = 64 * 1024  # fetch neighbouring records in one GET when closer than this


def record_from_row(row: MemoryRow, archived_at: float) -> dict[str, Any]:
    """The archive record of a catalog row (the embedding bytes as stored)."""
    if row.embedding is None:
        raise CorruptDataError(f"memory {row.id!r} has no embedding in the catalog")
    return {
        "ns": row.ns, "id": row.id, "content": row.content, "embedding": bytes(row.embedding),
        "memory_type": row.memory_type, "source": row.source, "tags": list(row.tags),
        "created_at": row.created_at, "last_accessed_at": row.last_accessed_at, "access_count": row.access_count,
        "conf_llm": row.conf_llm, "conf_rule": row.conf_rule, "conf_feedback": row.conf_feedback,
        "confidence": row.confidence, "t_conf": row.t_conf, "ttl_seconds": row.ttl_seconds,
        "pinned": bool(row.pinned), "w_ref": row.w_ref, "t_ref": row.t_ref, "half_life": row.half_life,
        "ttl": None if row.ttl == float("inf") else row.ttl, "ttl_anchor": row.ttl_anchor,
        "ctx_mult": row.ctx_mult, "archived_at": float(archived_at),
    }


@dataclass(frozen=True)
class Location:
    key: str
    offset: int
    length: int


class ColdTier:
    def __init__(self, store: ObjectStore, dim: int) -> None:
        self.store = store
        self.dim = dim

    @staticmethod
    def new_key(ns: str, batch: int) -> str:
        """A batch key: deterministic once recorded in the catalog, and with a
        random part so that a store rebuilt on an old bucket never reuses a key."""
        return f"{ARCHIVE_PREFIX}/{ns}/{batch:012d}-{secrets.token_hex(4)}.tsa"

    def write_batch(self, key: str, ns: str, rows: Sequence[MemoryRow], now: float) -> list[ArchiveEntry]:
        """Write the archive object for ``rows`` under ``key`` unless it exists.

        If a previous attempt already wrote it (a crash before the catalog
        commit), its own index is used, after checking it holds exactly the
        expected memories, so offsets always match the object."""
        data, entries = encode_batch(key, ns, self.dim, now, [record_from_row(r, now) for r in rows])
        if self.store.put_if_absent(key, data):
            return entries
        existing = self.store.get(key)
        header, records = decode_batch(existing, f"archive object {key}")
        have = sorted(e.id for e, _ in records)
        if header.get("key") != key or have != sorted(r.id for r in rows):
            raise CorruptDataError(f"archive object {key} exists with different contents")
        return [e for e, _ in records]

    def fetch(self, locations: Sequence[Location]) -> list[dict[str, Any]]:
        """The records at ``locations`` (same order), each checked against its
        checksum. Records of one object that lie close together come in one
        ranged GET."""
        out: list[dict[str, Any] | None] = [None] * len(locations)
        by_key: dict[str, list[int]] = {}
        for i, loc in enumerate(locations):
            by_key.setdefault(loc.key, []).append(i)
        for key, idxs in by_key.items():
            idxs.sort(key=lambda i: locations[i].offset)
            group: list[int] = []
            for i in idxs + [-1]:
                if group and (i < 0 or locations[i].offset - _end(locations[group[-1]]) > _COALESCE_GAP):
                    start = locations[group[0]].offset
                    end = max(_end(locations[j]) for j in group)
                    blob = self.store.get(key, start, end)
                    for j in group:
                        loc = locations[j]
                        frame = blob[loc.offset - start : loc.offset - start + loc.length]
                        out[j] = decode_record(frame, f"archive object {key} at byte {loc.offset}", self.dim)
                    group = []
                if i >= 0:
                    group.append(i)
        return out  # type: ignore[return-value]

    def delete(self, key: str) -> None:
        self.store.delete(key)

    def list_batches(self) -> list[str]:
        return [k for k in self.store.list(ARCHIVE_PREFIX + "/") if k.endswith(".tsa")]

    def read_batch(self, key: str) -> tuple[dict[str, Any], list[tuple[ArchiveEntry, dict[str, Any]]]]:
        return decode_batch(self.store.get(key), f"archive object {key}")


def _end(loc: Location) -> int:
    return loc.offset + loc.length


def batch_number(key: str) -> int | None:
    """The catalog batch number encoded in a key, if it has the standard form."""
    name = key.rsplit("/", 1)[-1]
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def group_by_ns(rows: Iterable[MemoryRow]) -> dict[str, list[MemoryRow]]:
    out: dict[str, list[MemoryRow]] = {}
    for r in rows:
        out.setdefault(r.ns, []).append(r)
    return out

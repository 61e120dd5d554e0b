"""The cold tier: archive batches in an object store.

The catalog keeps each archived memory's metadata, text and location (object
key, offset, length), so restore by id is one ranged GET per memory (adjacent
records of one object are fetched together), and restore by filter or keyword
is a catalog query first. Objects are immutable; a batch is deleted once none
of its memories is still cold there.
"""

from __future__ import annotations

import re
import secrets
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tierstore.errors import CorruptDataError, ObjectNotFoundError, ObjectStoreError
from tierstore.rules.supersession import RecordMarks
from tierstore.storage.catalog import MemoryRow
from tierstore.storage.objectstore import ObjectStore
from tierstore.tiers.archive import (
    ArchiveEntry,
    decode_batch,
    decode_record,
    decode_vector,
    encode_batch,
    encode_frames,
    vector_at,
)

ARCHIVE_PREFIX = "archive"
_COALESCE_GAP = 64 * 1024  # fetch neighbouring records in one GET when closer than this
_FRAME_HEAD = 8  # a frame's length and CRC32 (archive.frame): no embedding starts before
# Characters a namespace may hold that a key segment keeps as they are (a leading
# "." excepted: key segments may not start with one).
_NS_PLAIN = re.compile(r"[A-Za-z0-9_.-]")


def ns_segment(ns: str) -> str:
    """The namespace as one object-key segment.

    Ordinary namespaces are used as they are. A leading ``.`` (valid in a
    namespace, not at the start of a key segment) and any character a key
    cannot hold are escaped as ``=XX`` (UTF-8 bytes in hex); ``=`` never occurs
    in a namespace, so the escaping is unambiguous and no two namespaces share
    a segment. The namespace itself is in every object's header.
    """
    out = []
    for i, ch in enumerate(ns):
        if _NS_PLAIN.fullmatch(ch) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"={b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
    return "".join(out)


def record_from_row(row: MemoryRow, archived_at: float, marks: RecordMarks | None = None) -> dict[str, Any]:
    """The archive record of a catalog row (the embedding bytes as stored),
    with the supersession ``marks`` the catalog holds on it and by it."""
    if row.embedding is None:
        raise CorruptDataError(f"memory {row.id!r} has no embedding in the catalog")
    return {
        "ns": row.ns,
        "id": row.id,
        "content": row.content,
        "embedding": bytes(row.embedding),
        "memory_type": row.memory_type,
        "source": row.source,
        "tags": list(row.tags),
        "created_at": row.created_at,
        "last_accessed_at": row.last_accessed_at,
        "access_count": row.access_count,
        "conf_llm": row.conf_llm,
        "conf_rule": row.conf_rule,
        "conf_feedback": row.conf_feedback,
        "confidence": row.confidence,
        "t_conf": row.t_conf,
        "ttl_seconds": row.ttl_seconds,
        "pinned": bool(row.pinned),
        "w_ref": row.w_ref,
        "t_ref": row.t_ref,
        "half_life": row.half_life,
        "ttl": None if row.ttl == float("inf") else row.ttl,
        "ttl_anchor": row.ttl_anchor,
        "ctx_mult": row.ctx_mult,
        "archived_at": float(archived_at),
        "metadata": row.metadata,
        "key": row.key,
        "superseded_by": None if marks is None else marks.superseded_by,
        "supersedes": None if marks is None or not marks.supersedes else list(marks.supersedes),
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
        return f"{ARCHIVE_PREFIX}/{ns_segment(ns)}/{batch:012d}-{secrets.token_hex(4)}.tsa"

    def write_batch(
        self, key: str, ns: str, rows: Sequence[MemoryRow], now: float, marks: dict[str, RecordMarks] | None = None
    ) -> tuple[list[ArchiveEntry], int]:
        """Write the archive object for ``rows`` under ``key`` unless it exists
        (see :meth:`write_records`); ``marks``: each row's supersession marks
        by id. Returns the entries of ``rows`` and how many records the object holds."""
        marks = marks or {}
        return self.write_records(key, ns, [record_from_row(r, now, marks.get(r.id)) for r in rows], now)

    def write_records(
        self, key: str, ns: str, records: Sequence[dict[str, Any]], now: float
    ) -> tuple[list[ArchiveEntry], int]:
        """Write archive ``records`` (as :func:`record_from_row` makes them, or
        :meth:`fetch` returns them) into object ``key`` unless it exists.

        If a previous attempt already wrote it (a crash before the catalog
        commit, or a PUT that reached the store but whose response was lost),
        its own index is used, so offsets always match the object. That object
        may hold more memories than ``records``: members of the batch deleted,
        restored or pinned since the first attempt. Their records stay in the
        object, stale (the catalog does not point at them), until the object
        is rewritten. Every one of ``records`` must be in it, with the same
        embedding, or CorruptDataError is raised. Returns the entries of
        ``records``, in order, and how many records the object holds."""
        data, entries = encode_batch(key, ns, self.dim, now, records)
        if self.store.put_if_absent(key, data):
            return entries, len(entries)
        header, existing = decode_batch(self.store.get(key), f"archive object {key}")
        have = {e.id: (e, rec) for e, rec in existing}
        missing = [rec["id"] for rec in records if rec["id"] not in have]
        if header.get("key") != key or header.get("namespace") != ns or missing:
            raise CorruptDataError(
                f"archive object {key} exists with different contents"
                + (f" (it lacks {missing[0]!r})" if missing else " (another batch's header)")
            )
        for rec in records:
            if have[rec["id"]][1]["embedding"] != rec["embedding"]:
                raise CorruptDataError(f"archive object {key} holds a different embedding for {rec['id']!r}")
        return [have[rec["id"]][0] for rec in records], len(existing)

    def write_frames(
        self, key: str, ns: str, frames: Sequence[tuple[str, bytes, int]], now: float, layout: str | None = None
    ) -> list[ArchiveEntry]:
        """Write an object of record frames already made (``(id, frame,
        vector_at)``, as :meth:`fetch_frames` reads them) under ``key`` unless
        it exists (:func:`archive.encode_frames`; ``layout`` goes in its
        header). An object already there (a retried write) must hold every
        one of the frames, byte for byte, or CorruptDataError is raised.
        Returns the entries of ``frames``, in order."""
        data, entries = encode_frames(key, ns, self.dim, now, frames, layout)
        if self.store.put_if_absent(key, data):
            return entries
        existing = self.store.get(key)
        header, items = decode_batch(existing, f"archive object {key}")
        have = {e.id: e for e, _ in items}
        for mid, framed, _ in frames:
            e = have.get(mid)
            if header.get("key") != key or e is None or existing[e.offset : e.offset + e.length] != framed:
                raise CorruptDataError(f"archive object {key} exists with different contents (at {mid!r})")
        return [have[mid] for mid, _, _ in frames]

    def fetch_frames(self, locations: Sequence[Location]) -> list[tuple[dict[str, Any], bytes]]:
        """The records at ``locations`` (same order), each checked as
        :meth:`fetch` checks it, with its frame's bytes (to copy into
        another object as they are)."""
        return [
            (decode_record(frame, f"archive object {loc.key} at byte {loc.offset}", self.dim), frame)
            for loc, frame in zip(locations, self._frames(locations))
        ]

    def fetch(self, locations: Sequence[Location]) -> list[dict[str, Any]]:
        """The records at ``locations`` (same order), each checked against its
        checksum and field by field. Records of one object that lie close
        together come in one ranged GET."""
        return [rec for rec, _ in self.fetch_placed(locations)]

    def fetch_placed(self, locations: Sequence[Location]) -> list[tuple[dict[str, Any], int]]:
        """:meth:`fetch`'s records, each with where its embedding starts in
        its frame (:func:`archive.vector_at`: what the cold index keeps)."""
        out = []
        for loc, frame in zip(locations, self._frames(locations)):
            rec = decode_record(frame, f"archive object {loc.key} at byte {loc.offset}", self.dim)
            out.append((rec, vector_at(frame, rec["embedding"])))
        return out

    def vectors_by_object(
        self, locations: Sequence[Location], places: Sequence[Sequence[int]] | None = None
    ) -> Iterator[tuple[list[int], list[tuple[str | None, bytes]] | Exception]]:
        """Per archive object, as ``cold_index.fetch_vectors`` reads it: the
        positions in ``locations`` of its records and their ``(id,
        embedding)``, or the error that object raised: ObjectNotFoundError
        (missing), CorruptDataError (a damaged record: the object's other
        records are not returned either), ObjectStoreError or OSError (the
        store failed). One pass over every object, so that a caller serving
        what it can read skips the failed objects without a call per object.

        ``places``: per location ``(vector_at, vector_crc)``, or ``(-1, -1)``
        when not known (``ColdIndex.vector_places``). A location with a place
        is read as its embedding's bytes alone (``4 · dim`` at ``vector_at``
        in its frame) and kept if they match ``vector_crc``, the CRC32 of
        that memory's embedding: its id is not read and comes back None (the
        memory's own checksum stands for it). One that fails the check (a
        damaged object, or a record rewritten with another layout) is read
        again whole, as a location without a place is.

        A store that reads ranges of an open file (``read_ranges``: a local
        directory) reads each location with its own ``pread``, cheaper than
        one read of a span holding its neighbours' bytes too; other stores
        coalesce neighbouring locations into one ranged GET."""
        size = 4 * self.dim
        reads = list(locations)
        crcs: list[int | None] = [None] * len(reads)
        if places is not None:
            for i, (loc, (at, crc)) in enumerate(zip(locations, places)):
                if _FRAME_HEAD <= at and at + size <= loc.length and 0 <= crc:
                    reads[i], crcs[i] = Location(loc.key, loc.offset + at, size), crc
        gap = -1 if _ranges_reader(self.store) is not None else _COALESCE_GAP
        for key, idxs, spans, groups in _plan(reads, gap):
            try:
                frames = self._object_frames(key, reads, spans, groups)
                found: list[tuple[str | None, bytes]] = []
                whole: list[int] = []  # positions in idxs to read as whole records
                for n, i in enumerate(idxs):
                    want_crc = crcs[i]
                    if want_crc is None:
                        found.append(
                            decode_vector(frames[n], f"archive object {key} at byte {locations[i].offset}", self.dim)
                        )
                    elif zlib.crc32(frames[n]) == want_crc:
                        found.append((None, frames[n]))
                    else:
                        whole.append(n)
                        found.append((None, b""))
                if whole:
                    again = self._frames([locations[idxs[n]] for n in whole])
                    for n, frame in zip(whole, again):
                        found[n] = decode_vector(
                            frame, f"archive object {key} at byte {locations[idxs[n]].offset}", self.dim
                        )
            except (ObjectStoreError, CorruptDataError, OSError) as exc:
                yield idxs, exc
                continue
            yield idxs, found

    def _frames(self, locations: Sequence[Location]) -> list[bytes]:
        """The bytes at each of ``locations`` (see :func:`_plan`)."""
        out: list[bytes] = [b""] * len(locations)
        for key, idxs, spans, groups in _plan(locations):
            for i, frame in zip(idxs, self._object_frames(key, locations, spans, groups)):
                out[i] = frame
        return out

    def _object_frames(
        self, key: str, locations: Sequence[Location], spans: list[tuple[int, int]], groups: list[list[int]]
    ) -> list[bytes]:
        """The frames of one object's ``groups`` of locations (one read of
        ``spans``), in the order of the groups' positions."""
        try:
            blobs = self._read(key, spans)
        except ObjectNotFoundError:
            raise ObjectNotFoundError(
                f"archive object {key} is missing from {self.store!r} (the catalog points at it; "
                "it was deleted or lost outside tierstore)"
            ) from None
        out = []
        for g, (start, _), blob in zip(groups, spans, blobs):
            for j in g:
                loc = locations[j]
                out.append(blob[loc.offset - start : loc.offset - start + loc.length])
        return out

    def _read(self, key: str, spans: list[tuple[int, int]]) -> list[bytes]:
        read_ranges = _ranges_reader(self.store)
        if read_ranges is not None:
            return read_ranges(self.store, key, spans)
        return [self.store.get(key, start, end) for start, end in spans]

    def delete(self, key: str) -> None:
        self.store.delete(key)

    def list_batches(self) -> list[str]:
        return [k for k in self.store.list(ARCHIVE_PREFIX + "/") if k.endswith(".tsa")]

    def read_batch(self, key: str) -> tuple[dict[str, Any], list[tuple[ArchiveEntry, dict[str, Any]]]]:
        return decode_batch(self.store.get(key), f"archive object {key}")

    def verify_batch(
        self, key: str, expected: Sequence[tuple[str, Location]] = (), check: Any = None
    ) -> tuple[list[str], list[str]]:
        """Check one archive object: ``(problems, damaged)``. ``problems``
        names the object and what is wrong (missing, a frame failing its
        CRC32, a bad header or index); ``damaged`` lists the ids among
        ``expected`` (``(id, location)`` pairs from the catalog) whose record
        cannot be restored. ``check(id, record, frame)``, if given, looks at
        each readable expected record (and its frame's bytes) and returns a
        problem (a string) or None.
        Object-store errors other than a missing object propagate (an outage
        is not damage)."""
        where = f"archive object {key}"
        try:
            data = self.store.get(key)
        except ObjectNotFoundError:
            return [f"{where} is missing from {self.store!r}"], [mid for mid, _ in expected]
        problems: list[str] = []
        damaged: list[str] = []
        try:
            decode_batch(data, where)
        except CorruptDataError as exc:
            problems.append(str(exc))
        for mid, loc in expected:
            at = f"{where} at byte {loc.offset}"
            try:
                rec = decode_record(data[loc.offset : loc.offset + loc.length], at, self.dim)
                if rec["id"] != mid:
                    raise CorruptDataError(f"{at} holds {rec['id']!r}, the catalog expects {mid!r}")
            except CorruptDataError as exc:
                if str(exc) not in problems:
                    problems.append(str(exc))
                damaged.append(mid)
                continue
            if check is not None:
                problem = check(mid, rec, data[loc.offset : loc.offset + loc.length])
                if problem is not None:
                    problems.append(problem)
        return problems, damaged


def _ranges_reader(store: ObjectStore) -> Any:
    """The store's ``read_ranges`` (several ranges of one object in one call:
    LocalObjectStore, one open file and a pread each), or None. Looked up on
    the class, so a wrapper that only forwards attributes still sees every GET."""
    return getattr(type(store), "read_ranges", None)


def _end(loc: Location) -> int:
    return loc.offset + loc.length


def _plan(
    locations: Sequence[Location], gap: int = _COALESCE_GAP
) -> list[tuple[str, list[int], list[tuple[int, int]], list[list[int]]]]:
    """How to read ``locations``: per object key, ``(key, positions,
    spans, groups)``: the positions of its locations by offset, and
    neighbouring records (closer than ``gap`` bytes) merged into one span
    each (``groups``: the positions each span covers); every span of an
    object is read in one call. ``gap < 0``: a span per location, in the
    given order."""
    by_key: dict[str, list[int]] = {}
    for i, loc in enumerate(locations):
        by_key.setdefault(loc.key, []).append(i)
    plan = []
    if gap < 0:
        for key, idxs in by_key.items():
            plan.append((key, idxs, [(locations[i].offset, _end(locations[i])) for i in idxs], [[i] for i in idxs]))
        return plan
    for key, idxs in by_key.items():
        if len(idxs) > 1:
            idxs.sort(key=lambda i: locations[i].offset)
        groups: list[list[int]] = []
        spans: list[tuple[int, int]] = []
        for i in idxs:
            loc = locations[i]
            if groups and loc.offset - spans[-1][1] <= gap:
                groups[-1].append(i)
                spans[-1] = (spans[-1][0], max(spans[-1][1], _end(loc)))
            else:
                groups.append([i])
                spans.append((loc.offset, _end(loc)))
        plan.append((key, idxs, spans, groups))
    return plan


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

"""Tombstones: the object store's own record that a memory was forgotten.

A deleted memory's archived record stays in its archive object until a sweep
rewrites the object (the delete marks it ``purge``). Were the catalog lost in
between, a catalog rebuilt from the bucket alone would bring the memory back.
So a delete that may leave such a record also writes a small tombstone
object naming the memory; ``rebuild_catalog`` skips every record of it
archived at or before the tombstone's time, and a sweep drops a namespace's
tombstones once none of its archive objects holds stale records.

One object names every memory of one namespace that one transaction
deleted: a sweep's deletes of a namespace share one object (a night of
the platform year deletes thousands of archived memories; one object each
cost a PUT, an fsync on a local directory and later a DELETE apiece), a
single ``delete`` has its own.

A tombstone object is ``MAGIC ("TSTOMB01") | frame(msgpack map: format,
version, ns, entries: [[id, deleted_at], ...])`` (version 2; version 1, which
earlier code wrote, held one ``id`` and ``deleted_at``), with the archive
format's checksummed frame, under ``tombstone/<namespace segment>/<random>.tst``.
The catalog lists every tombstone, one row per memory keyed by (object key,
id) (``pending`` until its object is written, then ``written``), so that
neither the retry nor the collection needs to list the bucket.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from tierstore.errors import CorruptDataError, ObjectNotFoundError
from tierstore.storage.catalog import Catalog
from tierstore.storage.objectstore import ObjectStore
from tierstore.tiers.archive import frame, pack, read_frame, unpack
from tierstore.tiers.cold import ns_segment

TOMBSTONE_PREFIX = "tombstone"
MAGIC = b"TSTOMB01"
FORMAT = "tierstore-tombstone"
VERSION = 2
VERSIONS = (1, 2)  # read; VERSION is written

# Stale records exist only in objects marked purge, or pending (an archive
# under way): every event that leaves one marks its object, and each object's
# rids list the memories it holds records of. Those objects are few (a sweep
# rewrites up to 64 of them), so this read is short.
_STALE_RIDS_SQL = (
    "SELECT DISTINCT j.value FROM archives a, json_each(a.rids) j WHERE a.ns = ? AND a.state IN ('pending', 'purge')"
)

# The written tombstone objects no archive object needs any more: their namespace has none pending or
# marked purge (all of an object's memories are of one namespace).
_COLLECTABLE_SQL = (
    "SELECT DISTINCT key FROM tombstones t WHERE state = 'written' AND NOT EXISTS"
    " (SELECT 1 FROM archives a WHERE a.ns = t.ns AND a.state IN ('pending', 'purge'))"
)


@dataclass(frozen=True)
class Tombstone:
    ns: str
    id: str
    deleted_at: float  # POSIX seconds, on the store's clock


def new_key(ns: str) -> str:
    return f"{TOMBSTONE_PREFIX}/{ns_segment(ns)}/{secrets.token_hex(8)}.tst"


def encode(stones: Sequence[Tombstone]) -> bytes:
    """One tombstone object naming ``stones`` (at least one, all of one namespace)."""
    if not stones:
        raise ValueError("a tombstone object names at least one memory")
    ns = stones[0].ns
    if any(t.ns != ns for t in stones):
        raise ValueError("a tombstone object names memories of one namespace")
    entries = [[t.id, float(t.deleted_at)] for t in stones]
    return MAGIC + frame(pack({"format": FORMAT, "version": VERSION, "ns": ns, "entries": entries}))


def decode(data: bytes, where: str) -> list[Tombstone]:
    """A tombstone object's contents, checked (CorruptDataError names ``where``);
    reads both versions."""
    if not data.startswith(MAGIC):
        raise CorruptDataError(f"{where}: not a tierstore tombstone (bad magic)")
    payload, end = read_frame(data, len(MAGIC), where)
    if end != len(data):
        raise CorruptDataError(f"{where}: {len(data) - end} trailing bytes")
    doc = unpack(payload, where)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") not in VERSIONS:
        raise CorruptDataError(f"{where}: bad tombstone header")
    ns = doc.get("ns")
    entries = [[doc.get("id"), doc.get("deleted_at")]] if doc["version"] == 1 else doc.get("entries")
    if not isinstance(ns, str) or not isinstance(entries, list) or not entries:
        raise CorruptDataError(f"{where}: bad tombstone fields")
    out = []
    for e in entries:
        if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], float)):
            raise CorruptDataError(f"{where}: bad tombstone fields")
        out.append(Tombstone(ns, e[0], e[1]))
    return out


def stale_rids(conn: sqlite3.Connection, ns: str) -> set[int]:
    """Catalog rows of ``ns`` with a record in an object pending or marked
    purge (the memory restored, or changed while being archived)."""
    return {int(r) for (r,) in conn.execute(_STALE_RIDS_SQL, (ns,))}


def note_deletion(conn: sqlite3.Connection, ns: str, id: str, now: float, key: str | None = None) -> str:
    """In the transaction that deletes memory ``id``, whose record some archive
    object holds (it is cold, or its row is in :func:`stale_rids`): record a
    pending tombstone in object ``key`` (a new one when None; give the same
    key for the other deletes of ``ns`` in this transaction, never for another
    transaction's: an object's contents are settled at the commit). Returns
    its key."""
    key = new_key(ns) if key is None else key
    conn.execute(
        "INSERT INTO tombstones (key, ns, id, deleted_at, state) VALUES (?, ?, ?, ?, 'pending')", (key, ns, id, now)
    )
    return key


def write_pending(catalog: Catalog, objects: ObjectStore) -> int:
    """Write the objects of pending tombstones (a delete's write failed or was
    cut short); returns how many objects. Object-store errors propagate."""
    rows = catalog.query("SELECT key, ns, id, deleted_at FROM tombstones WHERE state = 'pending' ORDER BY key, id")
    if rows:
        catalog.sync()  # the delete is on disk before its tombstone: never a tombstone for a memory that lives
    by_key: dict[str, list[Tombstone]] = {}
    for key, ns, mid, at in rows:
        by_key.setdefault(key, []).append(Tombstone(ns, mid, at))
    written: list[tuple[str]] = []
    try:
        for key, stones in by_key.items():
            objects.put_if_absent(key, encode(stones))  # False: written before the crash
            written.append((key,))
    finally:  # one commit for all (a sweep deletes thousands); one not marked is put again, harmlessly
        if written:
            catalog.executemany("UPDATE tombstones SET state = 'written' WHERE key = ?", written)
    return len(written)


def collect(catalog: Catalog, objects: ObjectStore) -> int:
    """Drop the written tombstones of namespaces whose archive objects hold
    no stale record any more (none pending or marked purge); returns how many
    objects.

    Safe against deletes running meanwhile: a tombstone selected here names a
    memory deleted earlier, whose records were in the objects now rewritten,
    and a memory that is gone is never archived again (one re-added under the
    same id is archived after the tombstone's time, which rebuilds respect)."""
    rows = catalog.query(_COLLECTABLE_SQL)
    if rows:
        catalog.sync()  # the rewrites that made these tombstones unneeded are on disk first
    gone: list[tuple[str]] = []
    try:
        for (key,) in rows:
            objects.delete(key)  # the object first: a crash leaves a row, dropped next time
            gone.append((key,))
    finally:  # one commit for all
        if gone:
            catalog.executemany("DELETE FROM tombstones WHERE key = ?", gone)
    return len(gone)


def read_all(objects: ObjectStore) -> dict[str, list[Tombstone]]:
    """Every tombstone object in the object store, by key (for a rebuild)."""
    out: dict[str, list[Tombstone]] = {}
    for key in objects.list(TOMBSTONE_PREFIX + "/"):
        if not key.endswith(".tst"):
            continue
        try:
            out[key] = decode(objects.get(key), f"tombstone object {key}")
        except ObjectNotFoundError:
            continue  # collected since the listing
    return out


def latest_by_memory(stones: dict[str, list[Tombstone]]) -> dict[tuple[str, str], float]:
    """The latest deletion time of each (namespace, id)."""
    out: dict[tuple[str, str], float] = {}
    for objs in stones.values():
        for t in objs:
            k = (t.ns, t.id)
            out[k] = max(out.get(k, t.deleted_at), t.deleted_at)
    return out

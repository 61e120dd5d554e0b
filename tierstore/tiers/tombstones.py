"""Tombstones: the object store's own record that a memory was forgotten.

A deleted memory's archived record stays in its archive object until a sweep
rewrites the object (the delete marks it ``purge``). Were the catalog lost in
between, a catalog rebuilt from the bucket alone would bring the memory back.
So a delete that may leave such a record also writes a small tombstone
object naming the memory; ``rebuild_catalog`` skips every record of it
archived at or before the tombstone's time, and a sweep drops a namespace's
tombstones once none of its archive objects holds stale records.

A tombstone object is ``MAGIC ("TSTOMB01") | frame(msgpack map: format,
version, ns, id, deleted_at)``, with the archive format's checksummed frame,
under ``tombstone/<namespace segment>/<random>.tst``. The catalog lists every
tombstone (``pending`` until its object is written, then ``written``), so
that neither the retry nor the collection needs to list the bucket.
"""

from __future__ import annotations

import secrets
import sqlite3
from dataclasses import dataclass

from tierstore.errors import CorruptDataError, ObjectNotFoundError
from tierstore.storage.catalog import Catalog
from tierstore.storage.objectstore import ObjectStore
from tierstore.tiers.archive import frame, pack, read_frame, unpack
from tierstore.tiers.cold import ns_segment

TOMBSTONE_PREFIX = "tombstone"
MAGIC = b"TSTOMB01"
FORMAT = "tierstore-tombstone"
VERSION = 1

# Stale records exist only in objects marked purge, or pending (an archive
# under way): every event that leaves one marks its object, and each object's
# rids list the memories it holds records of. Those objects are few (a sweep
# rewrites up to 64 of them), so this read is short.
_STALE_RIDS_SQL = (
    "SELECT DISTINCT j.value FROM archives a, json_each(a.rids) j WHERE a.ns = ? AND a.state IN ('pending', 'purge')"
)


@dataclass(frozen=True)
class Tombstone:
    ns: str
    id: str
    deleted_at: float  # POSIX seconds, on the store's clock


def new_key(ns: str) -> str:
    return f"{TOMBSTONE_PREFIX}/{ns_segment(ns)}/{secrets.token_hex(8)}.tst"


def encode(t: Tombstone) -> bytes:
    doc = {"format": FORMAT, "version": VERSION, "ns": t.ns, "id": t.id, "deleted_at": float(t.deleted_at)}
    return MAGIC + frame(pack(doc))


def decode(data: bytes, where: str) -> Tombstone:
    """A tombstone object's contents, checked (CorruptDataError names ``where``)."""
    if not data.startswith(MAGIC):
        raise CorruptDataError(f"{where}: not a tierstore tombstone (bad magic)")
    payload, end = read_frame(data, len(MAGIC), where)
    if end != len(data):
        raise CorruptDataError(f"{where}: {len(data) - end} trailing bytes")
    doc = unpack(payload, where)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise CorruptDataError(f"{where}: bad tombstone header")
    ns, mid, at = doc.get("ns"), doc.get("id"), doc.get("deleted_at")
    if not isinstance(ns, str) or not isinstance(mid, str) or not isinstance(at, float):
        raise CorruptDataError(f"{where}: bad tombstone fields")
    return Tombstone(ns, mid, at)


def stale_rids(conn: sqlite3.Connection, ns: str) -> set[int]:
    """Catalog rows of ``ns`` with a record in an object pending or marked
    purge (the memory restored, or changed while being archived)."""
    return {int(r) for (r,) in conn.execute(_STALE_RIDS_SQL, (ns,))}


def note_deletion(conn: sqlite3.Connection, ns: str, id: str, now: float) -> str:
    """In the transaction that deletes memory ``id``, whose record some archive
    object holds (it is cold, or its row is in :func:`stale_rids`): record a
    pending tombstone. Returns its key."""
    key = new_key(ns)
    conn.execute(
        "INSERT INTO tombstones (key, ns, id, deleted_at, state) VALUES (?, ?, ?, ?, 'pending')", (key, ns, id, now)
    )
    return key


def write_pending(catalog: Catalog, objects: ObjectStore) -> int:
    """Write the objects of pending tombstones (a delete's write failed or was
    cut short); returns how many. Object-store errors propagate."""
    rows = catalog.query("SELECT key, ns, id, deleted_at FROM tombstones WHERE state = 'pending'")
    if rows:
        catalog.sync()  # the delete is on disk before its tombstone: never a tombstone for a memory that lives
    written: list[tuple[str]] = []
    try:
        for key, ns, mid, at in rows:
            objects.put_if_absent(key, encode(Tombstone(ns, mid, at)))  # False: written before the crash
            written.append((key,))
    finally:  # one commit for all (a sweep deletes thousands); one not marked is put again, harmlessly
        if written:
            catalog.executemany("UPDATE tombstones SET state = 'written' WHERE key = ?", written)
    return len(written)


def collect(catalog: Catalog, objects: ObjectStore) -> int:
    """Drop the written tombstones of namespaces whose archive objects hold
    no stale record any more (none pending or marked purge); returns how many.

    Safe against deletes running meanwhile: a tombstone selected here names a
    memory deleted earlier, whose records were in the objects now rewritten,
    and a memory that is gone is never archived again (one re-added under the
    same id is archived after the tombstone's time, which rebuilds respect)."""
    rows = catalog.query(
        "SELECT key FROM tombstones t WHERE state = 'written' AND NOT EXISTS"
        " (SELECT 1 FROM archives a WHERE a.ns = t.ns AND a.state IN ('pending', 'purge'))"
    )
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


def read_all(objects: ObjectStore) -> dict[str, Tombstone]:
    """Every tombstone in the object store, by key (for a rebuild)."""
    out: dict[str, Tombstone] = {}
    for key in objects.list(TOMBSTONE_PREFIX + "/"):
        if not key.endswith(".tst"):
            continue
        try:
            out[key] = decode(objects.get(key), f"tombstone object {key}")
        except ObjectNotFoundError:
            continue  # collected since the listing
    return out


def latest_by_memory(stones: dict[str, Tombstone]) -> dict[tuple[str, str], float]:
    """The latest deletion time of each (namespace, id)."""
    out: dict[tuple[str, str], float] = {}
    for t in stones.values():
        k = (t.ns, t.id)
        out[k] = max(out.get(k, t.deleted_at), t.deleted_at)
    return out

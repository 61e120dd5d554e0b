"""Compaction by layout: a namespace's archive rewritten in the order of meaning.

:func:`lay_out` reads every cold record of a namespace, orders them with
:func:`cold_layout.layout_groups` (similar memories together) and writes
them again in objects of at most :data:`cold_layout.OBJECT_RECORDS` records,
so that one query's candidates sit in few objects and few byte ranges
(``docs/benchmarks.md``, "Sixth round: layout by code"). The record frames
are copied as they are (checked first: the CRC32 and every field), so a
record's bytes, and where its vector starts in its frame, do not change;
the int8 code of each vector is written again with its new place (rows
archived before int8 codes were kept get one).

Each new object is one move, as an archive is (:mod:`tierstore.tiers.migrator`):

1. **intent** — the batch is recorded pending with its members (synced);
2. **copy** — the object is written;
3. **commit** — one transaction points the members still where they were
   read at the new object, marks the objects they left ``purge`` (each now
   holds records no memory points at) and records the key in the namespace's
   layout (meta ``cold_layout:<ns>``);
4. **collect** — the old objects that no memory points at any more are deleted.

A crash after 1 or 2 leaves a pending batch that the next sweep drops (its
members are cold already: ``Migrator.recover``); after 3, old objects
partly emptied and marked ``purge``, which the next sweep rewrites without
the moved records. At every point each cold memory is in exactly one object
the catalog points at, and a search, ``verify`` and a restore read it there.
The next ``compact_cold`` lays the namespace out again from the start.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from tierstore.errors import CorruptDataError
from tierstore.kernels import TIER_COLD
from tierstore.storage.faults import crash_point
from tierstore.tiers import cold_layout
from tierstore.tiers.archive import vector_at, vector_crc
from tierstore.tiers.cold import Location
from tierstore.tiers.cold_index import encode_code8


class ArchiveWriter(Protocol):
    """What a layout needs of the migrator (:class:`tierstore.tiers.migrator.Migrator`): its engine, a
    pending archive batch recorded and synced, and emptied objects collected."""

    engine: Any

    def record_batch(self, ns: str, rids: list[int], now: float) -> str: ...

    def collect_archives(self, keys: Iterable[str]) -> int: ...


# Meta key (+ the namespace) listing the objects of the namespace's current layout (JSON).
LAYOUT_META = "cold_layout:"
# A namespace is laid out again when more than this fraction of its cold
# memories sit in objects outside its layout (archived since, or never laid out).
LAYOUT_SLACK = 0.05
_PURGE_SQL = "UPDATE archives SET state = 'purge' WHERE key = ? AND state = 'done'"
_MOVE_SQL = (
    "UPDATE memories SET cold_key = ?, cold_offset = ?, cold_length = ?"
    " WHERE rid = ? AND cold_key = ? AND cold_offset = ?"
)


def layout_keys(read: Any, ns: str) -> set[str]:
    """The object keys of ``ns``'s current layout (empty: never laid out).
    ``read``: a connection or the catalog (anything with ``execute`` or
    ``query_one``). A damaged value counts as no layout."""
    sql, params = "SELECT value FROM meta WHERE key = ?", (LAYOUT_META + ns,)
    row = read.execute(sql, params).fetchone() if isinstance(read, sqlite3.Connection) else read.query_one(sql, params)
    try:
        keys = json.loads(row[0]) if row else []
    except ValueError:
        return set()
    return {k for k in keys if isinstance(k, str)} if isinstance(keys, list) else set()


def _set_layout(conn: sqlite3.Connection, ns: str, keys: Sequence[str]) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (LAYOUT_META + ns, json.dumps(list(keys))),
    )


def carry_layout_key(conn: sqlite3.Connection, ns: str, old: str, new: str) -> None:
    """Inside the transaction that moves an object's records to ``new`` (a
    rewrite keeps their order): ``new`` takes ``old``'s place in the layout."""
    keys = layout_keys(conn, ns)
    if old in keys:
        _set_layout(conn, ns, sorted((keys - {old}) | {new}))


def layouts(catalog: Any) -> list[tuple[str, set[str], set[str]]]:
    """``(ns, keys, gone)`` of every namespace with a layout: the objects it
    lists, and those of them that are no archive batch any more (a collected
    object leaves the list with its archives row, :func:`forget_archive`:
    gone ones come from elsewhere, e.g. a catalog restored from a copy)."""
    have = {k for (k,) in catalog.query("SELECT key FROM archives WHERE state != 'pending'")}
    out = []
    for (meta_key,) in catalog.query("SELECT key FROM meta WHERE key LIKE ? ORDER BY key", (LAYOUT_META + "%",)):
        if not meta_key.startswith(LAYOUT_META):  # LIKE's "_" matches any character
            continue
        ns = meta_key[len(LAYOUT_META) :]
        keys = layout_keys(catalog, ns)
        out.append((ns, keys, keys - have))
    return out


def forget_archive(conn: sqlite3.Connection, key: str) -> None:
    """Drop the archives row of a collected object ``key``, and the key from
    its namespace's layout (one transaction: the caller's write)."""
    row = conn.execute("SELECT ns FROM archives WHERE key = ?", (key,)).fetchone()
    conn.execute("DELETE FROM archives WHERE key = ?", (key,))
    if row is not None:
        keys = layout_keys(conn, row[0])
        if key in keys:
            _set_layout(conn, row[0], sorted(keys - {key}))


def forget_gone(conn: sqlite3.Connection, ns: str) -> int:
    """Drop from ``ns``'s layout the objects that are no archive batch any
    more (inside the caller's transaction); returns how many."""
    keys = layout_keys(conn, ns)
    have = {k for (k,) in conn.execute("SELECT key FROM archives WHERE state != 'pending'")}
    if keys - have:
        _set_layout(conn, ns, sorted(keys & have))
    return len(keys - have)


def namespaces_to_lay_out(catalog: Any) -> list[str]:
    """Namespaces whose cold memories lie in two objects or more, more than
    :data:`LAYOUT_SLACK` of them outside the namespace's layout."""
    per_ns: dict[str, dict[str, int]] = {}
    for ns, key, n in catalog.query(
        "SELECT ns, cold_key, count(*) FROM memories WHERE tier = ? AND cold_key IS NOT NULL GROUP BY ns, cold_key",
        (TIER_COLD,),
    ):
        per_ns.setdefault(ns, {})[key] = int(n)
    out = []
    for ns, counts in sorted(per_ns.items()):
        if len(counts) < 2:
            continue
        laid = layout_keys(catalog, ns)
        outside = sum(n for key, n in counts.items() if key not in laid)
        if outside > LAYOUT_SLACK * sum(counts.values()):
            out.append(ns)
    return out


def lay_out(mig: ArchiveWriter, ns: str, now: float, object_records: int | None = None) -> int:
    """Rewrite every cold record of ``ns`` in layout order (see the module),
    at most ``object_records`` per object (default
    :data:`cold_layout.OBJECT_RECORDS`, read at the call); returns how many
    objects were written. A record that fails its checks
    raises CorruptDataError before anything is written (``verify`` names it;
    copying it would spread the damage)."""
    eng = mig.engine
    rows = eng.catalog.query(
        "SELECT rid, id, cold_key, cold_offset, cold_length FROM memories"
        " WHERE ns = ? AND tier = ? AND cold_key IS NOT NULL ORDER BY cold_key, cold_offset",
        (ns, TIER_COLD),
    )
    if not rows:
        return 0
    found = eng.cold.fetch_frames([Location(key, off, length) for _, _, key, off, length in rows])
    frames: list[tuple[str, bytes, int]] = []
    vectors = np.empty((len(rows), eng.dim), np.float32)
    for i, ((_, mid, key, off, _), (rec, frame)) in enumerate(zip(rows, found)):
        if rec["id"] != mid or rec["ns"] != ns:
            raise CorruptDataError(
                f"archive object {key} at byte {off} holds {rec['id']!r}, the catalog expects {mid!r}"
            )
        frames.append((mid, frame, vector_at(frame, rec["embedding"])))
        vectors[i] = np.frombuffer(rec["embedding"], "<f4")
    del found
    laid: list[str] = []
    per_object = cold_layout.OBJECT_RECORDS if object_records is None else object_records
    for group in cold_layout.layout_groups(vectors, per_object):
        members = [rows[i] for i in group.tolist()]
        new_key = mig.record_batch(ns, [r[0] for r in members], now)
        crash_point("layout.after_intent")
        entries = eng.cold.write_frames(new_key, ns, [frames[i] for i in group.tolist()], now, layout="code")
        crash_point("layout.after_put")
        crcs = [vector_crc(vectors[i].astype("<f4").tobytes()) for i in group.tolist()]
        code8s = encode_code8(vectors[group])

        left = eng.catalog.write(
            partial(
                _commit,
                ns=ns,
                key=new_key,
                members=members,
                entries=entries,
                crcs=crcs,
                code8s=code8s,
                laid=[*laid, new_key],
            )
        )
        crash_point("layout.after_commit")
        laid.append(new_key)
        mig.collect_archives(left)
    eng.cold_index.invalidate(ns)
    return len(laid)


def _commit(
    conn: sqlite3.Connection,
    *,
    ns: str,
    key: str,
    members: Sequence[tuple[Any, ...]],
    entries: Sequence[Any],
    crcs: Sequence[int],
    code8s: Sequence[bytes],
    laid: list[str],
) -> set[str]:
    """Step 3 of one new object ``key``: point ``members`` (``(rid, id,
    old key, old offset, length)``) still where they were read at their
    ``entries`` (their codes' rows: the new places, and ``code8s``, their
    vectors' int8 codes), mark the objects they left ``purge``, and record
    ``laid`` as the namespace's layout. Returns the keys of the objects they left."""
    left: set[str] = set()
    moved = 0
    for (rid, _, old, off, _), e, crc, code8 in zip(members, entries, crcs, code8s):
        if conn.execute(_MOVE_SQL, (key, e.offset, e.length, rid, old, off)).rowcount:
            moved += 1
            left.add(old)
            place = (e.vector_at, crc) if e.vector_at >= 0 else (None, None)
            conn.execute(
                "UPDATE cold_codes SET vector_at = ?, vector_crc = ?, code8 = ? WHERE rid = ?", (*place, code8, rid)
            )
    # a member restored or deleted since it was read stays out: its record here is stale from the start
    conn.execute("UPDATE archives SET state = ? WHERE key = ?", ("done" if moved == len(members) else "purge", key))
    conn.executemany(_PURGE_SQL, [(k,) for k in sorted(left)])
    _set_layout(conn, ns, laid)
    return left

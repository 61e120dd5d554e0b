"""Supersession marks: which memory replaced which, and slots (keys).

A memory is *superseded* when a newer one replaces it. Three things say so:

``explicit``
    the caller: ``add(..., supersedes=[old])``;
``key``
    a slot: ``add(..., key=k)`` supersedes the live memory of ``(ns, k)``,
    exactly as ``supersedes=[that memory]`` would;
``auto``
    automatic supersession (:mod:`tierstore.rules.auto_supersession`): a new
    memory very similar to a live one of the same type.

Each is a *mark*: a row of the catalog table ``supersessions``, keyed by the
superseded memory's rid (never reused), holding the superseding id, the kind,
the similarity (auto), the time and the memory's per-memory TTL before (so
that a reversal can put it back). A memory with a mark is not *live*: it is
no slot's current memory, never a duplicate to reinforce, never a candidate
for automatic supersession. Invariant: a key has at most one live memory;
every mark is written in the transaction that inserts the superseding memory,
by the catalog's single writer, so two adds cannot both see the slot free.

Only ``auto`` marks are reversed by feedback (explicit positive feedback on
the memory): explicit and key supersession are the caller's own statement,
and a key's slot has one live memory. The damping that goes with a mark (a
negative feedback and a TTL of 0) is applied by :class:`~tierstore.TierStore`
after the insert commits; :func:`undamped` finds the marks a crash left
without it.

This module reads and writes the table through a connection (inside the
caller's transaction) or the catalog's readers; it knows nothing of tiers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tierstore.errors import InvalidInputError

KINDS = ("explicit", "key", "auto")
# A mark, unless the memory has one already (rid, ns, by_id, kind, similarity, t, prior_ttl_seconds).
_INSERT_MARK = (
    "INSERT OR IGNORE INTO supersessions (rid, ns, by_id, kind, similarity, t, prior_ttl_seconds)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True)
class Mark:
    """One supersession: ``old_id`` replaced by ``new_id``.

    similarity: the cosine of the two (``auto`` only); key: the slot (``key`` only)."""

    old_id: str
    new_id: str
    kind: str
    similarity: float | None = None
    key: str | None = None

    def describe(self) -> str:
        """How it was superseded, for explanations and event reasons."""
        return describe(self.kind, self.similarity, self.key)


def describe(kind: str, similarity: float | None, key: str | None = None) -> str:
    if kind == "auto":
        return "auto" if similarity is None else f"auto, similarity {similarity:.3f}"
    if kind == "key":
        return "key" if key is None else f"key {key}"
    return kind


@dataclass(frozen=True)
class RecordMarks:
    """A memory's marks as its archive record keeps them (maps of
    :data:`tierstore.tiers.archive.MARK_FIELDS`: the other memory's id, kind,
    similarity, time, prior TTL): the mark on it, and the marks it made."""

    superseded_by: dict[str, Any] | None = None
    supersedes: tuple[dict[str, Any], ...] = ()


def record_marks(catalog: Any, ns: str, rows: Sequence[Any]) -> dict[str, RecordMarks]:
    """The marks on and by each of ``rows`` (catalog rows of ``ns``), by id,
    for the records that archive them; rows with neither are left out."""
    on: dict[str, dict[str, Any]] = {}
    by: dict[str, list[dict[str, Any]]] = {}
    for i in range(0, len(rows), 500):
        part = rows[i : i + 500]
        marks = ",".join("?" * len(part))
        for mid, by_id, kind, sim, t, prior in catalog.query(
            "SELECT m.id, s.by_id, s.kind, s.similarity, s.t, s.prior_ttl_seconds FROM supersessions s"
            f" JOIN memories m ON m.rid = s.rid WHERE s.rid IN ({marks})",
            [r.rid for r in part],
        ):
            on[mid] = {"id": by_id, "kind": kind, "similarity": sim, "t": t, "prior_ttl_seconds": prior}
        for old_id, by_id, kind, sim, t, prior in catalog.query(
            "SELECT m.id, s.by_id, s.kind, s.similarity, s.t, s.prior_ttl_seconds FROM supersessions s"
            f" JOIN memories m ON m.rid = s.rid WHERE s.ns = ? AND s.by_id IN ({marks})",
            [ns, *[r.id for r in part]],
        ):
            by.setdefault(by_id, []).append(
                {"id": old_id, "kind": kind, "similarity": sim, "t": t, "prior_ttl_seconds": prior}
            )
    return {mid: RecordMarks(on.get(mid), tuple(by.get(mid, ()))) for mid in {*on, *by}}


def restore_marks(
    conn: sqlite3.Connection, ns: str, pairs: Sequence[tuple[str, str, dict[str, Any]]], rids: set[int]
) -> int:
    """Write the marks archive records kept: ``(old id, new id, mark)``
    triples (``mark`` as in :class:`RecordMarks`), each only on a memory of
    ``rids`` (those whose state a rebuild took from their records: any other
    memory the catalog kept keeps its own state) that has no mark. Returns
    how many were written."""
    written = 0
    for old_id, new_id, mark in pairs:
        r = conn.execute("SELECT rid FROM memories WHERE ns = ? AND id = ?", (ns, old_id)).fetchone()
        if r is None or int(r[0]) not in rids or old_id == new_id:
            continue
        written += conn.execute(
            _INSERT_MARK,
            (int(r[0]), ns, new_id, mark["kind"], mark["similarity"], mark["t"], mark["prior_ttl_seconds"]),
        ).rowcount
    return written


def settle_slots(conn: sqlite3.Connection, ns: str, keys: Sequence[str], rids: set[int]) -> int:
    """Give each slot of ``keys`` one live memory again where a rebuild left
    several (records archived without their marks): the newest by creation
    (then rid) stays live and the others among ``rids`` (as in
    :func:`restore_marks`) get a ``key`` mark by it. Returns how many marks
    were written."""
    written = 0
    for key in keys:
        live = conn.execute(
            f"SELECT m.rid, m.id, m.created_at, m.ttl_seconds FROM memories m"
            f" WHERE m.ns = ? AND m.key = ? AND {_LIVE} ORDER BY m.created_at DESC, m.rid DESC",
            (ns, key),
        ).fetchall()
        if not live:
            continue
        newest = live[0]
        for rid, _, _, prior in live[1:]:
            if rid not in rids:
                continue
            written += conn.execute(_INSERT_MARK, (rid, ns, newest[1], "key", None, newest[2], prior)).rowcount
    return written


# -- reads and writes inside a transaction -------------------------------------

_LIVE = "NOT EXISTS (SELECT 1 FROM supersessions s WHERE s.rid = m.rid)"


def unsuperseded_rows(catalog: Any, rids: Sequence[int]) -> list[Any]:
    """The catalog rows of ``rids`` that carry no mark (the order is the catalog's)."""
    out: list[Any] = []
    for i in range(0, len(rids), 500):
        chunk = list(rids[i : i + 500])
        out += catalog.select_rows(f"WHERE m.rid IN ({','.join('?' * len(chunk))}) AND {_LIVE}", chunk)
    return out


def live_of_key(conn: sqlite3.Connection, ns: str, key: str) -> tuple[int, str] | None:
    """``(rid, id)`` of the live memory of slot ``(ns, key)``, or ``None``."""
    r = conn.execute(
        f"SELECT m.rid, m.id FROM memories m WHERE m.ns = ? AND m.key = ? AND {_LIVE} ORDER BY m.rid DESC LIMIT 1",
        (ns, key),
    ).fetchone()
    return None if r is None else (int(r[0]), str(r[1]))


def check_key_agrees(
    conn: sqlite3.Connection, ns: str, key: str | None, supersedes: Sequence[str], where: str = ""
) -> tuple[int, str] | None:
    """The live memory of ``key`` (``(rid, id)`` or ``None``), after checking
    that ``supersedes`` agrees with it: no superseded id belongs to another
    slot, and if the slot has a live memory, ``supersedes`` (when given)
    names it. Raises InvalidInputError otherwise (the caller's transaction is
    rolled back: nothing changes)."""
    if key is None:
        return None
    live = live_of_key(conn, ns, key)
    if not supersedes:
        return live
    marks = ",".join("?" * len(supersedes))
    for mid, other in conn.execute(
        f"SELECT id, key FROM memories WHERE ns = ? AND id IN ({marks})", (ns, *supersedes)
    ).fetchall():
        if other is not None and other != key:
            raise InvalidInputError(
                f"{where}key {key!r} and supersedes disagree: memory {mid!r} is the slot {other!r}, not {key!r}"
            )
    if live is not None and live[1] not in supersedes:
        raise InvalidInputError(
            f"{where}key {key!r} and supersedes disagree: the slot's live memory is "
            f"{live[1]!r}, which supersedes does not name"
        )
    return live


def record(conn: sqlite3.Connection, ns: str, mark: Mark, now: float) -> bool:
    """Write ``mark`` unless the memory is gone or already marked; returns
    whether it was written. Keeps the memory's per-memory TTL for a reversal."""
    r = conn.execute("SELECT rid, ttl_seconds FROM memories WHERE ns = ? AND id = ?", (ns, mark.old_id)).fetchone()
    if r is None:
        return False
    cur = conn.execute(_INSERT_MARK, (int(r[0]), ns, mark.new_id, mark.kind, mark.similarity, now, r[1]))
    return cur.rowcount == 1


def named_marks(
    new_id: str, supersedes: Sequence[str], key: str | None, live: tuple[int, str] | None, include_live: bool
) -> list[Mark]:
    """The marks a new memory's caller asked for: each id of ``supersedes``
    (``key`` kind for the slot's live memory), and the slot's live memory
    ``live`` when ``include_live`` (not for a duplicate: an existing memory is
    not the slot's new value)."""
    out = [
        Mark(old, new_id, "key" if live is not None and old == live[1] else "explicit", key=key) for old in supersedes
    ]
    if include_live and live is not None and live[1] not in supersedes:
        out.append(Mark(live[1], new_id, "key", key=key))
    return out


def record_all(conn: sqlite3.Connection, ns: str, marks: Sequence[Mark], now: float) -> list[Mark]:
    """Record ``marks``; returns those whose damping must follow: every
    explicit and key mark (superseding again damps again, as ``supersedes``
    always did), an automatic one only if it is new. A mark on the
    superseding memory itself (a duplicate naming itself) is dropped."""
    out = []
    for mark in marks:
        if mark.old_id == mark.new_id:
            continue
        if record(conn, ns, mark, now) or mark.kind != "auto":
            out.append(mark)
    return out


@dataclass(frozen=True)
class AutoMark:
    """An automatic mark as stored: the superseded memory's rid, who superseded it, and its TTL before."""

    rid: int
    by_id: str
    prior_ttl_seconds: float | None


def auto_mark(conn_or_catalog: Any, ns: str, id: str) -> AutoMark | None:
    """The automatic mark on memory ``id``, if it has one (a connection or a
    :class:`~tierstore.storage.catalog.Catalog`)."""
    sql = (
        "SELECT s.rid, s.by_id, s.prior_ttl_seconds FROM supersessions s JOIN memories m ON m.rid = s.rid"
        " WHERE m.ns = ? AND m.id = ? AND s.kind = 'auto'"
    )
    if isinstance(conn_or_catalog, sqlite3.Connection):
        r = conn_or_catalog.execute(sql, (ns, id)).fetchone()
    else:
        r = conn_or_catalog.query_one(sql, (ns, id))
    return None if r is None else AutoMark(int(r[0]), str(r[1]), r[2])


def clear(conn: sqlite3.Connection, rid: int) -> bool:
    """Remove the mark on memory ``rid``; returns whether there was one."""
    return conn.execute("DELETE FROM supersessions WHERE rid = ?", (rid,)).rowcount == 1


# -- reads through the catalog -------------------------------------------------


@dataclass(frozen=True)
class MarkInfo:
    """What a reader sees of a memory's slot and mark (``None`` where absent)."""

    key: str | None
    superseded_by: str | None
    description: str | None


def marks_of(catalog: Any, ns: str, ids: Sequence[str]) -> dict[str, MarkInfo]:
    """Key and mark of each of ``ids`` that exists (one query per 500 ids)."""
    out: dict[str, MarkInfo] = {}
    uniq = list(dict.fromkeys(ids))
    for i in range(0, len(uniq), 500):
        part = uniq[i : i + 500]
        rows = catalog.query(
            "SELECT m.id, m.key, s.by_id, s.kind, s.similarity FROM memories m"
            " LEFT JOIN supersessions s ON s.rid = m.rid"
            f" WHERE m.ns = ? AND m.id IN ({','.join('?' * len(part))})",
            (ns, *part),
        )
        for mid, key, by_id, kind, sim in rows:
            out[mid] = MarkInfo(key, by_id, None if kind is None else describe(kind, sim, key))
    return out


def annotate_explains(catalog: Any, ns: str, hits: Sequence[Any], factor: float | None = None) -> None:
    """Add ``superseded_by`` and ``supersession`` (and ``superseded_factor``,
    the policy's, when a mark demotes) to the explanations of the
    superseded ones among ``hits`` (explained :class:`~tierstore.records.Hit`)."""
    from dataclasses import replace

    info = marks_of(catalog, ns, [h.id for h in hits])
    for h in hits:
        m = info.get(h.id)
        if m is not None and m.superseded_by is not None and h.explain is not None:
            h.set_explain(
                replace(h.explain, superseded_by=m.superseded_by, supersession=m.description, superseded_factor=factor)
            )


def live_id_of_key(catalog: Any, ns: str, key: str) -> str | None:
    """The id of the live memory of slot ``(ns, key)``, or ``None``."""
    r = catalog.query_one(
        f"SELECT m.id FROM memories m WHERE m.ns = ? AND m.key = ? AND {_LIVE} ORDER BY m.rid DESC LIMIT 1", (ns, key)
    )
    return None if r is None else str(r[0])


# -- upkeep at open ---------------------------------------------------------------


def prune_orphans(conn: sqlite3.Connection) -> int:
    """Drop the marks of memories that no longer exist (deleted by a sweep or
    by ``delete``); returns how many."""
    return conn.execute("DELETE FROM supersessions WHERE rid NOT IN (SELECT rid FROM memories)").rowcount


def undamped(conn: sqlite3.Connection) -> list[tuple[int, float]]:
    """``(rid, marked at)`` of marked memories whose TTL is not 0: the damping
    that follows a mark was not applied (a crash between the add's commit and
    it). Every damping sets the per-memory TTL to 0, and nothing else does."""
    return [
        (int(r[0]), float(r[1]))
        for r in conn.execute(
            "SELECT s.rid, s.t FROM supersessions s JOIN memories m ON m.rid = s.rid"
            " WHERE m.ttl_seconds IS NULL OR m.ttl_seconds != 0"
        ).fetchall()
    ]

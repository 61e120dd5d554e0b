"""The migrator: moves memories between tiers, and nothing else.

Every move follows the same order:

1. **copy** — write the destination (a warm shard's files, an archive object,
   or for a promotion/restore the rows' vectors read back);
2. **commit** — one catalog transaction switches the rows' tier and location
   and logs the lifecycle events;
3. **remove** — drop the rows from the source (the hot index in memory; warm
   shards and archive objects are immutable, their stale rows are tombstones).

A crash after 1 leaves an orphan (a shard directory the catalog does not know,
removed at open; an archive object recorded as a *pending* batch, finished or
dropped on the next sweep). A crash after 2 leaves the hot index holding rows
the catalog moved away; the index is reconciled with the catalog at load. The
catalog is the system of record, so a memory is never lost and never in two
tiers at once.

Each commit re-reads the rows it moves and skips any whose state changed since
the sweep read it (an access, a feedback, a concurrent delete): the sweep acts
only on the state it classified.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from tierstore.errors import (
    CorruptDataError,
    InvalidInputError,
    MemoryNotFoundError,
    ObjectNotFoundError,
    ObjectStoreError,
)
from tierstore.kernels import (
    ACTION_ARCHIVE,
    ACTION_DELETE,
    ACTION_DEMOTE,
    ACTION_KEEP,
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
    classify,
    due_times,
)
from tierstore.kernels import columns as C
from tierstore.progress import Progress
from tierstore.records import TIER_NAMES, SweepReport
from tierstore.rules import lifetime, supersession
from tierstore.rules.validation import check_str, check_tags, check_time
from tierstore.storage import keyword_index
from tierstore.storage.catalog import ACCESS_LOG_SQL, EVENT_SQL, INSERT_SQL, MemoryRow, insert_params, stack_embeddings
from tierstore.storage.faults import crash_point
from tierstore.storage.heap import release_freed
from tierstore.tiers import cold_index, cold_relayout, tombstones
from tierstore.tiers.archive import vector_crc
from tierstore.tiers.background import BackgroundSweeps
from tierstore.tiers.cold import ColdTier, Location, batch_number, group_by_ns
from tierstore.tiers.cold_index import CODE_SQL, CODES_COMPLETE, encode_code8, encode_codes

if TYPE_CHECKING:
    from tierstore.core.engine import Engine

# The state a sweep classified; a move commits only if the row still has it.
# A batch whose object holds a stale record (its memory deleted, restored, or
# changed while being archived) waits for a rewrite.
MARK_PURGE_SQL = "UPDATE archives SET state = 'purge' WHERE key = ? AND state = 'done'"
_COMPACT_PER_SWEEP = 64  # archive objects a sweep rewrites beyond those its own deletes marked (bounded work)
# Archive objects rewritten together: one transaction records their new batches, one moves their rows and
# one sync precedes collecting the old objects (each rewrite paid all three alone: ~5 of its ~8 ms). A group
# holds its objects' records in memory (~1.7 KB each at 384 dimensions): at most this many, beyond one object.
_REWRITE_GROUP = 32
_REWRITE_GROUP_RECORDS = 4096
_BACKFILL_PER_SWEEP = 2000  # cold-index codes written per sweep for memories archived before the index

_FP_SQL = "SELECT tier, w_ref, t_ref, access_count, confidence, pinned, shard, cold_key FROM memories WHERE rid = ?"


def fingerprint(row: MemoryRow) -> tuple[Any, ...]:
    return (row.tier, row.w_ref, row.t_ref, row.access_count, row.confidence, int(row.pinned), row.shard, row.cold_key)


def _unchanged(conn: sqlite3.Connection, row: MemoryRow) -> bool:
    return conn.execute(_FP_SQL, (row.rid,)).fetchone() == fingerprint(row)


def rewrite_groups(todo: Sequence[tuple[str, str, int]]) -> Iterator[list[tuple[str, str]]]:
    """The objects ``todo`` (``(key, ns, records)``) in order, in groups of at
    most :data:`_REWRITE_GROUP` objects and :data:`_REWRITE_GROUP_RECORDS`
    records (an object larger than that alone), as ``(key, ns)``."""
    group: list[tuple[str, str]] = []
    records = 0
    for key, ns, count in todo:
        if group and (len(group) == _REWRITE_GROUP or records + count > _REWRITE_GROUP_RECORDS):
            yield group
            group, records = [], 0
        group.append((key, ns))
        records += count
    if group:
        yield group


def _sql_inf(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


class Migrator:
    def __init__(self, store: Engine) -> None:
        self.engine = store
        self._background = BackgroundSweeps(
            lambda max_items, budget: store.sweep(max_items=max_items, time_budget_s=budget), "tierstore-migrator"
        )
        # Whether the next sweep looks for archive objects left empty (every record's memory gone) without
        # being collected: a crash between a commit and its collection leaves one, and so does an object
        # store that failed the delete. Read once a process (the first sweep), and again after a failure:
        # the query reads every batch of the store.
        self._emptied_check_due = True
        # archive objects a sweep found damaged: later sweeps pass them over (one
        # fetch each per process, not one per sweep, and they cannot crowd out
        # the others); compact_cold() tries them again
        self._damaged_archives: set[str] = set()
        # a delete's tombstone write and a sweep's collection, one at a time: a
        # write racing a collection could put back an object just dropped
        self._tombstone_lock = threading.Lock()

    # ------------------------------------------------------------------ helpers

    @property
    def cp(self):
        return self.engine.compiled_policy

    def _event(
        self, row: MemoryRow, now: float, kind: str, from_tier: int | None, to_tier: int | None, reason: str
    ) -> tuple[Any, ...]:
        w = lifetime.weight_at(row.w_ref, row.t_ref, row.half_life, now)
        return (
            now,
            row.ns,
            row.id,
            kind,
            None if from_tier is None else TIER_NAMES[from_tier],
            None if to_tier is None else TIER_NAMES[to_tier],
            reason,
            w,
            row.confidence,
            row.access_count,
            row.memory_type,
        )

    def due_in_tier(self, rows: Sequence[MemoryRow], tier: int) -> np.ndarray:
        cp = self.cp
        return due_times(
            np.full(len(rows), tier, np.int64),
            np.array([int(r.pinned) for r in rows], np.int64),
            cp.deletes_of(r.memory_type for r in rows),
            np.array([r.w_ref for r in rows], np.float64),
            np.array([r.t_ref for r in rows], np.float64),
            np.array([r.half_life for r in rows], np.float64),
            np.array([r.expires_at for r in rows], np.float64),
            np.array([r.confidence for r in rows], np.float64),
            np.array([r.t_conf for r in rows], np.float64),
            cp.conf_half_life,
            cp.thresholds,
        )

    def classify_rows(self, rows: Sequence[MemoryRow], now: float) -> np.ndarray:
        cp = self.cp
        return classify(
            now,
            np.array([r.tier for r in rows], np.int64),
            np.array([int(r.pinned) for r in rows], np.int64),
            cp.deletes_of(r.memory_type for r in rows),
            np.array([r.w_ref for r in rows], np.float64),
            np.array([r.t_ref for r in rows], np.float64),
            np.array([r.half_life for r in rows], np.float64),
            np.array([r.expires_at for r in rows], np.float64),
            np.array([r.confidence for r in rows], np.float64),
            np.array([r.t_conf for r in rows], np.float64),
            cp.conf_half_life,
            cp.thresholds,
        )

    def _reason(self, row: MemoryRow, now: float) -> str:
        return "expired" if now >= row.expires_at else "weight"

    def _hot_eligible(self, space: Any, rows: Sequence[MemoryRow]) -> tuple[list[MemoryRow], list[int]]:
        """Hot rows the move may take: still in the loaded index with no
        unflushed change. Returns the rows and their slots."""
        if space is None:
            return list(rows), []
        keep, slots = [], []
        for r in rows:
            slot = space.slot_of.get(r.id)
            if slot is None or space.rids[slot] != r.rid or space.I[C.I_DIRTY, slot]:
                continue
            keep.append(r)
            slots.append(slot)
        return keep, slots

    # ------------------------------------------------------------------ sweep

    def sweep(self, max_items: int | None, time_budget_s: float | None, progress: bool | None) -> SweepReport:
        eng = self.engine
        start = time.perf_counter()
        eng.flush()
        now = eng.store_time.now()
        report = SweepReport(now=now)
        archive_ok = True
        try:
            self.recover(now, report)
        except (ObjectStoreError, CorruptDataError, OSError) as exc:
            # The object store is failing: report it, and still demote and delete
            # (they do not need it); archiving waits for the next sweep.
            report.errors.append(f"{type(exc).__name__}: {exc}")
            archive_ok = False
        batch_size = eng.settings.sweep_batch
        bar = Progress(None, "sweep", enabled=progress, unit=" due")
        if bar.enabled:  # the total is for the bar only: count it only when one is drawn
            total_due = eng.catalog.count_due(now)
            bar.total = min(total_due, max_items) if max_items else total_due
        touched_shards: set[str] = set()
        try:
            while True:
                limit = batch_size if max_items is None else min(batch_size, max_items - report.examined)
                if limit <= 0 or (time_budget_s is not None and time.perf_counter() - start >= time_budget_s):
                    break
                if eng.closed:  # close() is waiting: stop between batches (the next open goes on)
                    break
                rows = eng.catalog.due(now, limit)
                if not rows:
                    break
                report.examined += len(rows)
                actions = self.classify_rows(rows, now)
                buckets: dict[int, list[MemoryRow]] = {
                    a: [] for a in (ACTION_KEEP, ACTION_DEMOTE, ACTION_ARCHIVE, ACTION_DELETE)
                }
                for r, a in zip(rows, actions.tolist()):
                    buckets[a].append(r)
                moved = 0
                moved += self._keep(buckets[ACTION_KEEP], now, report)
                moved += self._delete(buckets[ACTION_DELETE], now, report)
                moved += self._demote(buckets[ACTION_DEMOTE], now, report, touched_shards)
                if archive_ok:
                    moved += self._archive(buckets[ACTION_ARCHIVE], now, report)
                bar.update(len(rows))
                if moved == 0:
                    break  # every row changed under us; the next sweep sees their new state
        except (ObjectStoreError, CorruptDataError, OSError) as exc:
            report.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            bar.close()
        if archive_ok and not eng.closed and (time_budget_s is None or time.perf_counter() - start < time_budget_s):
            try:
                # as many as this sweep's deletes may have marked (each marks at most its own object), and a
                # bounded share of the others: marks must not outrun rewrites, or the backlog, the deleted
                # text left in objects and the tombstones kept for it grow night after night
                report.compacted = self.compact_archives(now, limit=_COMPACT_PER_SWEEP + report.deleted)
            except (ObjectStoreError, CorruptDataError, OSError) as exc:
                report.errors.append(f"{type(exc).__name__}: {exc}")
        if archive_ok:
            self.settle_tombstones(report)
        if archive_ok and not eng.closed and eng.catalog.get_meta("cold_codes") != CODES_COMPLETE:
            try:  # stores archived before the cold index, or its places: a bounded share per sweep
                self.backfill_codes(limit=_BACKFILL_PER_SWEEP)
            except (ObjectStoreError, CorruptDataError, OSError) as exc:
                report.errors.append(f"{type(exc).__name__}: {exc}")
        for ns in touched_shards:
            self.compact_warm(ns, now)
        self.repair_warm(now)
        if eng.ownership.lost:
            report.errors.append(eng.ownership.lost)
        if report.archived or report.deleted or report.demoted or report.compacted:
            # what the sweep read, packed and moved (rows, vectors, archive bytes) is freed but kept by the
            # allocator between the survivors' small blocks: give those pages back, once a sweep
            release_freed()
        report.remaining_due = eng.catalog.count_due(now)
        report.elapsed_s = time.perf_counter() - start
        return report

    def preview(self, max_items: int | None, time_budget_s: float | None) -> SweepReport:
        """What a sweep would do now, changing nothing: the due memories read
        in order (keyset pages of the due index), classified, counted by
        action and type. Pending archive batches and marked objects are not
        finished or rewritten (a dry run writes nothing)."""
        eng = self.engine
        start = time.perf_counter()
        now = eng.store_time.now()
        report = SweepReport(now=now, dry_run=True)
        names = {ACTION_KEEP: "kept", ACTION_DEMOTE: "demoted", ACTION_ARCHIVE: "archived", ACTION_DELETE: "deleted"}
        after: tuple[float, int] = (-math.inf, -1)
        while max_items is None or report.examined < max_items:
            if time_budget_s is not None and time.perf_counter() - start >= time_budget_s:
                break
            limit = (
                eng.settings.sweep_batch
                if max_items is None
                else min(eng.settings.sweep_batch, max_items - report.examined)
            )
            rows = eng.catalog.due_after(now, after, limit)
            if not rows:
                break
            after = (rows[-1].due_at, rows[-1].rid)
            report.examined += len(rows)
            for r, a in zip(rows, self.classify_rows(rows, now).tolist()):
                self._count(report, r, names[a])
        report.remaining_due = eng.catalog.count_due(now)
        report.elapsed_s = time.perf_counter() - start
        return report

    def _count(self, report: SweepReport, row: MemoryRow, key: str) -> None:
        setattr(report, key, getattr(report, key) + 1)
        per = report.by_type.setdefault(row.memory_type, {})
        per[key] = per.get(key, 0) + 1

    # -- keep: a row was due but no action applies (its state moved on) ------

    def _keep(self, rows: list[MemoryRow], now: float, report: SweepReport) -> int:
        """Rewrite the due time of rows that were due but need no action (their
        stored due time was stale, e.g. after a context change)."""
        if not rows:
            return 0
        new_due: dict[int, float] = {}
        for tier in (TIER_HOT, TIER_WARM, TIER_COLD):
            part = [r for r in rows if r.tier == tier]
            if part:
                # A kept row must leave the due range, or this sweep would read it again.
                new_due.update((r.rid, max(d, now + 1.0)) for r, d in zip(part, self.due_in_tier(part, tier).tolist()))

        def write(conn: sqlite3.Connection) -> None:
            for r in rows:
                if _unchanged(conn, r):
                    conn.execute("UPDATE memories SET due_at = ? WHERE rid = ?", (_sql_inf(new_due[r.rid]), r.rid))

        self.engine.catalog.write(write)
        for ns, group in group_by_ns(r for r in rows if r.tier == TIER_HOT).items():
            space = self.engine.hot.get(ns)
            if space is None:
                continue
            with space.lock.read(), space.access_lock:
                for r in group:
                    slot = space.slot_of.get(r.id)
                    if slot is not None and not space.I[C.I_DIRTY, slot]:
                        space.F[C.F_DUE, slot] = new_due[r.rid]
        for r in rows:
            self._count(report, r, "kept")
        return len(rows)

    # A sweep batch moves memories of many namespaces at once: each step (copy,
    # commit, remove) covers every namespace, so the catalog sees one
    # transaction per step, not one per namespace. The namespaces' hot guards
    # are taken in sorted order (callers elsewhere hold at most one).

    @contextmanager
    def _guards(self, namespaces: Iterable[str]) -> Iterator[dict[str, Any]]:
        with ExitStack() as stack:
            yield {ns: stack.enter_context(self.engine.hot.guard(ns)) for ns in sorted(set(namespaces))}

    def _plan(
        self, spaces: dict[str, Any], groups: dict[str, list[MemoryRow]]
    ) -> dict[str, tuple[list[MemoryRow], list[int], list[MemoryRow]]]:
        """Per namespace: the movable hot rows with their slots, and the other rows."""
        plan = {}
        for ns, group in groups.items():
            ok_hot, slots = self._hot_eligible(spaces[ns], [r for r in group if r.tier == TIER_HOT])
            plan[ns] = (ok_hot, slots, [r for r in group if r.tier != TIER_HOT])
        return plan

    def _remove_hot(self, spaces: dict[str, Any], plan: dict[str, Any], done: Iterable[MemoryRow]) -> None:
        done_ids = {r.rid for r in done}
        for ns, (ok_hot, slots, _) in plan.items():
            space = spaces[ns]
            if space is not None:
                space.remove([sl for r, sl in zip(ok_hot, slots) if r.rid in done_ids])

    # -- delete -----------------------------------------------------------------

    def _delete(self, rows: list[MemoryRow], now: float, report: SweepReport) -> int:
        if not rows:
            return 0
        groups = group_by_ns(rows)
        with self._guards(groups) as spaces:
            plan = self._plan(spaces, groups)
            candidates = [r for ok_hot, _, other in plan.values() for r in ok_hot + other]

            # per namespace, the tombstone object its deletes share (written once committed); a key left by a
            # rolled-back attempt names no row and is merely reused
            noted: dict[str, str] = {}

            def write(conn: sqlite3.Connection) -> list[MemoryRow]:
                done = []
                stale: dict[str, set[int]] = {}  # per namespace, read once
                for r in candidates:
                    if not _unchanged(conn, r):
                        continue
                    conn.execute("DELETE FROM memories WHERE rid = ?", (r.rid,))
                    if r.tier == TIER_COLD:
                        conn.execute(MARK_PURGE_SQL, (r.cold_key,))
                        has_record = True
                    else:
                        if r.ns not in stale:
                            stale[r.ns] = tombstones.stale_rids(conn, r.ns)
                        has_record = r.rid in stale[r.ns]
                    if has_record:
                        noted[r.ns] = tombstones.note_deletion(conn, r.ns, r.id, now, noted.get(r.ns))
                    reason = ("expired" if now >= r.expires_at else "weight") + ", low confidence"
                    conn.execute(EVENT_SQL, self._event(r, now, "delete", r.tier, None, reason))
                    done.append(r)
                return done

            done = self.engine.catalog.write(write)
            self._remove_hot(spaces, plan, done)
        for ns, gone in group_by_ns([r for r in done if r.tier == TIER_COLD]).items():
            self.engine.cold_index.forget(ns, [r.rid for r in gone])
        for r in done:
            self._count(report, r, "deleted")
        if noted:
            self.write_tombstones(report)
        self.collect_archives({r.cold_key for r in done if r.cold_key})
        return len(done)

    # -- demote: hot -> warm ----------------------------------------------------------

    def _demote(self, rows: list[MemoryRow], now: float, report: SweepReport, touched: set[str]) -> int:
        if not rows:
            return 0
        eng = self.engine
        groups = group_by_ns(rows)
        shards = {}
        for ns, group in groups.items():  # 1. copy
            shards[ns] = eng.warm.write_shard(
                ns, np.array([r.rid for r in group], np.int64), stack_embeddings([r.embedding for r in group], eng.dim)
            )
        crash_point("demote.after_shard")
        with self._guards(groups) as spaces:
            plan = self._plan(spaces, groups)
            due = {ns: self.due_in_tier(ok, TIER_WARM) if ok else np.zeros(0) for ns, (ok, _, _) in plan.items()}

            def write(conn: sqlite3.Connection) -> list[MemoryRow]:  # 2. commit
                done = []
                for ns, (ok, _, _) in plan.items():
                    name, kind = shards[ns]
                    cur = conn.execute(
                        "INSERT INTO shards (ns, name, kind, count, created_at) VALUES (?, ?, ?, ?, ?)",
                        (ns, name, kind, len(groups[ns]), now),
                    )
                    shard = int(cur.lastrowid)  # type: ignore[arg-type]
                    moved = 0
                    for r, d in zip(ok, due[ns].tolist()):
                        if not _unchanged(conn, r):
                            continue
                        conn.execute(  # OR FAIL: see the archive's update below
                            "UPDATE OR FAIL memories SET tier = ?, shard = ?, due_at = ? WHERE rid = ?",
                            (TIER_WARM, shard, _sql_inf(d), r.rid),
                        )
                        conn.execute(EVENT_SQL, self._event(r, now, "demote", TIER_HOT, TIER_WARM, "weight"))
                        done.append(r)
                        moved += 1
                    if not moved:
                        conn.execute("DELETE FROM shards WHERE shard = ?", (shard,))
                return done

            done = eng.catalog.write(write)
            crash_point("demote.after_commit")
            self._remove_hot(spaces, plan, done)  # 3. remove
        moved_ns = {r.ns for r in done}
        for ns, (name, _) in shards.items():
            if ns not in moved_ns:
                eng.warm.remove_files(name)
        eng.warm.refresh(shards)
        touched.update(moved_ns)
        for r in done:
            self._count(report, r, "demoted")
        return len(done)

    # -- archive: hot or warm -> cold ---------------------------------------------------

    def _archive(self, rows: list[MemoryRow], now: float, report: SweepReport) -> int:
        if not rows:
            return 0
        groups = group_by_ns(rows)
        keys = self._record_batches({ns: [r.rid for r in g] for ns, g in groups.items()}, now)
        crash_point("archive.after_intent")
        done = self._finish_batches([(keys[ns], ns, g) for ns, g in groups.items()], now, report)
        return len(done)

    def record_batch(self, ns: str, rids: list[int], now: float) -> str:
        """Record one pending archive batch of ``rids`` (synced); returns its key."""
        return self._record_batches({ns: rids}, now)[ns]

    def _record_batches(self, rids_by_ns: dict[str, list[int]], now: float) -> dict[str, str]:
        """Record pending archive batches, one per namespace; returns their keys."""
        return dict(zip(rids_by_ns, self._record_pending(list(rids_by_ns.items()), now)))

    def _record_pending(self, batches: list[tuple[str, list[int]]], now: float) -> list[str]:
        """Record pending archive batches ``(ns, rids)`` (several may share a
        namespace) in one transaction, synced; returns their keys, in order."""

        def write(conn: sqlite3.Connection) -> list[str]:
            keys = []
            for i, (ns, rids) in enumerate(batches):
                cur = conn.execute(
                    "INSERT INTO archives (key, ns, rids, state, count, created_at) VALUES (?, ?, ?, 'pending', ?, ?)",
                    (f"pending-{time.monotonic_ns()}-{i}-{ns}", ns, json.dumps(rids), len(rids), now),
                )
                batch = int(cur.lastrowid)  # type: ignore[arg-type]
                keys.append(ColdTier.new_key(ns, batch))
                conn.execute("UPDATE archives SET key = ? WHERE batch = ?", (keys[-1], batch))
            return keys

        keys = self.engine.catalog.write(write)
        # The intent is on disk before the object is written: were it lost to an
        # OS crash, the object would be an orphan no sweep finishes or collects
        # (and a catalog rebuilt from the bucket would find its stale records).
        self.engine.catalog.sync()
        return keys

    def _finish_batches(
        self, batches: list[tuple[str, str, list[MemoryRow]]], now: float, report: SweepReport | None
    ) -> list[MemoryRow]:
        """Write each batch's object (unless it exists), then move the rows that
        are still as classified into them, in one transaction."""
        eng = self.engine
        where = {}
        held: dict[str, int] = {}  # records in each object
        for key, ns, rows in batches:  # 1. copy
            marks = supersession.record_marks(eng.catalog, ns, rows)
            entries, held[key] = eng.cold.write_batch(key, ns, rows, now, marks)
            where[key] = {e.id: e for e in entries}
        crash_point("archive.after_put")
        groups = {ns: rows for _, ns, rows in batches}
        key_of = {ns: key for key, ns, _ in batches}
        with self._guards(groups) as spaces:
            plan = self._plan(spaces, groups)
            candidates = [(key_of[ns], r) for ns, (ok_hot, _, other) in plan.items() for r in ok_hot + other]
            due = self.due_in_tier([r for _, r in candidates], TIER_COLD) if candidates else np.zeros(0)
            # the cold index's codes (sign and int8), from the vectors about to leave the catalog
            stacked = stack_embeddings([r.embedding for _, r in candidates], eng.dim) if candidates else None
            codes = list(zip(encode_codes(stacked), encode_code8(stacked))) if stacked is not None else []

            added: dict[str, list[tuple[Any, ...]]] = {}  # the codes committed, by namespace

            def write(conn: sqlite3.Connection) -> list[MemoryRow]:  # 2. commit
                done = []
                added.clear()
                for (key, r), d, (code, code8) in zip(candidates, due.tolist(), codes):
                    e = where[key].get(r.id)
                    if e is None or not _unchanged(conn, r):
                        continue
                    # OR FAIL: a failed update is undone by the write's savepoint (Catalog._run), so SQLite opens
                    # no statement journal for it, which an update of `tier` (a trigger's column) otherwise
                    # gets and which copied each page the row touched: the writer's CPU per archived memory
                    # 85-89 -> 36-40 us (benchmarks/sweep_cost.py: 12 000 archived, 384-d).
                    conn.execute(
                        "UPDATE OR FAIL memories SET tier = ?, embedding = NULL, shard = NULL, cold_key = ?,"
                        " cold_offset = ?, cold_length = ?, due_at = ? WHERE rid = ?",
                        (TIER_COLD, key, e.offset, e.length, _sql_inf(d), r.rid),
                    )
                    place = _place(e.vector_at, r.embedding)
                    conn.execute(CODE_SQL, (r.rid, r.ns, code, *place, code8))
                    added.setdefault(r.ns, []).append((r.rid, code, *place))
                    conn.execute(EVENT_SQL, self._event(r, now, "archive", r.tier, TIER_COLD, self._reason(r, now)))
                    done.append(r)
                conn.executemany("UPDATE archives SET state = 'done' WHERE key = ?", [(k,) for k, _, _ in batches])
                committed = Counter(key_of[r.ns] for r in done)
                # Records of members that changed meanwhile (restored, pinned,
                # deleted) are stale from the start: the object waits for a rewrite.
                conn.executemany(MARK_PURGE_SQL, [(k,) for k, _, _ in batches if committed[k] < held[k]])
                return done

            done = eng.catalog.write(write)
            crash_point("archive.after_commit")
            self._remove_hot(spaces, plan, done)  # 3. remove
        for ns, codes_added in added.items():
            eng.cold_index.add(ns, codes_added)
        if report is not None:
            for r in done:
                self._count(report, r, "archived")
        used = {key_of[r.ns] for r in done}
        self.collect_archives(k for k, _, _ in batches if k not in used)
        return done

    def recover(self, now: float, report: SweepReport) -> None:
        """Finish archive batches a crash interrupted: the memories still due
        for archiving go into the batch's object (written now if it was not);
        the batch is dropped if none is left. Collect emptied batches."""
        eng = self.engine
        if self._emptied_check_due:
            # Batches emptied by a restore or delete that crashed before collecting them.
            self.collect_archives(
                k
                for (k,) in eng.catalog.query(
                    "SELECT key FROM archives a WHERE state != 'pending' AND NOT EXISTS"
                    " (SELECT 1 FROM memories m WHERE m.cold_key = a.key)"
                )
            )
            self._emptied_check_due = False
        for key, ns, rids_json in eng.catalog.query("SELECT key, ns, rids FROM archives WHERE state = 'pending'"):
            rows = [r for r in eng.catalog.get_rows_by_rid(json.loads(rids_json)) if r.tier != TIER_COLD]
            actions = self.classify_rows(rows, now) if rows else np.zeros(0, np.int8)
            rows = [r for r, a in zip(rows, actions.tolist()) if a == ACTION_ARCHIVE]
            if rows:
                self._finish_batches([(key, ns, rows)], now, report)
            else:
                eng.catalog.execute("UPDATE archives SET state = 'done' WHERE key = ?", (key,))
                self.collect_archives({key})

    def collect_archives(self, keys: Iterable[str]) -> int:
        """Delete archive objects none of whose memories is still cold there."""
        eng = self.engine
        empty = []
        for key in keys:
            live = eng.catalog.query_one("SELECT count(*) FROM memories WHERE cold_key = ?", (key,))
            pending = eng.catalog.query_one("SELECT count(*) FROM archives WHERE key = ? AND state = 'pending'", (key,))
            if live and live[0] == 0 and pending and pending[0] == 0:
                empty.append(key)
        if not empty or not eng.ownership.may_delete():  # never delete in a prefix handed over to another store
            return 0
        # The commits that moved the memories out (restore, delete, rewrite) must
        # be on disk before the object goes: lost to an OS crash after the
        # delete, they would leave the catalog pointing at nothing.
        eng.catalog.sync()
        deleted: list[str] = []

        def forget(conn: sqlite3.Connection) -> None:
            for key in deleted:
                cold_relayout.forget_archive(conn, key)

        try:
            for key in empty:
                eng.cold.delete(key)
                crash_point("collect.after_object_delete")
                deleted.append(key)
        except BaseException:
            self._emptied_check_due = True  # the next sweep finds what is left
            raise
        finally:  # the deleted objects' rows in one transaction (a row left by a crash is dropped next time)
            if deleted:
                eng.catalog.write(forget)
        return len(empty)

    # -- tombstones --------------------------------------------------------------------------

    def write_tombstones(self, report: SweepReport | None = None) -> None:
        """Write the objects of pending tombstones. An object-store failure
        leaves them pending for the next sweep (and goes to ``report.errors``):
        the delete they record is already committed."""
        self._tombstone_step(tombstones.write_pending, report)

    def settle_tombstones(self, report: SweepReport | None = None) -> None:
        """Write pending tombstones, then drop those no archive object needs
        (while the prefix is still this store's)."""
        self._tombstone_step(tombstones.write_pending, report)
        self._tombstone_step(
            lambda catalog, objects: tombstones.collect(catalog, objects) if self.engine.ownership.may_delete() else 0,
            report,
        )

    def _tombstone_step(self, step: Any, report: SweepReport | None) -> None:
        try:
            with self._tombstone_lock:
                step(self.engine.catalog, self.engine.cold.store)
        except (ObjectStoreError, OSError) as exc:  # retried by the next sweep
            if report is not None:
                report.errors.append(f"{type(exc).__name__}: {exc}")

    # -- archive compaction ----------------------------------------------------------------

    def compact_archives(
        self,
        now: float,
        *,
        everything: bool = False,
        limit: int | None = None,
        progress: bool | None = None,
        strict: bool = False,
    ) -> int:
        """Rewrite archive objects without the records of memories that left
        them (deleted, restored, or changed while being archived), and with
        ``everything`` lay out again each namespace whose archive is not in
        the order of meaning (:func:`cold_relayout.namespaces_to_lay_out`,
        :func:`cold_relayout.lay_out`); returns how many objects were written.

        Rewritten: batches marked ``purge`` (every event that leaves a stale
        record in an object marks it, so that no deleted memory's text stays
        behind), and with ``everything`` also any batch whose object may hold
        more records than memories point at it (stores from before the marks).
        Each rewrite is copy → commit → collect, like an archive: the new batch
        is recorded pending first, so a crash leaves either the old object in
        use or the new one, and the next sweep drops the other. An object
        whose live records fail their checksums is left as it is (``verify``
        reports it; copying it would spread the damage), or with ``strict``
        CorruptDataError is raised after the other objects are done; later
        sweeps of this process pass it over (``everything`` tries it again)."""
        eng = self.engine
        if everything:
            todo = [
                (key, ns, count)
                for key, ns, state, count, live in eng.catalog.query(
                    "SELECT a.key, a.ns, a.state, a.count,"
                    " (SELECT count(*) FROM memories m WHERE m.cold_key = a.key)"
                    " FROM archives a WHERE a.state != 'pending' ORDER BY a.batch"
                )
                if state == "purge" or 0 < live < count
            ]
        else:  # the sweep: marked batches only, no count per batch
            todo = [
                (key, ns, count)
                for key, ns, count in eng.catalog.query(
                    "SELECT key, ns, count FROM archives WHERE state = 'purge' ORDER BY batch"
                )
                if key not in self._damaged_archives
            ]
        todo = todo[:limit] if limit is not None else todo
        done = 0
        damaged: list[CorruptDataError] = []
        with Progress(len(todo), "compact archives", enabled=progress, unit=" objects") as bar:
            for group in rewrite_groups(todo):
                written, failed = self._rewrite_batches(group, now)
                done += written
                for key, exc in failed:
                    damaged.append(exc)
                    self._damaged_archives.add(key)
                self._damaged_archives.difference_update({key for key, _ in group} - {key for key, _ in failed})
                bar.update(len(group))
        if everything:
            layouts = cold_relayout.namespaces_to_lay_out(eng.catalog)
            with Progress(len(layouts), "lay out archives", enabled=progress, unit=" namespaces") as bar:
                for ns in layouts:
                    try:
                        done += cold_relayout.lay_out(self, ns, now)
                    except CorruptDataError as exc:
                        damaged.append(exc)
                    except ObjectNotFoundError as exc:  # the other namespaces are laid out all the same
                        damaged.append(CorruptDataError(f"namespace {ns!r} not laid out: {exc}"))
                    bar.update(1)
        if damaged and strict:
            raise CorruptDataError(
                f"{len(damaged)} archive object(s) not rewritten: " + "; ".join(str(e) for e in damaged)
            )
        return done

    def _rewrite_batches(
        self, group: list[tuple[str, str]], now: float
    ) -> tuple[int, list[tuple[str, CorruptDataError]]]:
        """Rewrite the objects ``group`` (``(key, ns)``) without their stale
        records, together: each object's live records read and checked, the new
        batches recorded pending in one transaction (synced), their objects
        written, the rows moved in one transaction, then the old objects (and
        any new one a restore or delete left unused meanwhile) collected after
        one sync. The same steps as one archive batch, in the same order, so a
        crash between any two leaves what recovery already finishes: pending
        batches whose rows are still in the old objects, or old objects nobody
        points at. Returns the objects written and the damaged ones left as
        they are (their live records fail their checksums or are another
        memory's)."""
        eng = self.engine
        plans: list[tuple[str, str, list[MemoryRow], list[dict[str, Any]]]] = []
        emptied: set[str] = set()
        damaged: list[tuple[str, CorruptDataError]] = []
        for key, ns in group:
            rows = eng.catalog.select_rows("WHERE m.cold_key = ? ORDER BY m.cold_offset", (key,))
            if not rows:
                emptied.add(key)
                continue
            try:
                records = eng.cold.fetch([Location(key, r.cold_offset, r.cold_length) for r in rows])  # type: ignore[arg-type]
                for r, rec in zip(rows, records):
                    if rec["id"] != r.id or rec["ns"] != r.ns:
                        raise CorruptDataError(
                            f"archive object {key} at byte {r.cold_offset} holds {rec['id']!r}, "
                            f"the catalog expects {r.id!r}"
                        )
            except CorruptDataError as exc:
                damaged.append((key, exc))
                continue
            plans.append((key, ns, rows, records))
        if not plans:
            self.collect_archives(emptied)
            return 0, damaged
        new_keys = self._record_pending([(ns, [r.rid for r in rows]) for _, ns, rows, _ in plans], now)
        crash_point("compact.after_intent")
        placed = []
        for (_, ns, _, records), new_key in zip(plans, new_keys):
            entries, _ = eng.cold.write_records(new_key, ns, records, now)
            # the vectors are at hand: their int8 codes are written with the places (rows archived before
            # them had none)
            placed.append((entries, [_code8_of(rec["embedding"], eng.dim) for rec in records]))
        crash_point("compact.after_put")

        def write(conn: sqlite3.Connection) -> None:
            for (key, ns, rows, records), new_key, (entries, code8s) in zip(plans, new_keys, placed):
                moved = 0
                for r, e, rec, code8 in zip(rows, entries, records, code8s):
                    # a memory restored or deleted since it was read stays out of the new object's use
                    if conn.execute(
                        "UPDATE memories SET cold_key = ?, cold_offset = ?, cold_length = ?"
                        " WHERE rid = ? AND cold_key = ? AND cold_offset = ?",
                        (new_key, e.offset, e.length, r.rid, key, r.cold_offset),
                    ).rowcount:
                        moved += 1
                        conn.execute(
                            "UPDATE cold_codes SET vector_at = ?, vector_crc = ?, code8 = ? WHERE rid = ?",
                            (*_place(e.vector_at, rec["embedding"]), code8, r.rid),
                        )
                conn.execute(
                    "UPDATE archives SET state = ? WHERE key = ?", ("done" if moved == len(rows) else "purge", new_key)
                )
                cold_relayout.carry_layout_key(conn, ns, key, new_key)  # the same records, in the same order

        eng.catalog.write(write)
        crash_point("compact.after_commit")
        self.collect_archives(emptied | {key for key, _, _, _ in plans} | set(new_keys))
        return len(plans), damaged

    # -- warm shard upkeep ---------------------------------------------------------------

    def compact_warm(self, ns: str, now: float) -> None:
        """Rebuild shards that are mostly tombstones, and merge a namespace's
        shards when there are too many."""
        eng = self.engine
        settings = eng.warm.settings
        infos = eng.warm.shards(ns)
        if not infos:
            return
        live = {
            shard: n
            for shard, n in eng.catalog.query(
                "SELECT shard, count(*) FROM memories WHERE ns = ? AND tier = ? AND shard IS NOT NULL GROUP BY shard",
                (ns, TIER_WARM),
            )
        }
        stale = [i for i in infos if live.get(i.shard, 0) < settings.rebuild_live_fraction * i.count]
        if len(infos) > settings.merge_above:
            stale = infos
        if not stale:
            return
        self.rebuild_shards(ns, stale, now)

    def repair_warm(self, now: float) -> int:
        """Rebuild, from the catalog, the shards that failed to load (damaged
        or lost files). Returns how many shards were rebuilt."""
        damaged = list(self.engine.warm.damaged.values())
        by_ns: dict[str, list[Any]] = {}
        for info in damaged:
            by_ns.setdefault(info.ns, []).append(info)
        for ns, infos in by_ns.items():
            self.rebuild_shards(ns, infos, now)
        return len(damaged)

    def rebuild_shards(self, ns: str, infos: Sequence[Any], now: float) -> None:
        """Replace ``infos`` by one shard of their live rows, vectors from the
        catalog (so a damaged shard is rebuilt too)."""
        eng = self.engine
        ids = [i.shard for i in infos]
        marks = ",".join("?" * len(ids))
        rows = eng.catalog.select_rows(f"WHERE m.tier = ? AND m.shard IN ({marks})", (TIER_WARM, *ids))
        name = kind = None
        if rows:
            name, kind = eng.warm.write_shard(
                ns, np.array([r.rid for r in rows], np.int64), stack_embeddings([r.embedding for r in rows], eng.dim)
            )

        def write(conn: sqlite3.Connection) -> None:
            shard = None
            if rows:
                cur = conn.execute(
                    "INSERT INTO shards (ns, name, kind, count, created_at) VALUES (?, ?, ?, ?, ?)",
                    (ns, name, kind, len(rows), now),
                )
                shard = int(cur.lastrowid)  # type: ignore[arg-type]
            conn.execute(
                f"UPDATE memories SET shard = ? WHERE tier = ? AND shard IN ({marks})", (shard, TIER_WARM, *ids)
            )
            conn.execute(f"DELETE FROM shards WHERE shard IN ({marks})", ids)

        eng.catalog.write(write)
        crash_point("rebuild.after_commit")
        eng.warm.refresh([ns])
        # The commit that moved the rows off the old shards is on disk before
        # their files go: lost to an OS crash after the delete, it would leave
        # the catalog pointing at shards without files (as for archive objects).
        eng.catalog.sync()
        for i in infos:
            eng.warm.forget(i.shard)
            eng.warm.remove_files(i.name)

    # ------------------------------------------------------------------ into hot

    def promote(
        self,
        ns: str,
        rows: Sequence[MemoryRow],
        now: float,
        *,
        access: bool,
        kind: str,
        cold_records: dict[str, dict[str, Any]] | None = None,
        reason: str | None = None,
    ) -> list[MemoryRow]:
        """Move warm (or, with ``cold_records``, cold) rows into the hot tier:
        ``kind`` events, whose reason is ``reason`` (default: the kind).

        access: count one access (a used search hit or a touch). Restored and
        promoted memories restart their TTL now, count as recently used for
        recency, and keep at least their type's initial weight, so the next
        sweep does not send them straight back.
        Returns the rows as they are now hot."""
        eng = self.engine
        cp = self.cp
        new_rows: list[MemoryRow] = []
        for r in rows:
            t_idx = eng.policy.type_index(r.memory_type)
            w = lifetime.weight_at(r.w_ref, r.t_ref, r.half_life, now)
            w0 = float(cp.w0_by_type[t_idx])
            w = max(w, w0)
            if access:
                w += float(cp.boost_by_type[t_idx])
            emb = r.embedding if cold_records is None else cold_records[r.id]["embedding"]
            nr = dataclasses.replace(r, embedding=emb)
            nr.w_ref, nr.t_ref, nr.ttl_anchor = w, now, max(r.ttl_anchor, now)
            # Brought back because it is needed: recent for recency, whether or
            # not an access is counted.
            nr.last_accessed_at = max(r.last_accessed_at, now)
            if access:
                nr.access_count += 1
            nr.tier, nr.shard, nr.cold_key, nr.cold_offset, nr.cold_length = TIER_HOT, None, None, None, None
            new_rows.append(nr)
        if not new_rows:
            return []
        due = self.due_in_tier(new_rows, TIER_HOT)
        for nr, d in zip(new_rows, due.tolist()):
            nr.due_at = d
        with eng.hot.guard(ns) as space:

            def write(conn: sqlite3.Connection) -> list[int]:
                done = []
                for old, nr in zip(rows, new_rows):
                    if not _unchanged(conn, old):
                        continue
                    conn.execute(  # OR FAIL: see the archive's update
                        "UPDATE OR FAIL memories SET tier = ?, embedding = ?, shard = NULL, cold_key = NULL,"
                        " cold_offset = NULL, cold_length = NULL, w_ref = ?, t_ref = ?, ttl_anchor = ?,"
                        " access_count = ?, last_accessed_at = ?, due_at = ? WHERE rid = ?",
                        (
                            TIER_HOT,
                            nr.embedding,
                            nr.w_ref,
                            nr.t_ref,
                            nr.ttl_anchor,
                            nr.access_count,
                            nr.last_accessed_at,
                            _sql_inf(nr.due_at),
                            old.rid,
                        ),
                    )
                    if old.tier == TIER_COLD:
                        conn.execute(MARK_PURGE_SQL, (old.cold_key,))  # its record there is stale now
                    if access and eng.settings.access_log:
                        conn.execute(ACCESS_LOG_SQL, (nr.ns, nr.id, int(now // 86400), 1))
                    conn.execute(EVENT_SQL, self._event(nr, now, kind, old.tier, TIER_HOT, reason or kind))
                    done.append(old.rid)
                return done

            done_rids = set(eng.catalog.write(write))
            crash_point("restore.after_commit")
            moved = [nr for nr in new_rows if nr.rid in done_rids]
            if space is not None and moved:
                space.add_rows(moved, stack_embeddings([nr.embedding for nr in moved], eng.dim))
        keys = {r.cold_key for r in rows if r.cold_key and r.rid in done_rids}
        if keys:
            self.collect_archives(keys)
        return moved

    def restore(
        self,
        ns: str,
        *,
        ids: Sequence[str] | None,
        where: dict[str, Any] | None,
        text: str | None,
        query: np.ndarray | None,
        limit: int | None,
        progress: bool | None,
        reason: str = "restore",
    ) -> list[str]:
        """Bring the selected cold memories back hot: ``restore`` events with
        ``reason`` (``"restore"``: asked for; ``"re-added"``: said again, a
        duplicate of an archived memory; the lifecycle report tells them apart)."""
        rows = self.select_cold(ns, ids=ids, where=where, text=text, query=query, limit=limit)
        if not rows:
            return []
        restored: list[str] = []
        with Progress(len(rows), "restore", enabled=progress, unit=" memories") as bar:
            for i in range(0, len(rows), 256):
                chunk = rows[i : i + 256]
                records = self.cold_records(chunk)
                moved = self.promote(
                    ns,
                    [r for r in chunk if r.id in records],
                    self.engine.store_time.now(),
                    access=False,
                    kind="restore",
                    cold_records=records,
                    reason=reason,
                )
                restored.extend(r.id for r in moved)
                bar.update(len(chunk))
        return restored

    def cold_records(
        self, rows: Sequence[MemoryRow], vector_at: dict[str, int] | None = None
    ) -> dict[str, dict[str, Any]]:
        """The archive records of cold ``rows`` by id, each checked to be the
        memory the catalog expects there (one ranged GET per run of records);
        ``vector_at``, if given, receives where each one's embedding starts
        in its frame (:func:`archive.vector_at`).
        A row that changed since it was read (deleted and its object
        collected, restored, or rewritten into another object by a racing
        call) is left out; a record missing or damaged where the catalog
        still points raises (ObjectNotFoundError, CorruptDataError)."""
        try:
            return self._fetch_records(rows, vector_at)
        except (ObjectNotFoundError, CorruptDataError):
            current = {r.rid: r for r in self.engine.catalog.get_rows_by_rid([r.rid for r in rows])}
            still = [
                r
                for r in rows
                if (c := current.get(r.rid)) is not None
                and c.tier == TIER_COLD
                and (c.cold_key, c.cold_offset) == (r.cold_key, r.cold_offset)
            ]
            if len(still) == len(rows):
                raise  # nothing moved: the archive itself is missing or damaged
            return self._fetch_records(still, vector_at) if still else {}

    def _fetch_records(
        self, rows: Sequence[MemoryRow], vector_at: dict[str, int] | None = None
    ) -> dict[str, dict[str, Any]]:
        placed = self.engine.cold.fetch_placed([Location(r.cold_key, r.cold_offset, r.cold_length) for r in rows])  # type: ignore[arg-type]
        by_id = {}
        for r, (rec, at) in zip(rows, placed):
            if rec["id"] != r.id or rec["ns"] != r.ns:
                raise CorruptDataError(
                    f"archive object {r.cold_key} at byte {r.cold_offset} holds {rec['id']!r}, "
                    f"the catalog expects {r.id!r}"
                )
            by_id[r.id] = rec
            if vector_at is not None:
                vector_at[r.id] = at
        return by_id

    def reactivate(
        self, ns: str, rows: Sequence[MemoryRow], now: float, records: dict[str, dict[str, Any]] | None = None
    ) -> list[MemoryRow]:
        """Cold memories that were used (a touch, or a search hit whose access
        is recorded) come back hot, with the access counted: a ``reactivate``
        event. ``records``: their archive records, if the caller has them."""
        if not rows:
            return []
        records = records if records is not None else self.cold_records(rows)
        return self.promote(
            ns, [r for r in rows if r.id in records], now, access=True, kind="reactivate", cold_records=records
        )

    def backfill_codes(self, limit: int | None = None) -> int:
        """Write the cold-index codes of cold memories that have none, or
        whose vector's place is not known (stores archived by versions before
        the index, or before the places): their records are read back from
        the archive objects. Returns how many were written; bounded by
        ``limit``. Once a pass finds none missing, the catalog says so (meta
        ``cold_codes``: :data:`CODES_COMPLETE`) and later sweeps skip the look."""
        eng = self.engine
        sql = (
            "SELECT m.rid FROM memories m LEFT JOIN cold_codes c ON c.rid = m.rid"
            " WHERE m.tier = ? AND (c.rid IS NULL OR c.vector_at IS NULL) AND m.cold_key IS NOT NULL"
        )
        rids = [r for (r,) in eng.catalog.query(sql + ("" if limit is None else f" LIMIT {int(limit)}"), (TIER_COLD,))]
        if not rids:
            eng.catalog.set_meta({"cold_codes": CODES_COMPLETE})
            return 0
        finishes = limit is None or len(rids) < limit  # this pass covers every memory still missing one
        rows = sorted(eng.catalog.get_rows_by_rid(rids), key=lambda r: (r.cold_key or "", r.cold_offset or 0))
        written = 0
        for i in range(0, len(rows), 512):
            chunk = [r for r in rows[i : i + 512] if r.tier == TIER_COLD]
            at: dict[str, int] = {}
            records = self.cold_records(chunk, at)
            entries = [
                (
                    r,
                    _code_of(records[r.id]["embedding"], eng.dim),
                    _place(at[r.id], records[r.id]["embedding"]),
                    _code8_of(records[r.id]["embedding"], eng.dim),
                )
                for r in chunk
                if r.id in records
            ]

            def write(conn: sqlite3.Connection, entries: Any = entries) -> int:
                n = 0
                for r, code, place, code8 in entries:  # still cold where it was read from
                    if conn.execute(
                        "SELECT 1 FROM memories WHERE rid = ? AND tier = ? AND cold_key = ? AND cold_offset = ?",
                        (r.rid, TIER_COLD, r.cold_key, r.cold_offset),
                    ).fetchone():
                        conn.execute(CODE_SQL, (r.rid, r.ns, code, *place, code8))
                        n += 1
                return n

            written += eng.catalog.write(write)
        for ns in {r.ns for r in rows}:
            eng.cold_index.invalidate(ns)
        if finishes:  # every archive since writes its codes itself
            eng.catalog.set_meta({"cold_codes": CODES_COMPLETE})
        return written

    def select_cold(
        self,
        ns: str,
        *,
        ids: Sequence[str] | None,
        where: dict[str, Any] | None,
        text: str | None,
        limit: int | None,
        query: np.ndarray | None = None,
    ) -> list[MemoryRow]:
        """Cold rows of ``ns`` chosen by ids, a filter, keywords (BM25 over
        any of the stemmed words, best first) or meaning (``query``, a unit
        vector: the cold index's candidates, ranked by their exact cosine
        similarity; ``limit`` of them)."""
        eng = self.engine
        if query is not None:
            return self._select_by_meaning(ns, query, ids=ids, where=where, text=text, limit=limit)
        clauses = ["m.ns = ?", "m.tier = ?"]
        params: list[Any] = [ns, TIER_COLD]
        join = ""
        if ids is not None:
            ids = list(ids)
            if not ids:
                return []
            known = {
                r[0]: r[1]
                for r in eng.catalog.query(
                    f"SELECT id, tier FROM memories WHERE ns = ? AND id IN ({','.join('?' * len(ids))})", (ns, *ids)
                )
            }
            missing = [i for i in ids if i not in known]
            if missing:
                raise MemoryNotFoundError(f"no memory {missing[0]!r} in namespace {ns!r}")
            clauses.append(f"m.id IN ({','.join('?' * len(ids))})")
            params.extend(ids)
        if where:
            allowed = {
                "memory_type",
                "tags",
                "any_tags",
                "source",
                "created_after",
                "created_before",
                "archived_after",
                "archived_before",
            }
            unknown = set(where) - allowed
            if unknown:
                raise InvalidInputError(f"restore where: unknown keys {sorted(unknown)} (expected {sorted(allowed)})")
            if "memory_type" in where:
                types = _strings(where["memory_type"], "restore where memory_type")
                for t in types:
                    eng.policy.type_index(t)
                clauses.append(f"m.memory_type IN ({','.join('?' * len(types))})")
                params.extend(types)
            if "source" in where:
                clauses.append("m.source = ?")
                params.append(check_str(where["source"], "restore where source"))
            for key, every in (("tags", True), ("any_tags", False)):
                if key in where:
                    tags = list(check_tags(_strings(where[key], f"restore where {key}"), 1024))
                    marks = ",".join("?" * len(tags))
                    if every:
                        clauses.append(
                            f"(SELECT count(DISTINCT value) FROM json_each(m.tags) WHERE value IN ({marks})) = ?"
                        )
                        params.extend([*tags, len(set(tags))])
                    else:
                        clauses.append(f"EXISTS (SELECT 1 FROM json_each(m.tags) WHERE value IN ({marks}))")
                        params.extend(tags)
            for key, op in (("created_after", ">="), ("created_before", "<")):
                if key in where:
                    clauses.append(f"m.created_at {op} ?")
                    params.append(check_time(where[key], f"restore where {key}"))
            for key, op in (("archived_after", ">="), ("archived_before", "<")):
                if key in where:
                    clauses.append(
                        f"EXISTS (SELECT 1 FROM events e WHERE e.ns = m.ns AND e.id = m.id AND e.kind = 'archive'"
                        f" AND e.t {op} ?)"
                    )
                    params.append(check_time(where[key], f"restore where {key}"))
        if text is not None:
            if not isinstance(text, str) or not check_str(text, "restore text").strip():
                raise InvalidInputError("restore text must be a non-empty string")
            join = " JOIN memory_text ON memory_text.rowid = m.rid"
            clauses.append("memory_text MATCH ?")
            params.append(_fts_query(text))
        sql = f"{join} WHERE {' AND '.join(clauses)}"
        # FTS5's rank is BM25 (best first); with any word enough, it orders by how well each matches
        sql += " ORDER BY rank" if text is not None else " ORDER BY m.rid"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        try:
            return eng.catalog.select_rows(sql, params)
        except sqlite3.OperationalError as exc:
            raise InvalidInputError(f"restore text query {text!r} is not valid: {exc}") from None

    def _select_by_meaning(
        self,
        ns: str,
        query: np.ndarray,
        *,
        ids: Sequence[str] | None,
        where: dict[str, Any] | None,
        text: str | None,
        limit: int | None,
    ) -> list[MemoryRow]:
        """Restore by meaning: the cold index's candidates for ``limit`` (the
        ``k`` of restore), narrowed by ``ids``/``where``/``text`` when given
        (their rows, as a filter), then by their int8 codes
        (:func:`cold_index.exact_candidates`), ranked by the exact cosine
        similarity of their archived vectors."""
        eng = self.engine
        k = limit or 5
        allowed = None
        if ids is not None or where or text is not None:
            allowed = [r.rid for r in self.select_cold(ns, ids=ids, where=where, text=text, limit=None)]
            if not allowed:
                return []
        rids, _ = eng.cold_index.candidates(ns, query, cold_index.candidate_count(k), allowed_rids=allowed)
        rows = [
            r
            for r in eng.catalog.get_rows_by_rid(rids.tolist())
            if r.tier == TIER_COLD and r.ns == ns and r.cold_key is not None
        ]
        rows = [rows[i] for i in cold_index.exact_candidates(eng.cold_index, query, [r.rid for r in rows], k)]
        if not rows:
            return []
        vectors = cold_index.fetch_row_vectors(eng.cold_index, eng.cold, eng.vector_cache, ns, rows)
        sims = cold_index.exact_rescore(query, vectors)
        order = np.argsort(-sims, kind="stable")[:k]
        return [rows[i] for i in order.tolist()]

    # ------------------------------------------------------------------ rebuild

    def rebuild_cold_catalog(self, progress: bool | None) -> dict[str, int]:
        """Recreate the catalog's cold rows from the archive objects alone.

        A memory absent from the catalog is inserted as cold, unless a
        tombstone says it was deleted after that record was archived
        (counted ``forgotten``), with its slot (key); a cold row that points at a missing object,
        or at an older copy of the memory than the one found, is repointed; a
        memory the catalog holds in the hot or warm tier is left alone (its
        archived copy is stale). An object left holding stale or forgotten
        records is marked for the next sweep to rewrite.

        Then the supersession marks the records kept (on each memory, and by
        it; a deleted memory's record too) are written on the memories whose
        state is their record's (inserted now, or a cold row pointing at the
        record read: a rebuild cut short before this step is finished by the
        next one), and a slot left with several live memories keeps its
        newest (counted ``marks``)."""
        eng = self.engine
        counts = {"objects": 0, "records": 0, "inserted": 0, "repointed": 0, "skipped": 0, "forgotten": 0, "marks": 0}
        rebuilt: set[int] = set()  # rids whose state is their record's
        # per namespace: marks the records kept ((old id, new id, mark)), and the slots of rebuilt memories
        kept_marks: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
        slots: dict[str, set[str]] = {}

        def keep(ns: str, rid: int, mid: str, key: str | None, rec: dict[str, Any]) -> None:
            # a memory whose state is its record's: its record's marks and slot are settled at the end
            rebuilt.add(rid)
            marks = kept_marks.setdefault(ns, [])
            if rec.get("superseded_by") is not None:
                marks.append((mid, rec["superseded_by"]["id"], rec["superseded_by"]))
            marks.extend((m["id"], mid, m) for m in rec.get("supersedes") or ())
            if key is not None:
                slots.setdefault(ns, set()).add(key)

        stones = tombstones.read_all(eng.cold.store)
        deleted_at = tombstones.latest_by_memory(stones)
        if stones:  # listed again, so that a sweep drops them once the objects are rewritten
            eng.catalog.write(
                lambda conn: conn.executemany(
                    "INSERT OR IGNORE INTO tombstones (key, ns, id, deleted_at, state) VALUES (?, ?, ?, ?, 'written')",
                    [(k, t.ns, t.id, t.deleted_at) for k, objs in stones.items() for t in objs],
                )
            )
        keys = eng.cold.list_batches()
        with Progress(len(keys), "rebuild-catalog", enabled=progress, unit=" objects") as bar:
            for key in keys:
                header, records = eng.cold.read_batch(key)
                ns = header["namespace"]
                counts["objects"] += 1
                counts["records"] += len(records)
                now = eng.store_time.now()

                # Decide outside the write transaction (comparing copies reads the
                # object store); the transaction re-checks that the row is as seen.
                plan = []
                for entry, rec in records:
                    row = eng.catalog.get_row(ns, rec["id"])
                    gone = deleted_at.get((ns, rec["id"]))
                    forgotten = row is None and gone is not None and float(rec["archived_at"]) <= gone
                    replace = not forgotten and (
                        row is None or (row.tier == TIER_COLD and row.cold_key != key and self._older_copy(row, rec))
                    )
                    plan.append((entry, rec, row, replace, forgotten))

                def write(
                    conn: sqlite3.Connection,
                    key: str = key,
                    ns: str = ns,
                    plan: Any = plan,
                    records: Any = records,
                    now: float = now,
                ) -> None:
                    rids = []
                    stale = False  # the object holds records no catalog row points at
                    for entry, rec, seen, replace, forgotten in plan:
                        row = eng.catalog.row_in(conn, ns, rec["id"])
                        if forgotten and row is None:
                            counts["forgotten"] += 1
                            stale = True
                            # deleting a statement does not bring back what it superseded (the catalog kept
                            # the marks a deleted memory made; so does the rebuild)
                            kept_marks.setdefault(ns, []).extend(
                                (m["id"], rec["id"], m) for m in rec.get("supersedes") or ()
                            )
                            continue
                        if (
                            not replace
                            or (row is None) != (seen is None)
                            or (row is not None and fingerprint(row) != fingerprint(seen))
                        ):
                            counts["skipped"] += 1
                            if row is not None:
                                # listed either way: a later delete of that memory looks here
                                rids.append(row.rid)
                                stale = stale or row.cold_key != key
                                if row.tier == TIER_COLD and row.cold_key == key and row.cold_offset == entry.offset:
                                    keep(ns, row.rid, row.id, row.key, rec)
                            continue
                        new = _row_from_record(rec, key, entry)
                        new.due_at = float(self.due_in_tier([new], TIER_COLD)[0])
                        if row is None:
                            cur = conn.execute(INSERT_SQL, insert_params(new))
                            new.rid = int(cur.lastrowid)  # type: ignore[arg-type]
                            counts["inserted"] += 1
                            keep(ns, new.rid, new.id, new.key, rec)
                        else:
                            new.rid = row.rid
                            conn.execute(
                                "UPDATE memories SET cold_key = ?, cold_offset = ?, cold_length = ? WHERE rid = ?",
                                (key, entry.offset, entry.length, row.rid),
                            )
                            counts["repointed"] += 1
                        conn.execute(
                            CODE_SQL,
                            (
                                new.rid,
                                ns,
                                _code_of(rec["embedding"], eng.dim),
                                *_place(entry.vector_at, rec["embedding"]),
                                _code8_of(rec["embedding"], eng.dim),
                            ),
                        )
                        rids.append(new.rid)
                    if conn.execute("SELECT 1 FROM archives WHERE key = ?", (key,)).fetchone() is None:
                        batch = batch_number(key)
                        taken = (
                            batch is None
                            or conn.execute("SELECT 1 FROM archives WHERE batch = ?", (batch,)).fetchone() is not None
                        )
                        conn.execute(
                            "INSERT INTO archives (batch, key, ns, rids, state, count, created_at)"
                            " VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (
                                None if taken else batch,
                                key,
                                ns,
                                json.dumps(rids),
                                "purge" if stale else "done",
                                len(records),
                                now,
                            ),
                        )
                    elif stale:
                        conn.execute(MARK_PURGE_SQL, (key,))

                eng.catalog.write(write)
                bar.update()

        def settle(conn: sqlite3.Connection) -> int:
            # after every object: a mark's two memories may sit in different objects
            n = sum(supersession.restore_marks(conn, ns, marks, rebuilt) for ns, marks in kept_marks.items())
            return n + sum(supersession.settle_slots(conn, ns, sorted(keys), rebuilt) for ns, keys in slots.items())

        if rebuilt:
            counts["marks"] = eng.catalog.write(settle)
        eng.cold_index.invalidate()
        return counts

    def _older_copy(self, row: MemoryRow, rec: dict[str, Any]) -> bool:
        """Whether the catalog's cold copy of a memory is missing or older than ``rec``."""
        eng = self.engine
        if row.cold_key is None or not eng.cold.store.exists(row.cold_key):
            return True
        current = eng.cold.fetch([Location(row.cold_key, row.cold_offset, row.cold_length)])[0]  # type: ignore[arg-type]
        return float(current["archived_at"]) < float(rec["archived_at"])

    # ------------------------------------------------------------------ background

    def start(self, interval_s: float, max_items: int, time_budget_s: float) -> None:
        self._background.start(interval_s, max_items, time_budget_s)

    def stop(self, timeout: float = 30.0) -> None:
        self._background.stop(timeout)

    @property
    def running(self) -> bool:
        return self._background.running

    @property
    def background_errors(self) -> list[str]:
        return self._background.errors


def _row_from_record(rec: dict[str, Any], key: str, entry: Any) -> MemoryRow:
    """A cold catalog row for an archive record found in the bucket."""
    return MemoryRow(
        rid=-1,
        ns=rec["ns"],
        id=rec["id"],
        content=rec["content"],
        embedding=None,
        memory_type=rec["memory_type"],
        source=rec["source"],
        tags=tuple(rec["tags"]),
        created_at=float(rec["created_at"]),
        last_accessed_at=float(rec["last_accessed_at"]),
        access_count=int(rec["access_count"]),
        conf_llm=rec["conf_llm"],
        conf_rule=rec["conf_rule"],
        conf_feedback=rec["conf_feedback"],
        confidence=float(rec["confidence"]),
        t_conf=float(rec["t_conf"]),
        ttl_seconds=rec["ttl_seconds"],
        pinned=bool(rec["pinned"]),
        tier=TIER_COLD,
        w_ref=float(rec["w_ref"]),
        t_ref=float(rec["t_ref"]),
        half_life=float(rec["half_life"]),
        ttl=math.inf if rec["ttl"] is None else float(rec["ttl"]),
        ttl_anchor=float(rec["ttl_anchor"]),
        ctx_mult=float(rec["ctx_mult"]),
        due_at=math.inf,
        cold_key=key,
        cold_offset=entry.offset,
        cold_length=entry.length,
        key=rec.get("key"),
        metadata=rec.get("metadata"),
    )


def _strings(value: Any, what: str) -> list[str]:
    """One string or a list of strings."""
    if isinstance(value, str):
        return [check_str(value, what)]
    if not isinstance(value, (list, tuple, set, frozenset)) or not value:
        raise InvalidInputError(f"{what} must be a string or a non-empty list of strings, got {value!r}")
    return [check_str(v, what) for v in value]


def _fts_query(text: str) -> str:
    """Keywords as an FTS5 query: each word quoted (no operators), any of
    them enough (OR); the porter tokenizer stems each, and BM25 ranks rows
    that match more of them, and rarer ones, first."""
    words = [w for w in "".join(ch if ch.isalnum() else " " for ch in text).split() if w]
    if not words:
        raise InvalidInputError(f"restore text {text!r} has no words")
    return keyword_index.text_match(words)


def _place(at: int, embedding: bytes | None) -> tuple[int | None, int | None]:
    """The ``(vector_at, vector_crc)`` a cold-index code row keeps of an
    archived embedding: ``(None, None)`` if its place in the frame is not known
    (a record written without its vector has none)."""
    return (None, None) if at < 0 or embedding is None else (at, vector_crc(bytes(embedding)))


def _code_of(embedding: bytes, dim: int) -> bytes:
    """The sign code of one stored (float32 little-endian) embedding."""
    return encode_codes(np.frombuffer(embedding, "<f4").reshape(1, dim))[0]


def _code8_of(embedding: bytes, dim: int) -> bytes:
    """The int8 code (``cold_codes.code8``) of one stored (float32 little-endian) embedding."""
    return encode_code8(np.frombuffer(embedding, "<f4").reshape(1, dim))[0]

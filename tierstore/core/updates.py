"""Updates of memories in whichever tier they are (hot slots in place, warm
and cold ones in the catalog): accesses (``touch``), feedback, pins, per-memory
lifetimes, deletes and the namespace context."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable
from typing import Any

import numpy as np

from tierstore.core.engine import Engine
from tierstore.core.reads import get, with_mark
from tierstore.errors import InvalidInputError, MemoryNotFoundError
from tierstore.kernels import (
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
    context_multipliers,
    due_times,
    record_accesses,
    rescale_lifetimes,
)
from tierstore.kernels import columns as C
from tierstore.records import TIER_NAMES, Memory
from tierstore.rules import lifetime, supersession
from tierstore.rules.validation import check_id, check_id_list, check_namespace, check_tags
from tierstore.storage.catalog import EVENT_SQL, MEMORY_COLUMNS, MemoryRow
from tierstore.storage.faults import crash_point
from tierstore.tiers import tombstones
from tierstore.tiers.hot import HotNamespace
from tierstore.tiers.migrator import MARK_PURGE_SQL


def _opt(x: float) -> float | None:
    """NaN (an absent value in the float columns) as None."""
    return None if math.isnan(x) else float(x)


_KEEP = object()  # set_lifetime: leave the per-memory TTL as it is


def set_lifetime(
    eng: Engine,
    ns: str,
    id: str,
    now: float,
    *,
    override: Any = _KEEP,
    anchor: Any = None,
    kind: str,
    reason: str,
    extra: Any = None,
) -> bool:
    """Change one memory's per-memory TTL (``override``: seconds, ``None``
    for the type's, ``_KEEP``) and/or its TTL anchor (``anchor``: old ->
    new), in whichever tier it is; its effective TTL and due time follow.
    Logs an event ``kind``/``reason``; ``extra(conn)`` runs in the same
    transaction. Returns False if the memory is gone."""
    cp = eng.compiled_policy
    hot = eng.hot.ensure(ns)
    fut = None
    with hot.lock.read():
        slot = hot.slot_of.get(id)
        if slot is not None:
            with hot.access_lock:
                F = hot.F
                if override is not _KEEP:
                    F[C.F_TTL_OVERRIDE, slot] = math.nan if override is None else override
                    F[C.F_TTL, slot] = cp.ttl(
                        int(hot.I[C.I_TYPE, slot]), float(F[C.F_CONF, slot]), override, float(F[C.F_CTX_MULT, slot])
                    )
                if anchor is not None:
                    F[C.F_TTL_ANCHOR, slot] = anchor(float(F[C.F_TTL_ANCHOR, slot]))
                eng.refresh_due(hot, slot)
                event = (
                    now,
                    ns,
                    id,
                    kind,
                    "hot",
                    "hot",
                    reason,
                    float(F[C.F_W_REF, slot]),
                    float(F[C.F_CONF, slot]),
                    int(hot.I[C.I_ACCESS_COUNT, slot]),
                    cp.type_names[int(hot.I[C.I_TYPE, slot])],
                )

                def write(conn: sqlite3.Connection, event: Any = event) -> None:
                    conn.execute(EVENT_SQL, event)
                    if extra is not None:
                        extra(conn)

                fut = eng.submit_dirty(hot, extra=write)
    if fut is not None:
        fut.result()
        return True

    def change(row: MemoryRow, conn: sqlite3.Connection) -> MemoryRow:
        if override is not _KEEP:
            row.ttl_seconds = override
            row.ttl = cp.ttl(eng.policy.type_index(row.memory_type), row.confidence, override, row.ctx_mult)
        if anchor is not None:
            row.ttl_anchor = anchor(row.ttl_anchor)
        row.due_at = eng.due_of(row)
        eng.catalog.write_state(conn, row)
        tier = TIER_NAMES[row.tier]
        conn.execute(
            EVENT_SQL,
            (now, ns, id, kind, tier, tier, reason, row.w_ref, row.confidence, row.access_count, row.memory_type),
        )
        if extra is not None:
            extra(conn)
        return row

    try:
        eng.update_row(ns, id, change)
    except MemoryNotFoundError:
        return False
    return True


def reverse_auto_supersession(eng: Engine, ns: str, id: str) -> bool:
    """Take back an automatic supersession of ``id`` (explicit positive
    feedback said it still holds): the mark goes, its per-memory TTL is
    what it was before, and an archived memory is restored. Returns
    whether there was one to take back."""
    mark = supersession.auto_mark(eng.catalog, ns, id)
    if mark is None:
        return False
    now = eng.store_time.now()
    done = set_lifetime(
        eng,
        ns,
        id,
        now,
        override=mark.prior_ttl_seconds,
        kind="unsupersede",
        reason=f"positive feedback (was superseded by {mark.by_id})",
        extra=lambda conn: supersession.clear(conn, mark.rid),
    )
    row = eng.catalog.get_row(ns, id)
    if done and row is not None and row.tier == TIER_COLD:
        with eng.sweep_lock:
            eng.migrator.restore(ns, ids=[id], where=None, text=None, query=None, limit=None, progress=False)
    return done


def touch(eng: Engine, ns: str, ids: str | Iterable[str]) -> None:
    """See :meth:`TierStore.touch`."""
    eng.check_writable()
    check_namespace(ns)
    id_list = check_id_list(ids)
    if not id_list:
        return
    now = eng.store_time.now()
    hot = eng.hot.ensure(ns)
    pending = count_accesses(eng, ns, hot, id_list, now, strict=True)
    for _ in range(16):  # each round, a memory that moved again; bounded so a livelock cannot hang
        if not pending:
            break
        pending = count_accesses(eng, ns, hot, pending, now, strict=False)
    if eng.trace is not None:
        eng.trace.write("touch", now, ns=ns, ids=id_list)


def count_accesses(eng: Engine, ns: str, hot: HotNamespace, id_list: list[str], now: float, strict: bool) -> list[str]:
    """One access per occurrence of an id, in the tier the memory is in.
    Returns the occurrences whose memory moved meanwhile (count them again).
    ``strict``: an unknown id raises MemoryNotFoundError before anything is
    counted; otherwise ids deleted meanwhile are dropped."""
    cp = eng.compiled_policy
    with hot.lock.read():
        if not strict:
            id_list = [i for i in id_list if i in hot.slot_of or eng.catalog.get_row(ns, i) is not None]
        slots, rows = eng.split_ids(ns, hot, id_list)
        if slots:
            with hot.access_lock:
                record_accesses(
                    np.array(slots, np.int64),
                    now,
                    hot.F,
                    hot.I,
                    cp.boost_by_type,
                    cp.refresh_by_type,
                    cp.deletes_by_type,
                    cp.thresholds,
                    cp.conf_half_life,
                )
    retry: list[str] = []
    warm = {r.rid: r for r in rows if r.tier == TIER_WARM}
    if warm:
        moved = eng.migrator.promote(ns, list(warm.values()), now, access=True, kind="promote")
        extra = [r.id for r in rows if r.tier == TIER_WARM]
        for r in moved:
            extra.remove(r.id)
        if extra:  # touched twice in one call, or promoted by someone else, or moved elsewhere
            with hot.lock.read():
                here = [i for i in extra if i in hot.slot_of]
                if here:
                    with hot.access_lock:
                        record_accesses(
                            np.array([hot.slot_of[i] for i in here], np.int64),
                            now,
                            hot.F,
                            hot.I,
                            cp.boost_by_type,
                            cp.refresh_by_type,
                            cp.deletes_by_type,
                            cp.thresholds,
                            cp.conf_half_life,
                        )
                retry.extend(i for i in extra if i not in hot.slot_of)
    cold = {r.rid: r for r in rows if r.tier == TIER_COLD}
    if cold:  # a used archived memory comes back: reactivated, its access counted in the hot tier
        back = eng.migrator.reactivate(ns, list(cold.values()), now)
        extra = [r.id for r in rows if r.tier == TIER_COLD]
        for r in back:
            extra.remove(r.id)
        if strict:  # deleted between the look and the count: as unknown as if it had never been
            gone = [i for i in extra if eng.catalog.get_row(ns, i) is None]
            if gone:
                raise MemoryNotFoundError(f"no memory {gone[0]!r} in namespace {ns!r}")
        retry.extend(extra)  # touched twice, or moved meanwhile: counted where it is now
    return retry


def feedback(eng: Engine, ns: str, id: str, *, positive: bool, strength: float = 1.0, implicit: bool = False) -> Memory:
    """See :meth:`TierStore.feedback`."""
    memory = apply_feedback(eng, ns, id, positive=positive, strength=strength, implicit=implicit)
    if positive and not implicit and reverse_auto_supersession(eng, ns, id):
        memory = get(eng, ns, id) or memory
    else:
        memory = with_mark(eng, memory)
    if eng.trace is not None:
        eng.trace.write(
            "feedback", eng.store_time.now(), ns=ns, id=id, positive=positive, strength=strength, implicit=implicit
        )
    return memory


def apply_feedback(eng: Engine, ns: str, id: str, *, positive: bool, strength: float, implicit: bool) -> Memory:
    """See :meth:`feedback`."""
    eng.check_writable()
    check_namespace(ns)
    check_id(id)
    if not isinstance(positive, bool):
        raise InvalidInputError(f"positive must be True or False, got {positive!r}")
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not (0.0 < float(strength) <= 1.0):
        raise InvalidInputError(f"strength must be in (0, 1], got {strength!r}")
    if not isinstance(implicit, bool):
        raise InvalidInputError(f"implicit must be True or False, got {implicit!r}")
    strength = float(strength)
    now = eng.store_time.now()
    cp = eng.compiled_policy
    reason = ("implicit " if implicit else "") + ("positive" if positive else "negative")
    hot = eng.hot.ensure(ns)
    fut = None
    with hot.lock.read():
        slot = hot.slot_of.get(id)
        if slot is not None:
            with hot.access_lock:
                F, I = hot.F, hot.I  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
                out = lifetime.apply_feedback(
                    cp,
                    type_idx=int(I[C.I_TYPE, slot]),
                    conf_llm=_opt(F[C.F_CONF_LLM, slot]),
                    conf_rule=_opt(F[C.F_CONF_RULE, slot]),
                    conf_feedback=_opt(F[C.F_CONF_FEEDBACK, slot]),
                    confidence=float(F[C.F_CONF, slot]),
                    t_conf=float(F[C.F_T_CONF, slot]),
                    w_ref=float(F[C.F_W_REF, slot]),
                    t_ref=float(F[C.F_T_REF, slot]),
                    half_life=float(F[C.F_HALF_LIFE, slot]),
                    ctx_mult=float(F[C.F_CTX_MULT, slot]),
                    ttl_override=_opt(F[C.F_TTL_OVERRIDE, slot]),
                    positive=positive,
                    strength=strength,
                    implicit=implicit,
                    now=now,
                )
                F[C.F_CONF_FEEDBACK, slot] = out.conf_feedback
                F[C.F_CONF, slot] = out.confidence
                F[C.F_T_CONF, slot] = out.t_conf
                F[C.F_W_REF, slot] = out.w_ref
                F[C.F_T_REF, slot] = out.t_ref
                F[C.F_HALF_LIFE, slot] = out.half_life
                F[C.F_TTL, slot] = out.ttl
                eng.refresh_due(hot, slot)
                event = (
                    now,
                    ns,
                    id,
                    "feedback",
                    "hot",
                    "hot",
                    reason,
                    out.w_ref,
                    out.confidence,
                    int(I[C.I_ACCESS_COUNT, slot]),
                    cp.type_names[int(I[C.I_TYPE, slot])],
                )
                fut = eng.submit_dirty(hot, extra=lambda conn: conn.execute(EVENT_SQL, event))
            memory = hot.memory(slot, cp, now)
    if fut is not None:
        fut.result()
        return memory

    def change(row: MemoryRow, conn: sqlite3.Connection) -> MemoryRow:
        out = lifetime.apply_feedback(
            cp,
            type_idx=eng.policy.type_index(row.memory_type),
            conf_llm=row.conf_llm,
            conf_rule=row.conf_rule,
            conf_feedback=row.conf_feedback,
            confidence=row.confidence,
            t_conf=row.t_conf,
            w_ref=row.w_ref,
            t_ref=row.t_ref,
            half_life=row.half_life,
            ctx_mult=row.ctx_mult,
            ttl_override=row.ttl_seconds,
            positive=positive,
            strength=strength,
            implicit=implicit,
            now=now,
        )
        row.conf_feedback, row.confidence, row.t_conf = out.conf_feedback, out.confidence, out.t_conf
        row.w_ref, row.t_ref, row.half_life, row.ttl = out.w_ref, out.t_ref, out.half_life, out.ttl
        row.due_at = eng.due_of(row)
        eng.catalog.write_state(conn, row)
        tier = TIER_NAMES[row.tier]
        conn.execute(
            EVENT_SQL,
            (now, ns, id, "feedback", tier, tier, reason, out.w_ref, out.confidence, row.access_count, row.memory_type),
        )
        return row

    return eng.memory_from_row(eng.update_row(ns, id, change), now)


def pin(eng: Engine, ns: str, id: str, pinned: bool = True) -> None:
    """See :meth:`TierStore.pin`."""
    eng.check_writable()
    check_namespace(ns)
    check_id(id)
    if not isinstance(pinned, bool):
        raise InvalidInputError(f"pinned must be True or False, got {pinned!r}")
    now = eng.store_time.now()
    kind = "pin" if pinned else "unpin"
    hot = eng.hot.ensure(ns)
    fut = None
    with hot.lock.read():
        slot = hot.slot_of.get(id)
        if slot is not None:
            with hot.access_lock:
                hot.I[C.I_PINNED, slot] = 1 if pinned else 0
                eng.refresh_due(hot, slot)
                event = (
                    now,
                    ns,
                    id,
                    kind,
                    "hot",
                    "hot",
                    "explicit",
                    None,
                    float(hot.F[C.F_CONF, slot]),
                    int(hot.I[C.I_ACCESS_COUNT, slot]),
                    eng.compiled_policy.type_names[int(hot.I[C.I_TYPE, slot])],
                )
                fut = eng.submit_dirty(hot, extra=lambda conn: conn.execute(EVENT_SQL, event))
    if fut is not None:
        fut.result()
    else:
        eng.update_row(ns, id, lambda row, conn: pin_in_catalog(eng, row, conn, pinned, now))
    if eng.trace is not None:
        eng.trace.write("pin", now, ns=ns, id=id, pinned=pinned)


def pin_in_catalog(eng: Engine, row: MemoryRow, conn: sqlite3.Connection, pinned: bool, now: float) -> MemoryRow:
    row.pinned = pinned
    row.due_at = eng.due_of(row)
    eng.catalog.write_state(conn, row)
    tier = TIER_NAMES[row.tier]
    conn.execute(
        EVENT_SQL,
        (
            now,
            row.ns,
            row.id,
            "pin" if pinned else "unpin",
            tier,
            tier,
            "explicit",
            None,
            row.confidence,
            row.access_count,
            row.memory_type,
        ),
    )
    return row


def delete(eng: Engine, ns: str, id: str) -> bool:
    """See :meth:`TierStore.delete`."""
    eng.check_writable()
    check_namespace(ns)
    check_id(id)
    now = eng.store_time.now()
    eng.hot.ensure(ns)

    def write(conn: sqlite3.Connection) -> tuple[MemoryRow | None, str | None]:
        row = eng.catalog.row_in(conn, ns, id)
        if row is None:
            return None, None
        return row, forget_row(conn, row, now, "explicit")

    with eng.hot.guard(ns) as space:
        row, stone = eng.catalog.write(write)
        crash_point("delete.after_commit")
        if row is not None and space is not None:
            slot = space.slot_of.get(id)
            if slot is not None:
                space.remove([slot])
    if stone is not None:
        eng.migrator.write_tombstones()
    if row is not None and row.cold_key:
        eng.migrator.collect_archives({row.cold_key})
    if eng.trace is not None and row is not None:
        eng.trace.write("delete", now, ns=ns, id=id)
    return row is not None


def forget_row(conn: sqlite3.Connection, row: MemoryRow, now: float, reason: str) -> str | None:
    """Remove ``row`` from the catalog inside the caller's transaction (a
    delete, or the old version of a replaced memory): its row and archived
    text go, its archive object is marked for rewriting, a ``delete`` event
    (``reason``) is logged, and if an archive object may still hold its
    record a pending tombstone is noted; returns the tombstone's key (the
    caller writes it once committed: ``migrator.write_tombstones``). The hot
    slot, if any, is the caller's to remove."""
    ns = row.ns
    conn.execute("DELETE FROM memories WHERE rid = ?", (row.rid,))
    if row.cold_key:
        conn.execute(MARK_PURGE_SQL, (row.cold_key,))
    has_record = row.cold_key is not None or row.rid in tombstones.stale_rids(conn, ns)
    stone = tombstones.note_deletion(conn, ns, row.id, now) if has_record else None
    conn.execute(
        EVENT_SQL,
        (
            now,
            ns,
            row.id,
            "delete",
            TIER_NAMES[row.tier],
            None,
            reason,
            lifetime.weight_at(row.w_ref, row.t_ref, row.half_life, now),
            row.confidence,
            row.access_count,
            row.memory_type,
        ),
    )
    return stone


def set_context(eng: Engine, ns: str, tags: Iterable[str]) -> None:
    """See :meth:`TierStore.set_context`."""
    eng.check_writable()
    check_namespace(ns)
    new_tags = check_tags(tags, 1024)
    ctx = eng.compiled_policy.context(new_tags)
    now = eng.store_time.now()
    hot = eng.hot.ensure(ns)
    cp = eng.compiled_policy
    with hot.lock.read():
        with hot.access_lock:
            n = hot.n
            mult = context_multipliers(hot.tags, n, ctx.ttl_tags, ctx.ttl_mult)
            old = hot.F[C.F_CTX_MULT, :n]
            changed = np.flatnonzero((mult != old) & (hot.I[C.I_ALIVE, :n] != 0))
            if changed.size:
                F = hot.F
                w, t, h, ttl = rescale_lifetimes(
                    F[C.F_W_REF, changed],
                    F[C.F_T_REF, changed],
                    F[C.F_HALF_LIFE, changed],
                    F[C.F_TTL, changed],
                    old[changed],
                    mult[changed],
                    now,
                )
                F[C.F_W_REF, changed] = w
                F[C.F_T_REF, changed] = t
                F[C.F_HALF_LIFE, changed] = h
                F[C.F_TTL, changed] = ttl
                F[C.F_CTX_MULT, changed] = mult[changed]
                F[C.F_DUE, changed] = due_times(
                    np.full(changed.size, TIER_HOT, np.int64),
                    hot.I[C.I_PINNED, changed],
                    cp.deletes_by_type[hot.I[C.I_TYPE, changed]],
                    w,
                    t,
                    h,
                    F[C.F_TTL_ANCHOR, changed] + ttl,
                    F[C.F_CONF, changed],
                    F[C.F_T_CONF, changed],
                    cp.conf_half_life,
                    cp.thresholds,
                )
                hot.I[C.I_DIRTY, changed] = 1

            def write(conn: sqlite3.Connection) -> None:
                conn.execute(
                    "INSERT INTO contexts (ns, tags) VALUES (?, ?) ON CONFLICT(ns) DO UPDATE SET tags = excluded.tags",
                    (ns, json.dumps(list(new_tags))),
                )
                rescale_cold_rows(eng, conn, ns, ctx, now)

            fut = eng.submit_dirty(hot, extra=write)
            eng.contexts[ns] = new_tags
    if fut is not None:
        fut.result()
    if eng.trace is not None:
        eng.trace.write("set_context", now, ns=ns, tags=list(new_tags))


def rescale_cold_rows(eng: Engine, conn: sqlite3.Connection, ns: str, ctx: Any, now: float) -> None:
    """The warm and cold rows' share of a context change (inside the
    context's transaction): the same rescaling as the hot tier's."""
    rows = [
        MemoryRow.from_sql(r)
        for r in conn.execute(
            "SELECT " + ", ".join(MEMORY_COLUMNS) + " FROM memories WHERE ns = ? AND tier != ?", (ns, TIER_HOT)
        )
    ]
    if not rows:
        return
    cp = eng.compiled_policy
    mult = np.array([cp.ttl_multiplier(ctx, eng.vocab.ids(r.tags)) for r in rows])
    old = np.array([r.ctx_mult for r in rows])
    changed = np.flatnonzero(mult != old)
    if not changed.size:
        return
    part = [rows[i] for i in changed.tolist()]
    w, t, h, ttl = rescale_lifetimes(
        np.array([r.w_ref for r in part]),
        np.array([r.t_ref for r in part]),
        np.array([r.half_life for r in part]),
        np.array([r.ttl for r in part]),
        old[changed],
        mult[changed],
        now,
    )
    for r, wi, ti, hi, ttli, m in zip(part, w.tolist(), t.tolist(), h.tolist(), ttl.tolist(), mult[changed].tolist()):
        r.w_ref, r.t_ref, r.half_life, r.ttl, r.ctx_mult = wi, ti, hi, ttli, m
    for tier in (TIER_WARM, TIER_COLD):
        sel = [r for r in part if r.tier == tier]
        if sel:
            for r, d in zip(sel, eng.migrator.due_in_tier(sel, tier).tolist()):
                r.due_at = d
    for r in part:
        eng.catalog.write_state(conn, r)

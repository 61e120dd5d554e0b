"""Ingest: ``add`` and ``add_batch`` — validating items into catalog rows, the
insert transaction, explicit, keyed and automatic supersession, and the
dedupe hook (a re-added memory is reinforced, not stored twice)."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tierstore import embedding as _embedding
from tierstore.core.engine import Engine
from tierstore.core.reads import get
from tierstore.core.trace import encode_vector
from tierstore.core.updates import apply_feedback, forget_row, set_lifetime
from tierstore.errors import (
    CorruptDataError,
    DuplicateIdError,
    InvalidInputError,
    MemoryNotFoundError,
    ObjectStoreError,
)
from tierstore.kernels import TIER_COLD, TIER_HOT, due_times
from tierstore.kernels import columns as C
from tierstore.rules import auto_supersession, dedupe, supersession
from tierstore.rules.validation import (
    LABEL_MAX_CHARS,
    check_confidence,
    check_content,
    check_id,
    check_key,
    check_metadata,
    check_namespace,
    check_str,
    check_tags,
    check_text,
    check_ttl,
    check_vector,
    fresh_id,
    shown,
)
from tierstore.rules.validation import (
    check_supersedes as check_supersedes_ids,
)
from tierstore.storage.catalog import EVENT_SQL, INSERT_SQL, MemoryRow, insert_params
from tierstore.storage.faults import crash_point
from tierstore.storage.heap import release_freed
from tierstore.tiers.hot import HotNamespace

# Batches at least this large insert into the graph while their commit is in
# flight (commit_and_insert). A smaller one commits first: its graph insert is
# short, and holding the namespace's write lock through a commit's fsync would
# stall its readers longer than the insert saves.
_STAGE_MIN = 32
# After a batch at least this large the allocator's free pages go back to the system (storage.heap).
_TRIM_MIN = 256

_ADD_KEYS = {
    "content",
    "embedding",
    "memory_type",
    "confidence",
    "source",
    "tags",
    "ttl_seconds",
    "pinned",
    "id",
    "supersedes",
    "key",
    "metadata",
}


def check_items(items: Any) -> None:
    """``add_batch``'s items: a list of dicts with ``add``'s keys, each with content."""
    if isinstance(items, Mapping) or not isinstance(items, Sequence):
        raise InvalidInputError("add_batch expects a list of dicts")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidInputError(f"add_batch item {i} is not a dict")
        unknown = set(item) - _ADD_KEYS
        if unknown:
            raise InvalidInputError(f"add_batch item {i}: unknown keys {sorted(unknown)}")
        for required in ("content",):  # an absent embedding: the embedder's, or a clear error
            if required not in item:
                raise InvalidInputError(f"add_batch item {i}: missing {required!r}")


def check_batch(eng: Engine, ns: str, items: Any) -> None:
    """See :meth:`TierStore.check_batch`: every check of :func:`add` bar a
    clash with an existing id, and nothing written."""
    eng.check_open()
    check_namespace(ns)
    check_items(items)
    if items:
        prepare_rows(eng, ns, items, eng.store_time.now())


def add(eng: Engine, ns: str, items: Sequence[Mapping[str, Any]], *, replace: bool = False) -> list[str]:
    """Insert ``items`` (see :meth:`TierStore.add_batch`). ``replace``: an
    item whose id exists replaces that memory in the same transaction (see
    :meth:`TierStore.upsert_batch`)."""
    eng.check_writable()
    check_namespace(ns)
    if not items:
        return []
    # every field but the vector checked before the model runs: a bad item costs no embedding
    fields = [check_fields(eng, item, _where(items, i)) for i, item in enumerate(items)]
    items = _embedding.fill_embeddings(eng.embedder, items)  # text in: one batched call of the model
    now = eng.store_time.now()
    rows, vectors = prepare_rows(eng, ns, items, now, fields)
    hot = eng.hot.ensure(ns)
    superseded = dict(check_supersedes(eng, ns, fields))
    # a replaced memory's old version is gone by the time the rule applies: never a candidate
    similar = similar_live(eng, ns, hot, rows, vectors, exclude={r.id for r in rows} if replace else set())
    # a replacement is stored under its id: never merged into a duplicate
    dedupe_on = eng.policy.dedupe == "exact" and not replace
    conf_half_life = eng.compiled_policy.conf_half_life
    forgotten: list[tuple[MemoryRow, str | None]] = []  # replaced versions and their tombstones (replace only)

    def insert(conn: sqlite3.Connection) -> tuple[list[int | dedupe.Duplicate], list[supersession.Mark]]:
        # Items take effect in order, all in this transaction: a key's live
        # memory, a duplicate or a candidate may be an earlier item.
        outcome: list[int | dedupe.Duplicate] = []
        marks: list[supersession.Mark] = []
        # one query tells which rows may have a duplicate at all (most have none): only those are looked up
        hashes = [dedupe.content_hash(r.content) for r in rows] if dedupe_on else []
        present = dedupe.hashes_present(conn, ns, hashes) if len(rows) > 1 else set(hashes)
        # the rows' create events, written in one statement (before a replaced version's event: in order)
        created: list[tuple[Any, ...]] = []
        for i, row in enumerate(rows):
            where = "" if len(rows) == 1 else f"item {i}: "
            if replace:
                old = eng.catalog.row_in(conn, ns, row.id)
                if old is not None:
                    _write_events(conn, created)
                    forgotten.append((old, forget_row(conn, old, now, "replaced")))
            olds = superseded.get(row.id, [])
            live = supersession.check_key_agrees(conn, ns, row.key, olds, where)
            dup = None
            if dedupe_on:
                if hashes[i] in present:
                    dup = dedupe.find_duplicate(conn, ns, row.memory_type, row.key, row.content)
                present.add(hashes[i])  # a later row of the batch may duplicate this one once it is in
            if dup is not None:
                outcome.append(dup)
                new_id = dup.id  # a duplicate is not new: it supersedes only what the caller names
            else:
                try:
                    cur = conn.execute(INSERT_SQL, insert_params(row, hashes[i] if dedupe_on else None))
                except sqlite3.IntegrityError:
                    raise DuplicateIdError(f"a memory with id {row.id!r} already exists in namespace {ns!r}") from None
                outcome.append(int(cur.lastrowid))  # type: ignore[arg-type]
                created.append(
                    (now, ns, row.id, "create", None, "hot", "add", row.w_ref, row.confidence, 0, row.memory_type)
                )
                new_id = row.id
            wanted = supersession.named_marks(new_id, olds, row.key, live, include_live=dup is None)
            if dup is None and similar[i]:
                new = auto_supersession.NewMemory(row.id, row.memory_type, row.tags, row.confidence)
                wanted += auto_supersession.decide(conn, ns, new, similar[i], olds, eng.policy, now, conf_half_life)
            marks += supersession.record_all(conn, ns, wanted, now)
        _write_events(conn, created)
        return outcome, marks

    if replace:
        # The namespace's write lock from before the commit until the hot
        # tier holds the new versions: a reader sees the old version or the
        # new one, never neither (see TierStore.upsert_batch).
        with eng.hot.guard(ns) as space:
            outcome, marks = eng.catalog.write(insert)
            crash_point("replace.after_commit")
            added = _added(rows, vectors, outcome)
            if space is not None:  # else the namespace loads from the catalog, which has the new versions
                space.remove([space.slot_of[r.id] for r, _ in forgotten if r.id in space.slot_of])
                if added:
                    space.add_rows([r for r, _ in added], np.stack([v for _, v in added]))
        if any(stone is not None for _, stone in forgotten):
            eng.migrator.write_tombstones()
        cold_keys = {r.cold_key for r, _ in forgotten if r.cold_key}
        if cold_keys:
            eng.migrator.collect_archives(cold_keys)
    else:
        outcome, marks = commit_and_insert(eng, hot, insert, rows, vectors)
    if len(rows) >= _TRIM_MIN:
        eng.catalog.release_cache()  # first: the pages it frees go back with the rest below
        release_freed()  # the batch's rows, parameters and vector copies: freed, not yet given back
    for mark in marks:
        supersede(eng, ns, mark.old_id, mark.new_id, now, mark)
    for row, out in zip(rows, outcome):
        if isinstance(out, dedupe.Duplicate):
            reinforce(eng, ns, out, row, now)
    ids = [out.id if isinstance(out, dedupe.Duplicate) else row.id for row, out in zip(rows, outcome)]
    if eng.trace is not None:
        for old, _ in forgotten:  # replayed as the delete and the add it amounts to
            eng.trace.write("delete", now, ns=ns, id=old.id)
        for r, v, mid in zip(rows, vectors, ids):
            eng.trace.write(
                "add",
                now,
                ns=ns,
                id=mid,
                content=r.content,
                embedding=encode_vector(v),
                memory_type=r.memory_type,
                confidence=r.conf_llm,
                source=r.source,
                tags=list(r.tags),
                ttl_seconds=r.ttl_seconds,
                pinned=r.pinned,
                supersedes=superseded.get(r.id, []),
                key=r.key,
                metadata=None if r.metadata is None else json.loads(r.metadata),
            )
    return ids


def _write_events(conn: sqlite3.Connection, events: list[tuple[Any, ...]]) -> None:
    """Insert the noted events in one statement and forget them."""
    if events:
        conn.executemany(EVENT_SQL, events)
        events.clear()


def commit_and_insert(
    eng: Engine,
    hot: HotNamespace,
    insert: Callable[[sqlite3.Connection], tuple[list[int | dedupe.Duplicate], list[supersession.Mark]]],
    rows: Sequence[MemoryRow],
    vectors: np.ndarray,
) -> tuple[list[int | dedupe.Duplicate], list[supersession.Mark]]:
    """Commit ``insert`` (the rows' catalog transaction), then make the rows
    it inserted live in the hot tier; its outcome and supersession marks.

    In an indexed namespace the graph insert, most of an add's time, runs
    while the commit is in flight (the writer thread and hnswlib both
    release the GIL), under the namespace's write lock from before the graph
    changes until the committed rows are live: no reader sees a row the
    commit has not made durable, and a failed commit leaves dead slots only."""
    fut = eng.catalog.submit(insert)
    with hot.lock.write():
        if hot.index is None or len(rows) < _STAGE_MIN:
            staged = None
        else:
            try:
                staged = hot.stage_vectors(vectors)
            except BaseException:
                fut.result()  # the commit stands alone: nothing of it is in the hot tier yet
                raise
        try:
            outcome, marks = fut.result()
        except BaseException:
            if staged is not None:
                hot.discard_staged(staged.tolist())
            raise
        crash_point("add.after_commit")
        added = _added(rows, vectors, outcome)
        if staged is None:
            if added:
                hot.add_rows([r for r, _ in added], np.stack([v for _, v in added]))
        else:
            taken = [s for s, out in zip(staged.tolist(), outcome) if not isinstance(out, dedupe.Duplicate)]
            if added:
                hot.add_rows([r for r, _ in added], None, slots=taken)
            if len(taken) < len(rows):
                hot.discard_staged(sorted(set(staged.tolist()) - set(taken)))
    return outcome, marks


def _added(
    rows: Sequence[MemoryRow], vectors: np.ndarray, outcome: Sequence[int | dedupe.Duplicate]
) -> list[tuple[MemoryRow, np.ndarray]]:
    """The rows inserted (not merged into a duplicate) with their vectors; each row gets its new rid."""
    added = []
    for row, v, out in zip(rows, vectors, outcome):
        if not isinstance(out, dedupe.Duplicate):
            row.rid = out
            added.append((row, v))
    return added


def similar_live(
    eng: Engine,
    ns: str,
    hot: HotNamespace,
    rows: Sequence[MemoryRow],
    vectors: np.ndarray,
    exclude: Collection[str] = (),
) -> list[dict[str, float]]:
    """Per row: ids of live hot and warm memories (and earlier rows) of
    its type at or above its type's lowest supersession bar, with their
    cosine. Read before the add's transaction; the rule is applied in it.
    ``exclude``: ids of live memories not to return (earlier rows still count)."""
    floor_of = {t: auto_supersession.bars_for(eng.policy, t).lowest for t in {r.memory_type for r in rows}}
    floors = [floor_of[r.memory_type] for r in rows]
    if all(f is None for f in floors):
        return [{} for _ in rows]
    types = [r.memory_type for r in rows]
    found = auto_supersession.similar_in_hot(hot, vectors, [eng.type_idx[t] for t in types], floors)
    for mine, more in zip(found, auto_supersession.similar_in_warm(eng.warm, eng.catalog, ns, vectors, types, floors)):
        mine.update(more)
    if exclude:
        found = [{mid: sim for mid, sim in mine.items() if mid not in exclude} for mine in found]
    for mine, more in zip(found, auto_supersession.similar_in_batch(vectors, [r.id for r in rows], types, floors)):
        mine.update(more)
    return found


def check_supersedes(eng: Engine, ns: str, fields: Sequence[Fields]) -> list[tuple[str, list[str]]]:
    """``(new id, [superseded ids])`` per item that supersedes something;
    every superseded id must already exist in the namespace (its count was
    bounded and its duplicates dropped by :func:`check_fields`)."""
    out = []
    for f in fields:
        if not f.supersedes:
            continue
        for old_id in f.supersedes:
            if get(eng, ns, old_id) is None:
                raise MemoryNotFoundError(f"no memory {old_id!r} in namespace {ns!r} to supersede")
        out.append((f.id, f.supersedes))
    return out


def supersede(
    eng: Engine, ns: str, old_id: str, new_id: str, now: float, mark: supersession.Mark | None = None
) -> None:
    """Negative feedback of strength 1 (implicit, softer, for automatic
    supersession), then a TTL of 0: the memory is expired and stays so (an
    access that refreshes the TTL restarts it at 0; confidence and context
    scaling keep 0 at 0); logs a ``supersede`` event."""
    auto = mark is not None and mark.kind == "auto"
    try:
        apply_feedback(eng, ns, old_id, positive=False, strength=1.0, implicit=auto)
    except MemoryNotFoundError:
        return  # deleted meanwhile: nothing left to supersede
    reason = f"by {new_id}" if mark is None or mark.kind == "explicit" else f"by {new_id} ({mark.describe()})"
    set_lifetime(eng, ns, old_id, now, override=0.0, anchor=lambda a: min(a, now), kind="supersede", reason=reason)


def reinforce(eng: Engine, ns: str, dup: dedupe.Duplicate, again: MemoryRow, now: float) -> None:
    """A re-added memory (``again``: the add that repeated it). An
    archived one is restored first (it was said again, so it is wanted:
    the same id comes back hot, as ``restore`` would bring it; if the
    object store cannot be read, it is reinforced where it is). Its
    confidence signals become the surer of the two (the assistant's guess,
    now said by the user, is as sure as the user); then an implicit
    positive feedback (weight + boost, confidence re-fused, nudged up and
    its decay restarted) and its TTL restarted from now (a ``reinforce``
    event)."""
    if dup.tier == TIER_COLD:
        try:
            with eng.sweep_lock:
                eng.migrator.restore(
                    ns, ids=[dup.id], where=None, text=None, query=None, limit=None, progress=False, reason="re-added"
                )
        except (ObjectStoreError, CorruptDataError):
            pass  # still cold: reinforced there; restore() can bring it back later
    raise_confidence_signals(eng, ns, dup.id, again.conf_llm, again.conf_rule)
    try:
        apply_feedback(eng, ns, dup.id, positive=True, strength=1.0, implicit=True)
    except MemoryNotFoundError:
        return  # deleted meanwhile
    set_lifetime(eng, ns, dup.id, now, anchor=lambda a: max(a, now), kind="reinforce", reason="re-added")


def raise_confidence_signals(eng: Engine, ns: str, id: str, llm: float | None, rule: float | None) -> None:
    """Each confidence signal of memory ``id`` becomes at least ``llm`` /
    ``rule`` (the next feedback re-fuses them), in its hot columns and in
    the catalog. Durable when it returns."""

    def higher(current: float | None, new: float | None) -> float | None:
        if new is None or (current is not None and not math.isnan(current) and current >= new):
            return None  # nothing to raise
        return new

    hot = eng.hot.ensure(ns)
    with hot.lock.read():
        slot = hot.slot_of.get(id)
        if slot is not None:
            with hot.access_lock:
                for row, new in ((C.F_CONF_LLM, llm), (C.F_CONF_RULE, rule)):
                    value = higher(float(hot.F[row, slot]), new)
                    if value is not None:
                        hot.F[row, slot] = value

    # the signals are not state the flush writes: the catalog row is updated here, in every tier
    def write(conn: sqlite3.Connection) -> None:
        r = conn.execute("SELECT conf_llm, conf_rule FROM memories WHERE ns = ? AND id = ?", (ns, id)).fetchone()
        if r is None:
            return
        conn.execute(
            "UPDATE memories SET conf_llm = coalesce(?, conf_llm), conf_rule = coalesce(?, conf_rule)"
            " WHERE ns = ? AND id = ?",
            (higher(r[0], llm), higher(r[1], rule), ns, id),
        )

    eng.catalog.write(write)


@dataclass
class Fields:
    """One item's fields but its vector, checked (see :func:`check_fields`)."""

    content: str
    memory_type: str
    type_idx: int
    conf_llm: float
    source: str
    tags: tuple[str, ...]
    ttl_override: float | None
    pinned: bool
    id: str
    key: str | None
    metadata: str | None
    supersedes: list[str]


_ABSENT: Any = object()  # a field the item does not give (None given is checked like any value)


def check_fields(eng: Engine, item: Mapping[str, Any], where: str = "") -> Fields:
    """An item's fields but its vector, checked (InvalidInputError prefixed
    ``where``): types, counts and lengths, each bounded before per-entry
    work, and a text to embed (``embedding`` given as a str) as valid text
    within ``Settings.max_content_chars``."""
    pol, max_chars = eng.policy, eng.settings.max_content_chars
    get = item.get
    # A field the item leaves out takes its default unchecked (most items give three or four fields).
    try:
        content = check_content(item["content"], max_chars)
        if isinstance(get("embedding"), str):
            check_text(item["embedding"], "embedding", max_chars)
        memory_type = get("memory_type", _ABSENT)
        memory_type = "fact" if memory_type is _ABSENT else check_str(memory_type, "memory_type", LABEL_MAX_CHARS)
        type_idx = pol.type_index(memory_type)
        conf_llm = get("confidence", _ABSENT)
        conf_llm = 0.8 if conf_llm is _ABSENT else check_confidence(conf_llm)
        source = get("source", _ABSENT)
        source = "user_declaration" if source is _ABSENT else check_str(source, "source", LABEL_MAX_CHARS)
        tags = get("tags", _ABSENT)
        tags = () if tags is _ABSENT else check_tags(tags, eng.settings.max_tags_per_memory)
        ttl_override = check_ttl(get("ttl_seconds"))
        pinned = get("pinned", False)
        if not isinstance(pinned, bool):
            raise InvalidInputError(f"pinned must be True or False, got {shown(pinned)}")
        mid = get("id")
        mid = fresh_id() if mid is None else check_id(mid)
        key = check_key(get("key"))
        metadata = check_metadata(get("metadata"))
        olds = check_supersedes_ids(get("supersedes"))
        if mid in olds:
            raise InvalidInputError(f"memory {mid!r} cannot supersede itself")
    except InvalidInputError as exc:
        if where:
            raise type(exc)(where + str(exc)) from None
        raise
    return Fields(
        content, memory_type, type_idx, conf_llm, source, tags, ttl_override, pinned, mid, key, metadata, olds
    )


def _where(items: Sequence[Any], i: int) -> str:
    return "" if len(items) == 1 else f"item {i}: "


def prepare_rows(
    eng: Engine, ns: str, items: Sequence[Mapping[str, Any]], now: float, fields: Sequence[Fields] | None = None
) -> tuple[list[MemoryRow], np.ndarray]:
    """Catalog rows and unit vectors of ``items`` (their ``fields`` when
    :func:`check_fields` already checked them)."""
    cp, pol = eng.compiled_policy, eng.policy
    if fields is None:
        fields = [check_fields(eng, item, _where(items, i)) for i, item in enumerate(items)]
    ctx = cp.context(eng.contexts.get(ns, ()))
    rows: list[MemoryRow] = []
    vectors = np.empty((len(items), eng.dim), np.float32)
    seen: set[str] = set()
    # A batch's items mostly share type, source, confidence and tags: their lifetime is computed once.
    lifetimes: dict[tuple[Any, ...], tuple[float | None, float, float, float, float, float]] = {}
    for i, (item, f) in enumerate(zip(items, fields)):
        try:
            vectors[i] = check_vector(item["embedding"], eng.dim)
        except InvalidInputError as exc:
            if len(items) > 1:
                raise type(exc)(_where(items, i) + str(exc)) from None
            raise
        mid = f.id
        if mid in seen:
            raise DuplicateIdError(f"{_where(items, i)}id {mid!r} appears twice in the batch")
        seen.add(mid)
        shared = (f.type_idx, f.source, f.conf_llm, f.tags, f.ttl_override)
        life = lifetimes.get(shared)
        if life is None:
            conf_rule = pol.rule_confidence(f.source)
            conf = pol.fuse_confidence(f.conf_llm, conf_rule, None)
            ctx_mult = cp.ttl_multiplier(ctx, eng.vocab.ids(f.tags))
            life = lifetimes[shared] = (
                conf_rule,
                conf,
                ctx_mult,
                cp.half_life(f.type_idx, conf, ctx_mult),
                cp.ttl(f.type_idx, conf, f.ttl_override, ctx_mult),
                float(cp.w0_by_type[f.type_idx]),
            )
        conf_rule, conf, ctx_mult, half_life, ttl, w0 = life
        rows.append(
            MemoryRow(
                rid=-1,
                ns=ns,
                id=mid,
                content=f.content,
                embedding=vectors[i].astype("<f4").tobytes(),
                memory_type=f.memory_type,
                source=f.source,
                tags=f.tags,
                created_at=now,
                last_accessed_at=now,
                access_count=0,
                conf_llm=f.conf_llm,
                conf_rule=conf_rule,
                conf_feedback=None,
                confidence=conf,
                t_conf=now,
                ttl_seconds=f.ttl_override,
                pinned=f.pinned,
                tier=TIER_HOT,
                w_ref=w0,
                t_ref=now,
                half_life=half_life,
                ttl=ttl,
                ttl_anchor=now,
                ctx_mult=ctx_mult,
                due_at=math.inf,
                key=f.key,
                metadata=f.metadata,
            )
        )
    due = due_times(
        np.full(len(rows), TIER_HOT, np.int64),
        np.array([int(r.pinned) for r in rows], np.int64),
        cp.deletes_of(r.memory_type for r in rows),
        np.array([r.w_ref for r in rows]),
        np.array([r.t_ref for r in rows]),
        np.array([r.half_life for r in rows]),
        np.array([r.ttl_anchor + r.ttl for r in rows]),
        np.array([r.confidence for r in rows]),
        np.array([r.t_conf for r in rows]),
        cp.conf_half_life,
        cp.thresholds,
    )
    for r, d in zip(rows, due.tolist()):
        r.due_at = d
    return rows, vectors

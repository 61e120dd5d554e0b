"""Reads of single memories, listings and the store's counts (stats), from
any tier, without counting an access."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import replace

from tierstore.analytics.lifecycle import lifecycle_metrics
from tierstore.core.engine import Engine
from tierstore.errors import InvalidInputError
from tierstore.kernels import TIER_HOT
from tierstore.records import TIER_NAMES, Memory, Stats
from tierstore.rules import supersession
from tierstore.rules.validation import check_id, check_key, check_namespace, check_positive_int
from tierstore.storage.catalog import MemoryRow


def get(eng: Engine, ns: str, id: str) -> Memory | None:
    """See :meth:`TierStore.get`."""
    memory = get_memory(eng, ns, id)
    return None if memory is None else with_mark(eng, memory)


def with_mark(eng: Engine, memory: Memory) -> Memory:
    """``memory`` with its key and ``superseded_by`` (one catalog read)."""
    info = supersession.marks_of(eng.catalog, memory.namespace, [memory.id]).get(memory.id)
    if info is None:
        return memory
    return replace(memory, key=info.key, superseded_by=info.superseded_by)


def get_by_key(eng: Engine, ns: str, key: str) -> Memory | None:
    """See :meth:`TierStore.get_by_key`."""
    eng.check_open()
    check_namespace(ns)
    checked = check_key(key)
    if checked is None:
        raise InvalidInputError("get_by_key needs a key, got None")
    mid = supersession.live_id_of_key(eng.catalog, ns, checked)
    return None if mid is None else get(eng, ns, mid)


def memories(eng: Engine, ns: str, *, with_embedding: bool = False) -> list[Memory]:
    """See :meth:`TierStore.memories`."""
    eng.check_open()
    check_namespace(ns)
    if not isinstance(with_embedding, bool):  # as memories_page and the server refuse it
        raise InvalidInputError(f"with_embedding must be True or False, got {with_embedding!r}")
    now = eng.store_time.now()
    rows = eng.catalog.select_rows("WHERE m.ns = ? ORDER BY m.rid", (ns,))
    return _listed(eng, ns, rows, now, with_embedding)


#: Memories per page of :func:`memories_page` when the caller gives no limit.
DEFAULT_PAGE = 1000
_CURSOR_MAX_CHARS = 1024  # a cursor holds a namespace (<= 128 chars) and a rid: far below this


def memories_page(
    eng: Engine, ns: str, *, after: str | None, limit: int | None, with_embedding: bool
) -> tuple[list[Memory], str | None]:
    """See :meth:`TierStore.memories_page`: the memories of ``ns`` after the
    cursor ``after`` in the order of :func:`memories` (by rid), at most
    ``limit``, and the cursor of the next page (None after the last)."""
    eng.check_open()
    check_namespace(ns)
    after_rid = 0 if after is None else _cursor_rid(after, ns)  # rids start at 1
    limit = DEFAULT_PAGE if limit is None else check_positive_int(limit, "limit")
    if not isinstance(with_embedding, bool):
        raise InvalidInputError(f"with_embedding must be True or False, got {with_embedding!r}")
    # The page's rids first, from the (ns, tier, created_at) index alone (it
    # holds the rid: a covering scan of small entries), then those rows:
    # "WHERE ns = ? AND rid > ? ORDER BY rid LIMIT ?" on the table would read
    # (embeddings included) and sort every row of the namespace after the
    # cursor, on every page. One row more than asked says whether a next page
    # exists, so the last page is not followed by an empty one.
    now = eng.store_time.now()
    fetch = min(limit, 1 << 62) + 1  # SQLite's integers are 64-bit
    rows = eng.catalog.select_rows(
        "WHERE m.rid IN (SELECT rid FROM memories WHERE ns = ? AND rid > ? ORDER BY rid LIMIT ?) ORDER BY m.rid",
        (ns, after_rid, fetch),
    )
    more = len(rows) > limit
    rows = rows[:limit]
    page = _listed(eng, ns, rows, now, with_embedding)
    return page, (_cursor(ns, rows[-1].rid) if more else None)


def _cursor(ns: str, rid: int) -> str:
    """An opaque page cursor: the namespace and the last rid listed, as
    unpadded base64url of JSON (rids are never reused, so a position stays
    meaningful while memories are added and deleted)."""
    raw = json.dumps([ns, rid], separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _cursor_rid(after: object, ns: str) -> int:
    """The rid a cursor of :func:`_cursor` holds, or InvalidInputError if
    ``after`` is not one, or was made for another namespace."""
    why = "after must be the next cursor a page of this namespace returned (or None for the first page)"
    if not isinstance(after, str):
        raise InvalidInputError(f"{why}, got {type(after).__name__}")
    if len(after) > _CURSOR_MAX_CHARS:
        raise InvalidInputError(f"{why}: {len(after)} characters is not a cursor")
    try:
        value = json.loads(base64.b64decode(after + "=" * (-len(after) % 4), altchars=b"-_", validate=True))
    except (binascii.Error, ValueError, RecursionError):  # not base64, not UTF-8, not JSON
        raise InvalidInputError(f"{why}: {after[:80]!r} is not a cursor") from None
    if not (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
        and 0 <= value[1] < 1 << 63
    ):
        raise InvalidInputError(f"{why}: {after[:80]!r} is not a cursor")
    if value[0] != ns:
        raise InvalidInputError(f"{why}: this cursor belongs to another namespace")
    return value[1]


def _listed(eng: Engine, ns: str, rows: list[MemoryRow], now: float, with_embedding: bool) -> list[Memory]:
    """``rows`` of ``ns`` as memories at store time ``now`` (POSIX seconds); a
    hot one with its live state (accesses not yet flushed); each with its
    key and ``superseded_by``, as :func:`get` gives them."""
    hot = eng.hot.get(ns)
    marks = _marks_between(eng, ns, rows[0].rid, rows[-1].rid) if rows else {}
    out = []
    for row in rows:
        memory = None
        if hot is not None and row.tier == TIER_HOT:
            with hot.lock.read():
                slot = hot.slot_of.get(row.id)
                if slot is not None:  # its live state (accesses not yet flushed)
                    memory = hot.memory(slot, eng.compiled_policy, now, with_embedding=with_embedding)
        if memory is None:
            memory = eng.memory_from_row(row, now, with_embedding)
        mark = marks.get(row.rid)
        out.append(memory if mark is None else replace(memory, key=mark[0], superseded_by=mark[1]))
    return out


def _marks_between(eng: Engine, ns: str, first_rid: int, last_rid: int) -> dict[int, tuple[str | None, str | None]]:
    """``rid -> (key, superseded_by)`` of the memories of ``ns`` with rids in
    ``[first_rid, last_rid]`` that have either: two range scans by rid (the
    memories' and the supersessions' primary keys), only marked rows returned."""
    marks: dict[int, tuple[str | None, str | None]] = {}
    for rid, key in eng.catalog.query(
        "SELECT rid, key FROM memories WHERE rid BETWEEN ? AND ? AND ns = ? AND key IS NOT NULL",
        (first_rid, last_rid, ns),
    ):
        marks[rid] = (key, None)
    for rid, by_id in eng.catalog.query(
        "SELECT rid, by_id FROM supersessions WHERE rid BETWEEN ? AND ? AND ns = ?", (first_rid, last_rid, ns)
    ):
        marks[rid] = (marks.get(rid, (None, None))[0], by_id)
    return marks


def get_memory(eng: Engine, ns: str, id: str) -> Memory | None:
    eng.check_open()
    check_namespace(ns)
    check_id(id)
    now = eng.store_time.now()
    hot = eng.hot.get(ns)
    if hot is not None:
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                return hot.memory(slot, eng.compiled_policy, now, with_embedding=True)
    row = eng.catalog.get_row(ns, id)
    if row is None:
        return None
    if row.tier == TIER_HOT and hot is None:
        return eng.memory_from_row(row, now)
    if row.tier == TIER_HOT:
        # added or moved after we looked: read again from memory
        hot = eng.hot.ensure(ns)
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                return hot.memory(slot, eng.compiled_policy, now, with_embedding=True)
    return eng.memory_from_row(row, now)


def stats(eng: Engine, *, lifecycle: bool) -> Stats:
    """See :meth:`TierStore.stats` (after a flush: the catalog holds every change)."""
    by_tier = {name: 0 for name in TIER_NAMES}
    by_type: dict[str, dict[str, int]] = {}
    total = 0
    for mtype, tier, count in eng.catalog.query(
        "SELECT memory_type, tier, count(*) FROM memories GROUP BY memory_type, tier"
    ):
        by_tier[TIER_NAMES[tier]] += count
        by_type.setdefault(mtype, {name: 0 for name in TIER_NAMES})[TIER_NAMES[tier]] = count
        total += count
    pinned = eng.catalog.query_one("SELECT count(*) FROM memories WHERE pinned = 1")
    namespaces = eng.catalog.query_one("SELECT count(DISTINCT ns) FROM memories")
    return Stats(
        total=total,
        by_tier=by_tier,
        by_type=by_type,
        namespaces=int(namespaces[0]) if namespaces else 0,
        pinned=int(pinned[0]) if pinned else 0,
        due_now=eng.catalog.count_due(eng.store_time.now()),
        hot_loaded={h.name: ("hnsw" if h.index is not None else "exact") for h in eng.hot.loaded()},
        catalog_commits=eng.catalog.commits,
        lifecycle=lifecycle_metrics(eng) if lifecycle else {},
        memory_bytes=memory_bytes(eng),
    )


def memory_bytes(eng: Engine) -> dict[str, int]:
    """What the store holds in memory, bytes by part (:attr:`Stats.memory_bytes`)."""
    return {
        "hot": sum(h.nbytes() for h in eng.hot.loaded()),
        "warm_cache": eng.warm.cache_nbytes,
        "cold_codes": eng.cold_index.nbytes,
        "vector_cache": eng.vector_cache.nbytes,
    }

"""Reads of single memories, listings and the store's counts (stats), from
any tier, without counting an access."""

from __future__ import annotations

from dataclasses import replace

from . import supersession
from .engine import Engine
from .errors import InvalidInputError
from .kernels import TIER_HOT
from .lifecycle import lifecycle_metrics
from .model import TIER_NAMES, Memory, Stats
from .validation import check_id, check_key, check_namespace


def get(eng: Engine, ns: str, id: str) -> Memory | None:
    """See :meth:`TierStore.get`."""
    memory = get_memory(eng, ns, id)
    return None if memory is None else with_mark(eng, memory)



def with_mark(eng: Engine, memory: Memory) -> Memory:
    """``memory`` with its key and ``superseded_by`` (one catalog read)."""
    info = supersession.marks_of(eng._catalog, memory.namespace, [memory.id]).get(memory.id)
    if info is None:
        return memory
    return replace(memory, key=info.key, superseded_by=info.superseded_by)



def get_by_key(eng: Engine, ns: str, key: str) -> Memory | None:
    """See :meth:`TierStore.get_by_key`."""
    eng._check_open()
    check_namespace(ns)
    key = check_key(key)
    if key is None:
        raise InvalidInputError("get_by_key needs a key, got None")
    mid = supersession.live_id_of_key(eng._catalog, ns, key)
    return None if mid is None else get(eng, ns, mid)



def memories(eng: Engine, ns: str, *, with_embedding: bool = False) -> list[Memory]:
    """See :meth:`TierStore.memories`."""
    eng._check_open()
    check_namespace(ns)
    now = eng._time.now()
    rows = eng._catalog.select_rows("WHERE m.ns = ? ORDER BY m.rid", (ns,))
    hot = eng._hot.get(ns)
    out = []
    for row in rows:
        memory = None
        if hot is not None and row.tier == TIER_HOT:
            with hot.lock.read():
                slot = hot.slot_of.get(row.id)
                if slot is not None:  # its live state (accesses not yet flushed)
                    memory = hot.memory(slot, eng._cp, now, with_embedding=with_embedding)
        out.append(memory if memory is not None else eng._memory_from_row(row, now, with_embedding))
    return out



def get_memory(eng: Engine, ns: str, id: str) -> Memory | None:
    eng._check_open()
    check_namespace(ns)
    check_id(id)
    now = eng._time.now()
    hot = eng._hot.get(ns)
    if hot is not None:
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                return hot.memory(slot, eng._cp, now, with_embedding=True)
    row = eng._catalog.get_row(ns, id)
    if row is None:
        return None
    if row.tier == TIER_HOT and hot is None:
        return eng._memory_from_row(row, now)
    if row.tier == TIER_HOT:
        # added or moved after we looked: read again from memory
        hot = eng._hot.ensure(ns)
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                return hot.memory(slot, eng._cp, now, with_embedding=True)
    return eng._memory_from_row(row, now)


def stats(eng: Engine, *, lifecycle: bool) -> Stats:
    """See :meth:`TierStore.stats` (after a flush: the catalog holds every change)."""
    by_tier = {name: 0 for name in TIER_NAMES}
    by_type: dict[str, dict[str, int]] = {}
    total = 0
    for mtype, tier, count in eng._catalog.query(
        "SELECT memory_type, tier, count(*) FROM memories GROUP BY memory_type, tier"
    ):
        by_tier[TIER_NAMES[tier]] += count
        by_type.setdefault(mtype, {name: 0 for name in TIER_NAMES})[TIER_NAMES[tier]] = count
        total += count
    pinned = eng._catalog.query_one("SELECT count(*) FROM memories WHERE pinned = 1")
    namespaces = eng._catalog.query_one("SELECT count(DISTINCT ns) FROM memories")
    return Stats(
        total=total,
        by_tier=by_tier,
        by_type=by_type,
        namespaces=int(namespaces[0]) if namespaces else 0,
        pinned=int(pinned[0]) if pinned else 0,
        due_now=eng._catalog.count_due(eng._time.now()),
        hot_loaded={h.name: ("hnsw" if h.index is not None else "exact") for h in eng._hot.loaded()},
        catalog_commits=eng._catalog.commits,
        lifecycle=lifecycle_metrics(eng) if lifecycle else {},
    )

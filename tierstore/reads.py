"""Reads of single memories and listings, from any tier, without counting an
access."""

from __future__ import annotations

from dataclasses import replace


from . import supersession
from .errors import InvalidInputError
from .kernels import TIER_HOT
from .model import Memory
from .validation import check_id, check_key, check_namespace
from .engine import Engine


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


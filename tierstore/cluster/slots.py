"""Slots: a namespace hashes to one of a fixed number of slots, and slots are
placed on shards by rendezvous (highest-random-weight) hashing.

Rendezvous hashing moves only what it must: when a shard joins, the slots it
wins come to it and no other slot moves; when one leaves, only its slots go,
each to the shard that scored second for it. Hashes are BLAKE2b, so every
router and shard computes the same table from the same list of live shards,
on any machine and Python (``hash()`` is salted per process).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from tierstore.errors import InvalidInputError

__all__ = ["DEFAULT_SLOTS", "placement", "rendezvous", "slot_of"]

#: Slots of a cluster unless told otherwise: a few per shard for balance, few
#: enough that a shard's per-slot stores stay cheap (each slot is one TierStore).
DEFAULT_SLOTS = 64


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def check_slots(num_slots: object) -> int:
    """A slot count: an int in [1, 65536]."""
    if isinstance(num_slots, bool) or not isinstance(num_slots, int) or not 1 <= num_slots <= 65536:
        raise InvalidInputError(f"num_slots must be an int in [1, 65536], got {num_slots!r}")
    return num_slots


def slot_of(ns: str, num_slots: int) -> int:
    """The slot of namespace ``ns``, in ``[0, num_slots)``."""
    return _h64("ns:" + ns) % num_slots


def rendezvous(slot: int, shards: Iterable[str]) -> str:
    """The shard that owns ``slot`` among ``shards`` (its highest score; ties by name)."""
    best: tuple[int, str] | None = None
    for shard in shards:
        score = (_h64(f"slot:{slot}:{shard}"), shard)
        if best is None or score > best:
            best = score
    if best is None:
        raise InvalidInputError("no live shard to place slots on")
    return best[1]


def placement(num_slots: int, shards: Iterable[str]) -> dict[int, str]:
    """Slot -> shard for every slot, over the live ``shards``."""
    names = sorted(set(shards))
    return {slot: rendezvous(slot, names) for slot in range(num_slots)}

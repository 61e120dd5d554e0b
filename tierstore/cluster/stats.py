"""Counts over many stores: a shard's slots, a cluster's shards."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tierstore.records import Stats


def sum_stats(parts: Iterable[Mapping[str, Any]]) -> Stats:
    """The sum of :meth:`Stats.as_dict` dicts taken with ``lifecycle=False``:
    counts add up (a namespace lives in one slot, so namespaces add up too);
    ``hot_loaded`` is the union, ``memory_bytes`` the sum by part. Lifecycle
    metrics are per store and are not summed."""
    total = namespaces = pinned = due_now = commits = 0
    by_tier: dict[str, int] = {}
    by_type: dict[str, dict[str, int]] = {}
    hot_loaded: dict[str, str] = {}
    memory: dict[str, int] = {}
    for p in parts:
        total += p["total"]
        namespaces += p["namespaces"]
        pinned += p["pinned"]
        due_now += p["due_now"]
        commits += p["catalog_commits"]
        for tier, n in p["by_tier"].items():
            by_tier[tier] = by_tier.get(tier, 0) + n
        for mtype, tiers in p["by_type"].items():
            row = by_type.setdefault(mtype, {})
            for tier, n in tiers.items():
                row[tier] = row.get(tier, 0) + n
        hot_loaded.update(p["hot_loaded"])
        for part, n in p.get("memory_bytes", {}).items():  # absent from a shard of an older version
            memory[part] = memory.get(part, 0) + n
    return Stats(
        total=total,
        by_tier=by_tier,
        by_type=by_type,
        namespaces=namespaces,
        pinned=pinned,
        due_now=due_now,
        hot_loaded=hot_loaded,
        catalog_commits=commits,
        memory_bytes=memory,
    )

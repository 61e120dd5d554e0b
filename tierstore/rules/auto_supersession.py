"""Automatic supersession: a new memory retires the live ones it restates.

When a memory is added, the live memories of its namespace **of the same
type** whose cosine similarity to it reaches the type's bar
(``types.<t>.supersede_above``) are superseded by it — marked (see
:mod:`tierstore.rules.supersession`), damped, and due at the next sweep, which
archives them (reversible: explicit positive feedback on one takes the mark
back). No LLM is asked; the rule is deterministic, latest wins. A live
memory is a candidate only if

* it is not already superseded, not pinned, and has no ``key`` (a slot is
  the caller's: it changes by key, never by similarity);
* the tags do not veto it: when both memories carry tags, they share one
  (tags say what a memory is about; "prefers tea" tagged *drink* never
  retires "likes Thai food" tagged *food*, however alike the sentences).
  Sharing a tag may lower the bar to ``supersede_above_shared_tag``;
* the new memory is about as sure: its confidence is at least the older
  one's current confidence minus ``supersession.confidence_margin``, so an
  assistant's guess never retires what the user said.

Candidates are looked for in the hot tier (exact scan, or the namespace's
hnswlib index: the :data:`HNSW_NEIGHBOURS` nearest) and the warm tier (each
shard's nearest), and among the earlier items of the same batch. Cold
memories are not candidates: they are out of search already.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tierstore.kernels import columns as C
from tierstore.policy import Policy
from tierstore.rules.supersession import Mark
from tierstore.tiers.hot import build_threads

HNSW_NEIGHBOURS = 32  # nearest hot memories examined per new memory once a namespace has an hnswlib index
WARM_NEIGHBOURS = 32  # nearest rows examined per warm shard
# Items of one batch are compared with each other only up to this size: the
# comparison is quadratic, and a bulk import of thousands of memories is
# rarely a list of corrections (each item is still compared with the store).
BATCH_COMPARE_LIMIT = 4096
_BLOCK = 1024  # query rows per matrix product (bounds the temporary (rows, n) array)


@dataclass(frozen=True)
class Bars:
    """A type's similarity bars: ``above`` (``None``: off) and ``shared_tag``
    (``None``: ``above`` applies to memories sharing a tag too)."""

    above: float | None
    shared_tag: float | None

    @property
    def lowest(self) -> float | None:
        """The lowest bar in use: no candidate below it can qualify."""
        values = [b for b in (self.above, self.shared_tag) if b is not None]
        return min(values) if values else None

    def reached(self, similarity: float, shared_tag: bool) -> bool:
        bar = self.shared_tag if shared_tag and self.shared_tag is not None else self.above
        return bar is not None and similarity >= bar


def bars_for(policy: Policy, memory_type: str) -> Bars:
    t = policy.types[memory_type]
    return Bars(t.supersede_above, t.supersede_above_shared_tag)


@dataclass(frozen=True)
class NewMemory:
    """What the rule needs of the memory being added."""

    id: str
    memory_type: str
    tags: tuple[str, ...]
    confidence: float  # fused, at creation


@dataclass(frozen=True)
class LiveMemory:
    """What the rule needs of a candidate, read from the catalog."""

    rid: int
    id: str
    memory_type: str
    tags: tuple[str, ...]
    confidence: float  # current (decayed)
    pinned: bool
    key: str | None


def qualifies(new: NewMemory, old: LiveMemory, similarity: float, bars: Bars, confidence_margin: float) -> bool:
    """Whether ``new`` supersedes ``old`` automatically (see the module doc).
    ``old`` is live (not superseded) and not ``new`` itself."""
    if old.memory_type != new.memory_type or old.pinned or old.key is not None:
        return False
    shared = bool(set(new.tags) & set(old.tags))
    if new.tags and old.tags and not shared:
        return False
    if new.confidence < old.confidence - confidence_margin:
        return False
    return bars.reached(similarity, shared)


# -- finding candidates (before the add's transaction) -------------------------


def similar_in_hot(
    hot: Any, vectors: np.ndarray, type_idx: Sequence[int], floors: Sequence[float | None]
) -> list[dict[str, float]]:
    """Per row of ``vectors`` (unit float32): the ids of live hot memories of
    type ``type_idx[i]`` whose cosine is at least ``floors[i]`` (``None``:
    none wanted), with that cosine. ``hot`` is a
    :class:`~tierstore.tiers.hot.HotNamespace`; its read lock is taken here."""
    out: list[dict[str, float]] = [{} for _ in range(len(vectors))]
    want = [i for i, f in enumerate(floors) if f is not None]
    if not want:
        return out
    with hot.lock.read():
        n = hot.n
        if hot.live == 0 or n == 0:
            return out
        alive = hot.I[C.I_ALIVE, :n] != 0
        types = hot.I[C.I_TYPE, :n]
        q = vectors[want]
        if hot.index is None:
            for start in range(0, len(want), _BLOCK):
                block = want[start : start + _BLOCK]
                sims = q[start : start + _BLOCK] @ hot.vectors[:n].T  # cosines: vectors are unit length
                for row, i in enumerate(block):
                    hit = np.flatnonzero(alive & (types == type_idx[i]) & (sims[row] >= floors[i]))
                    out[i] = {hot.ids[s]: float(sims[row, s]) for s in hit.tolist()}
            return out
        k = min(HNSW_NEIGHBOURS, hot.live)
        try:
            labels, dist = hot.index.knn_query(q, k, num_threads=build_threads(len(q)))
        except RuntimeError:  # too few reachable live nodes (many deletions): compare with every live slot
            slots = np.flatnonzero(alive)
            sims = q @ np.asarray(hot.index.get_items(slots, return_type="numpy"), np.float32).T
            labels = np.broadcast_to(slots, sims.shape)
            dist = 1.0 - sims
        for row, i in enumerate(want):
            for s, d in zip(labels[row].tolist(), dist[row].tolist()):
                sim = 1.0 - d  # hnswlib's "ip" space returns 1 - inner product
                if alive[s] and types[s] == type_idx[i] and sim >= floors[i]:
                    out[i][hot.ids[s]] = float(sim)
    return out


def similar_in_warm(
    warm: Any, catalog: Any, ns: str, vectors: np.ndarray, memory_types: Sequence[str], floors: Sequence[float | None]
) -> list[dict[str, float]]:
    """:func:`similar_in_hot` for the warm tier (``warm`` a
    :class:`~tierstore.tiers.warm.WarmTier`; rows are checked in the catalog)."""
    from tierstore.kernels import TIER_WARM

    out: list[dict[str, float]] = [{} for _ in range(len(vectors))]
    if not warm.shards(ns):
        return out
    found: list[tuple[int, int, float]] = []  # (row index, rid, cosine)
    for i, floor in enumerate(floors):
        if floor is None:
            continue
        rids, sims = warm.candidates(ns, vectors[i], WARM_NEIGHBOURS)
        found += [(i, int(r), float(s)) for r, s in zip(rids.tolist(), sims.tolist()) if s >= floor]
    if not found:
        return out
    rows = {r.rid: r for r in catalog.get_rows_by_rid(sorted({rid for _, rid, _ in found}))}
    for i, rid, sim in found:
        r = rows.get(rid)
        if r is not None and r.ns == ns and r.tier == TIER_WARM and r.memory_type == memory_types[i]:
            out[i][r.id] = max(sim, out[i].get(r.id, -1.0))
    return out


def similar_in_batch(
    vectors: np.ndarray, ids: Sequence[str], memory_types: Sequence[str], floors: Sequence[float | None]
) -> list[dict[str, float]]:
    """Per item of a batch: the earlier items of the same type at or above its floor."""
    out: list[dict[str, float]] = [{} for _ in range(len(vectors))]
    want = [j for j, f in enumerate(floors) if f is not None]
    if len(want) < 2 or len(want) > BATCH_COMPARE_LIMIT:
        return out
    q = vectors[want]
    for start in range(0, len(want), _BLOCK):
        sims = q[start : start + _BLOCK] @ q.T
        for row, j in enumerate(want[start : start + _BLOCK]):
            for col in np.flatnonzero(sims[row, : start + row] >= floors[j]).tolist():
                i = want[col]
                if memory_types[i] == memory_types[j] and ids[i] != ids[j]:
                    out[j][ids[i]] = float(sims[row, col])
    return out


# -- deciding (inside the add's transaction) -----------------------------------


def live_candidates(
    conn: sqlite3.Connection, ns: str, ids: Sequence[str], now: float, conf_half_life: float
) -> list[LiveMemory]:
    """The live (unmarked) memories among ``ids``, read through ``conn``."""
    import json

    if not ids:
        return []
    out = []
    for i in range(0, len(ids), 500):
        part = list(ids[i : i + 500])
        rows = conn.execute(
            "SELECT m.rid, m.id, m.memory_type, m.tags, m.confidence, m.t_conf, m.pinned, m.key FROM memories m"
            f" WHERE m.ns = ? AND m.id IN ({','.join('?' * len(part))})"
            " AND NOT EXISTS (SELECT 1 FROM supersessions s WHERE s.rid = m.rid)",
            (ns, *part),
        ).fetchall()
        for rid, mid, mtype, tags, conf, t_conf, pinned, key in rows:
            if math.isfinite(conf_half_life):
                conf = conf * 2.0 ** (-max(now - t_conf, 0.0) / conf_half_life)
            out.append(
                LiveMemory(int(rid), str(mid), str(mtype), tuple(json.loads(tags)), float(conf), bool(pinned), key)
            )
    return out


def decide(
    conn: sqlite3.Connection,
    ns: str,
    new: NewMemory,
    similar: dict[str, float],
    exclude: Sequence[str],
    policy: Policy,
    now: float,
    conf_half_life: float,
) -> list[Mark]:
    """The automatic marks for ``new``, among the candidates ``similar``
    (id -> cosine, found before the transaction) that are still live, minus
    ``exclude`` (the ids the caller superseded explicitly)."""
    bars = bars_for(policy, new.memory_type)
    margin = policy.supersession.confidence_margin
    out = []
    for old in live_candidates(conn, ns, sorted(similar), now, conf_half_life):
        sim = similar[old.id]
        if old.id not in exclude and old.id != new.id and qualifies(new, old, sim, bars, margin):
            out.append(Mark(old.id, new.id, "auto", similarity=round(sim, 6)))
    return out

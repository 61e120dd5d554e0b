"""Search beyond the hot tier: candidates that are catalog rows (warm and
cold memories), ranked by the same fused score as hot hits.

The hot tier ranks its slots in one kernel call over its own columns
(:mod:`tierstore.tiers.hot`). A warm or cold candidate is a catalog row: its
columns are built from the row and the same ``fused_rerank`` kernel ranks it,
so a hit's score means the same whatever tier it came from.

The cold tier (:mod:`tierstore.tiers.cold_index`) is reached through its sign codes,
narrowed by its int8 codes to the few candidates worth reading, and rescored
from their archived vectors: a cold hit's similarity is the exact cosine,
like every other hit's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any

import numpy as np

from tierstore.errors import ObjectNotFoundError
from tierstore.kernels import TIER_COLD, fused_rerank
from tierstore.records import Explain, Hit, HitRows, Memory
from tierstore.rules.scoring import CompiledPolicy, QueryContext
from tierstore.rules.supersession import unsuperseded_rows
from tierstore.rules.tags import TagVocab
from tierstore.storage.catalog import MemoryRow
from tierstore.tiers.cold import ColdTier
from tierstore.tiers.cold_index import (
    CodeEstimates,
    ColdIndex,
    VectorCache,
    candidate_count,
    code_estimates,
    exact_candidates,
    exact_rescore,
    fetch_row_vectors,
)
from tierstore.tiers.hot import columns_from_rows


@dataclass(frozen=True)
class RowHit:
    """A hit on a catalog row: the hit, its cosine similarity, the row, and
    (cold hits) the archived embedding's bytes, for a reactivation."""

    hit: Hit
    similarity: float
    row: MemoryRow
    embedding: bytes | None = None
    order: float = 0.0  # how it ranks among its tier's hits: the score, or (cold) the relevance


@dataclass(frozen=True)
class RowRanker:
    """What ranking catalog rows needs from the store: the compiled policy,
    the tag vocabulary, type indexes, and how a row becomes a Memory."""

    cp: CompiledPolicy
    vocab: TagVocab
    type_idx: dict[str, int]
    memory_of: Callable[[MemoryRow, float], Memory]  # (row, now) -> snapshot without the embedding

    def rank(
        self,
        rows: Sequence[MemoryRow],
        sims: Sequence[float],
        *,
        k: int,
        ctx: QueryContext,
        allowed: np.ndarray,
        min_conf: float,
        now: float,
        explain: bool,
        tier: str,
        note: str | None = None,
        by_relevance: bool = False,
    ) -> tuple[list[int], list[RowHit]]:
        """The best ``k`` of ``rows`` (cosine ``sims``) by the fused score,
        after the policy's filters and masks (``by_relevance``: by the fused
        score without the use factors, :meth:`CompiledPolicy.relevance`; each
        hit's ``order``). Returns the picked positions and their hits;
        ``note`` goes into each explanation (why the tier was searched)."""
        if not rows:
            return [], []
        cp = self.cp
        pick, scores, norm, raw = self._rerank(
            rows, np.asarray(sims, np.float32), ctx, allowed, min_conf, now, len(rows) if by_relevance else k
        )
        rel = None
        if by_relevance:  # all ranked by the kernel; keep the k most relevant (ties: the better score)
            rel = cp.relevance(norm)
            best = np.lexsort((-scores, -rel))[:k]
            pick, scores, norm, raw, rel = pick[best], scores[best], norm[best], raw[best], rel[best]
        picked = pick.tolist()
        chosen = [rows[j] for j in picked]
        score_list = scores.tolist()
        explains: list[Explain | None] | None = None
        if explain:
            made = map(cp.explain, raw.tolist(), norm.tolist(), score_list, repeat(tier))
            explains = list(made) if note is None else [replace(e, reached_because=note) for e in made]
        source = HitRows([r.id for r in chosen], score_list, explains, [self.memory_of(r, now) for r in chosen])
        orders = score_list if rel is None else rel.tolist()
        return picked, [RowHit(Hit(source, i), float(raw[i, 0]), r, order=orders[i]) for i, r in enumerate(chosen)]

    @staticmethod
    def filters(*, ctx: QueryContext, allowed: np.ndarray, min_conf: float) -> bool:
        """Whether a filter is in force that can drop a row whatever its
        similarity: a type not allowed, a confidence floor, a masked tag."""
        return min_conf > 0.0 or bool(len(ctx.mask_tags)) or not bool(np.all(allowed))

    def eligible(
        self, rows: Sequence[MemoryRow], *, ctx: QueryContext, allowed: np.ndarray, min_conf: float, now: float
    ) -> np.ndarray:
        """Which of ``rows`` :meth:`rank` could return, whatever their
        similarity (bool ``(len(rows),)``): a type allowed, a confidence at
        least ``min_conf``, no masked tag. The same kernel decides, so the
        two cannot disagree; a cold search reads no vector of a row it would
        drop."""
        if not self.filters(ctx=ctx, allowed=allowed, min_conf=min_conf):
            # every catalog row passes (the kernel's one other test, alive, holds for them all), without
            # building their columns
            return np.ones(len(rows), np.bool_)
        out = np.zeros(len(rows), np.bool_)
        if not rows:
            return out
        pick = self._rerank(rows, np.zeros(len(rows), np.float32), ctx, allowed, min_conf, now, len(rows))[0]
        out[pick] = True
        return out

    def may_rank(
        self,
        rows: Sequence[MemoryRow],
        low: np.ndarray,
        high: np.ndarray,
        *,
        k: int,
        ctx: QueryContext,
        allowed: np.ndarray,
        min_conf: float,
        now: float,
        by_relevance: bool = False,
    ) -> np.ndarray:
        """Which of ``rows`` may be among the best ``k`` that :meth:`rank`
        returns (with the same ``by_relevance``) when each row's cosine is only
        known to lie in ``[low[i], high[i]]`` (float32): those whose order key
        at ``high`` reaches the ``k``-th best key at ``low``. A row left out
        ranks strictly below ``k`` others whatever its exact cosine (the fused
        score and the relevance never fall as the similarity rises), so
        :meth:`rank` over the rows kept returns what it would over all of them.
        Bool ``(len(rows),)``."""
        n = len(rows)
        out = np.ones(n, np.bool_)
        if n <= k:
            return out
        columns = self._columns(rows)
        keys = []
        for sims in (low, high):
            pick, scores, norm, _ = self._rerank(rows, sims, ctx, allowed, min_conf, now, n, columns)
            key = np.full(n, -np.inf)
            key[pick] = self.cp.relevance(norm) if by_relevance else scores
            keys.append(key)
        kth = np.sort(keys[0])[-k]
        return keys[1] >= kth

    def _columns(self, rows: Sequence[MemoryRow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The kernel's columns of ``rows`` (F, I, tags), as :func:`columns_from_rows` builds them."""
        return columns_from_rows(rows, self.type_idx, [self.vocab.ids(r.tags) for r in rows])

    def _rerank(
        self,
        rows: Sequence[MemoryRow],
        sims: np.ndarray,
        ctx: QueryContext,
        allowed: np.ndarray,
        min_conf: float,
        now: float,
        keep: int,
        columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``fused_rerank`` over ``rows``' columns (``columns``: built already) with
        float32 cosines ``sims``: the best ``keep`` that pass the filters (positions,
        scores, norms, raw factors)."""
        cp = self.cp
        F, I, tags = self._columns(rows) if columns is None else columns  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
        result: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = fused_rerank(
            np.arange(len(rows), dtype=np.int64),
            sims,
            F,
            I,
            tags,
            cp.params(now, min_conf, ctx),
            allowed,
            cp.rank_w0_by_type,
            ctx.q_tags,
            ctx.rule_tags,
            ctx.rule_mult,
            ctx.mask_tags,
            keep,
        )
        return result


def _cold_rows(catalog: Any, ns: str, rids: list[int], superseded: bool) -> list[MemoryRow]:
    """The catalog rows of ``rids`` still cold in ``ns`` (superseded ones too
    when ``superseded``, else not)."""
    rows = catalog.get_rows_by_rid(rids) if superseded else unsuperseded_rows(catalog, rids)
    return [r for r in rows if r.tier == TIER_COLD and r.ns == ns and r.cold_key is not None]


def _read_moved_again(
    index: ColdIndex,
    catalog: Any,
    cold: ColdTier,
    cache: VectorCache,
    ns: str,
    rows: list[MemoryRow],
    vectors: np.ndarray,
    failed: list[BaseException],
    superseded: bool,
) -> list[BaseException]:
    """An object was collected under a search: a compaction moved its records
    to a new object (or its memories left the cold tier) after ``rows`` were
    read. Read the unread candidates' rows again, once, and their vectors
    where the catalog now points (``rows`` and ``vectors`` updated in
    place). Returns the failures to report: none if every candidate still
    cold was read."""
    unread = np.flatnonzero(np.isnan(vectors[:, 0])).tolist()
    now_at = {r.rid: r for r in _cold_rows(catalog, ns, [rows[i].rid for i in unread], superseded)}
    left = [i for i in unread if rows[i].rid in now_at]  # the others left the cold tier: not a failure
    moved = [i for i in left if now_at[rows[i].rid].cold_key != rows[i].cold_key]
    again: list[BaseException] = []
    if moved:
        fresh = [now_at[rows[i].rid] for i in moved]
        vectors[moved] = fetch_row_vectors(index, cold, cache, ns, fresh, again)
        for i, r in zip(moved, fresh):
            rows[i] = r
    return failed + again if np.isnan(vectors[left, 0]).any() else []


def exact_rows(
    ranker: RowRanker,
    index: ColdIndex,
    rows: list[MemoryRow],
    q: np.ndarray,
    k: int,
    *,
    ctx: QueryContext,
    allowed: np.ndarray,
    min_conf: float,
    now: float,
    always: Collection[int] = (),
    estimates: CodeEstimates | None = None,
) -> list[MemoryRow]:
    """The cold candidates ``rows`` whose vectors a search for ``k`` reads:
    those :meth:`RowRanker.eligible` keeps, narrowed by their int8 codes
    (:func:`cold_index.exact_candidates`; the rids in ``always`` kept;
    ``estimates``: the codes' estimates, read already), in the order given."""
    ok = ranker.eligible(rows, ctx=ctx, allowed=allowed, min_conf=min_conf, now=now)
    kept = [r for r, flag in zip(rows, ok.tolist()) if flag]
    return [kept[i] for i in exact_candidates(index, q, [r.rid for r in kept], k, always, estimates)]


def search_cold(
    ranker: RowRanker,
    *,
    index: ColdIndex,
    catalog: Any,
    cold: ColdTier,
    cache: VectorCache,
    ns: str,
    q: np.ndarray,
    k: int,
    ctx: QueryContext,
    allowed: np.ndarray,
    min_conf: float,
    now: float,
    explain: bool,
    note: str,
    errors: list[BaseException],
) -> list[RowHit]:
    """The best ``k`` cold memories of ``ns`` for the unit query ``q``: the
    cold index's candidates (``candidate_count(k)``), their catalog rows
    (those still cold in ``ns``: the loaded codes may hold memories restored
    or deleted since they were read, which the search drops from them; and,
    unless the policy's marks demote (``supersession.superseded_factor``
    below 1), not superseded: then a superseded memory is a hit, demoted and
    after what replaced it, as in the other tiers), those the ranker could
    return narrowed to the best ``exact_count(k)`` by their int8 codes
    (:func:`exact_rows`; when no filter is in force and marks rank, the codes
    choose first and only the chosen candidates' rows are read), their exact similarities from the archived
    vectors (each read alone where the index knows its place), then the fused
    score (policy ``scoring.cold_order``: without the use factors). An archive
    object that cannot be read (missing, damaged, the object store down) costs
    its candidates, not the search: the failures are appended to ``errors``. One missing because a compaction moved its
    records after the rows were read is read again, once, where the catalog
    now points (no error when every candidate is then read, or has left the
    cold tier)."""
    token = index.generation(ns)
    rids, _ = index.candidates(ns, q, candidate_count(k))
    if not rids.size:
        return []
    wanted = rids.tolist()
    # one read of the candidates' int8 codes serves both narrowings (none when k takes them all)
    estimates = code_estimates(index, q, wanted) if len(wanted) > k else None
    if ranker.cp.marks_rank and not ranker.filters(ctx=ctx, allowed=allowed, min_conf=min_conf):
        # nothing can drop a row but its leaving the cold tier (whose code is then discarded below), so the
        # int8 codes choose before the catalog is read: ~20 rows read instead of ~100
        wanted = [wanted[i] for i in exact_candidates(index, q, wanted, k, estimates=estimates)]
    rows = _cold_rows(catalog, ns, wanted, ranker.cp.marks_rank)
    if ranker.cp.marks_rank and len(rows) < len(wanted):
        # codes of memories that left the cold tier (restored, deleted) take candidates' places; only
        # when superseded rows are read too: otherwise a missing row may be a superseded, cold one
        still = {r.rid for r in rows}
        index.discard(ns, [rid for rid in wanted if rid not in still], token)
    rows = exact_rows(
        ranker, index, rows, q, k, ctx=ctx, allowed=allowed, min_conf=min_conf, now=now, estimates=estimates
    )
    if estimates is not None and len(rows) > k:
        # each vector read costs a ranged GET of its own archive object: only the rows whose score may reach
        # the best k, given the bounds their int8 codes put on their cosines, are read (~20 -> a few)
        low, high = estimates.of([r.rid for r in rows]).bounds()
        flags = ranker.may_rank(
            rows,
            low,
            high,
            k=k,
            ctx=ctx,
            allowed=allowed,
            min_conf=min_conf,
            now=now,
            by_relevance=ranker.cp.cold_by_relevance,
        )
        rows = [r for r, flag in zip(rows, flags.tolist()) if flag]
    if not rows:
        return []
    failed: list[BaseException] = []
    vectors = fetch_row_vectors(index, cold, cache, ns, rows, failed)
    if any(isinstance(e, ObjectNotFoundError) for e in failed):
        failed = _read_moved_again(index, catalog, cold, cache, ns, rows, vectors, failed, ranker.cp.marks_rank)
    errors.extend(failed)
    readable = np.flatnonzero(~np.isnan(vectors[:, 0]))  # NaN: unreadable, or left the cold tier meanwhile
    rows = [rows[i] for i in readable.tolist()]
    vectors = vectors[readable]
    if not rows:
        return []
    sims = exact_rescore(q, vectors)
    picked, hits = ranker.rank(
        rows,
        sims.tolist(),
        k=k,
        ctx=ctx,
        allowed=allowed,
        min_conf=min_conf,
        now=now,
        explain=explain,
        tier="cold",
        note=note,
        by_relevance=ranker.cp.cold_by_relevance,
    )
    return [replace(h, embedding=vectors[j].astype("<f4").tobytes()) for j, h in zip(picked, hits)]

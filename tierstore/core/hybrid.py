"""Search by words as well as by meaning (issue 28).

When a search has text (``search(ns, "text")`` with an embedder, or
``search(ns, vector, text="...")``), its candidates come from the vector
indexes (as a vector search's: hot, warm, and the cold index when the cold
tier is reached) and from the keyword index over the namespace's memories in
every tier (:mod:`tierstore.storage.keyword_index`). Each candidate's similarity factor is

    relevance = (1 - w)·clip(cosine, 0, 1) + w·bm25 / best

``w`` the policy's ``scoring.keyword_weight``, ``bm25`` the memory's BM25
for the query's words (0 when none of them is in its text; a vector candidate
outside the keyword index's best matches is looked up: :class:`KeywordTerms`), ``best``
the best of the query's keyword candidates (so the best keyword match
scores 1 whatever the query's length). A superseded memory is no keyword
candidate (:mod:`tierstore.storage.keyword_index`). The rest of the score is the
vector search's, by the same kernels: recency, confidence, context and
weight, the filters and masks, the merge of the tiers (an archived memory
more relevant than every hot and warm hit first, policy ``similar_first``).

A keyword candidate's cosine is computed from its vector where it is: the
hot tier's matrix or index, the warm row's embedding in the catalog, the
cold memory's archived vector (read as a cold search reads it). Keyword
candidates in the cold tier are considered even when the cold rule
(``include_cold="auto"``) would not reach the cold tier for the vector's
sake (never with ``include_cold=False``).

A text with no word to look for, or whose words match nothing, is a vector
search: the caller runs the vector path (:func:`search` returns None).
``explain`` adds ``keywords`` (raw: BM25; normalised: over the query's best)
and gives the cosine as raw ``similarity``; in weighted-sum mode the
similarity weight is split into ``similarity`` and ``keywords`` parts, and
the terms still sum to the score.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tierstore.core.engine import Engine
from tierstore.core.row_ranker import RowHit, _cold_rows, _read_moved_again, exact_rows
from tierstore.errors import ObjectNotFoundError
from tierstore.kernels import TIER_COLD, TIER_HOT, TIER_WARM, inner_products, rank_and_gather, top_candidates
from tierstore.kernels import columns as C
from tierstore.records import Explain, Hit
from tierstore.rules.resolution import annotate_resolution, marked_flags, order_marked, resolve_by_wording, resolve_hits
from tierstore.storage import keyword_index
from tierstore.tiers.cold_index import candidate_count, exact_rescore, fetch_row_vectors
from tierstore.tiers.hot import HotNamespace, RankedSlots

# Keyword candidates asked of the index per search: enough for k hits after
# the lifetime factors reorder them; the index answers them in well under a ms.
MIN_KEYWORD_CANDIDATES = 50
KEYWORD_CANDIDATES_PER_HIT = 5


@dataclass
class KeywordTerms:
    """Each candidate's keyword term, ``(bm25, bm25 / best)``, by memory id.

    The keyword list holds the namespace's best matches by BM25 (at most its
    limit). A vector candidate outside it gets the BM25 its words earn, looked
    up for a tier's candidates in one query
    (:func:`keyword_index.keyword_scores`); when the list holds every match
    (``complete``) there is nothing to look up. Taken as 0, statements that
    rank just below the cut (the name they share with every statement of the
    namespace, in a longer text) lost to older ones above it by the whole
    keyword term."""

    catalog: Any
    ns: str
    text: str
    best: float
    complete: bool  # the keyword list holds every match of the namespace
    by_id: dict[str, tuple[float, float]]

    def normalised(self, rids: list[int], ids: list[Any]) -> list[float]:
        """The normalised term ([0, 1]) of each candidate (``rids`` and ``ids`` in step)."""
        missing = [(r, i) for r, i in zip(rids, ids) if i is not None and i not in self.by_id]
        if missing and not self.complete:
            got = keyword_index.keyword_scores(self.catalog, self.ns, self.text, [r for r, _ in missing])
            for r, i in missing:
                bm = got.get(r, 0.0)
                self.by_id[i] = (bm, min(1.0, bm / self.best))
        return [self.by_id[i][1] if i in self.by_id else 0.0 for i in ids]


def keyword_limit(k: int) -> int:
    return min(1000, max(MIN_KEYWORD_CANDIDATES, KEYWORD_CANDIDATES_PER_HIT * k))


def fuse(cos: np.ndarray, kw: np.ndarray, w: float) -> np.ndarray:
    """The similarity factor of candidates with cosines ``cos`` and
    normalised keyword scores ``kw`` (float32, what the kernels take)."""
    return ((1.0 - w) * np.clip(np.asarray(cos, np.float64), 0.0, 1.0) + w * np.asarray(kw, np.float64)).astype(
        np.float32
    )


def search(
    eng: Engine,
    ns: str,
    q: np.ndarray,
    text: str,
    *,
    k: int,
    ctx: Any,
    allowed: np.ndarray,
    min_conf: float,
    now: float,
    include_warm: bool,
    cold_mode: Any,
    record_access: bool,
    access_cold: bool,
    explain: bool,
    record: Callable[..., None],
) -> list[Hit] | None:
    """The hybrid search (module docstring) of unit query ``q`` and ``text``;
    None when the keyword side has nothing (the caller searches by meaning).
    ``record``: how the hits' accesses are recorded (``retrieval.record_hits``;
    passed in, as retrieval imports this module)."""
    cp = eng.compiled_policy
    sc = eng.policy.scoring
    w = float(sc.keyword_weight)
    if w <= 0.0:
        return None
    limit = keyword_limit(k)
    hot = eng.hot.ensure(ns)
    shards = eng.warm.shards(ns)
    # the namespace's filter in the index walks its rows; without it BM25 runs over every namespace's matches
    # (the archive's count only if its codes are loaded: loading them is not worth it for this choice)
    in_store = keyword_index.indexed_rows(eng.catalog)
    in_ns = hot.live + sum(info.count for info in shards) + (eng.cold_index.count_if_loaded(ns) or 0)
    scoped = in_store is None or 2 * in_ns < in_store
    found = keyword_index.keyword_candidates(eng.catalog, ns, text, limit, with_vectors=True, scoped=scoped)
    if not found:
        return None
    best_bm = found[0][3]
    if not best_bm > 0.0:
        return None
    # Normalised by the best match. (A floor at the last candidate's BM25, when the index had more
    # to give, was tried: suite g lost 0.07 of live@1 to it; docs/benchmarks.md.)
    # per tier: hot ones by id (their slots), the others by rid; (bm25, normalised, embedding bytes or None)
    by_tier: dict[int, dict[Any, tuple[float, float, Any]]] = {TIER_HOT: {}, TIER_WARM: {}, TIER_COLD: {}}
    kw_by_id: dict[str, tuple[float, float]] = {}
    for rid, mid, tier, bm, emb in found:
        kwn = bm / best_bm
        if kwn <= 0.0:
            continue
        by_tier.setdefault(tier, {})[mid if tier == TIER_HOT else rid] = (bm, kwn, emb)
        kw_by_id[mid] = (bm, kwn)
    terms = KeywordTerms(eng.catalog, ns, text, best_bm, len(found) < limit, kw_by_id)

    if k > hot.live:  # never more than the namespace holds: k sizes the kernels' buffers
        total = hot.live + sum(info.count for info in shards) + (eng.cold_index.count(ns) if eng.cold_searchable else 0)
        k = max(1, min(k, max(total, len(found))))
    cosines: dict[str, float] = {}
    hot.lock.acquire_read()
    try:
        ranked, hot_cos = _rank_hot(hot, q, k, eng, ctx, allowed, min_conf, now, by_tier[TIER_HOT], terms, w)
        hits = hot.hits(ranked, cp, explain)
    finally:
        hot.lock.release_read()
    raw = ranked.raw
    merged: list[tuple[Any, ...]] = [(h.score, float(raw[i, 0]), 0, i, h, None) for i, h in enumerate(hits)]
    for i, h in enumerate(hits):
        cosines[h.id] = hot_cos[i]
    seen = {h.id for h in hits}
    best_cos = max(hot_cos, default=-math.inf)
    if include_warm and shards:
        warm, warm_cos = _rank_warm(eng, ns, q, k, ctx, allowed, min_conf, now, explain, by_tier[TIER_WARM], terms, w)
        for i, rh in enumerate(warm):
            if rh.hit.id not in seen:
                merged.append((rh.hit.score, rh.similarity, 1, i, rh.hit, rh))
                cosines[rh.hit.id] = warm_cos[i]
                best_cos = max(best_cos, warm_cos[i])
        seen.update(rh.hit.id for rh in warm)
    best = max((m[1] for m in merged), default=-math.inf)  # the best relevance of hot and warm
    reach = cold_mode is True or (cold_mode == "auto" and (best_cos < sc.cold_similarity_bar or len(merged) < k))
    if cold_mode is not False and (reach or by_tier[TIER_COLD]):
        if cold_mode is True:
            note = "include_cold=True"
        elif reach:
            note = (
                f"hot and warm answered weakly: best similarity {best_cos:.2f} < {sc.cold_similarity_bar:g} "
                "(policy scoring.cold_similarity_bar)"
                if merged and best_cos < sc.cold_similarity_bar
                else f"hot and warm answered weakly: {len(merged)} of the {k} hits asked for"
            )
        else:
            note = "its words matched the query's (the keyword index)"
        cold, cold_cos = _rank_cold(
            eng, ns, q, k, ctx, allowed, min_conf, now, explain, note, reach, by_tier[TIER_COLD], terms, w
        )
        for i, rh in enumerate(cold):
            if rh.hit.id not in seen:
                merged.append((rh.hit.score, rh.similarity, 2, i, rh.hit, rh))
                cosines[rh.hit.id] = cold_cos[i]
    if sc.similar_first:  # archived memories more relevant than anything recent first, in the cold order
        # (not a superseded one: it ranks by its demoted score, after what replaced it)
        merged.sort(
            key=lambda m: (
                (False, -m[5].order, m[3])
                if m[2] == 2 and m[1] > best and m[5].row.ttl_seconds != 0.0
                else (True, -m[0], -m[1], m[2], m[3])
            )
        )
    else:
        merged.sort(key=lambda m: (-m[0], -m[1], m[2], m[3]))
    top = merged[:k]
    if record_access and top:
        record(eng, ns, hot, top, now, access_cold)
    # query-time resolution and the marks, as for a search by meaning (tierstore.rules.resolution), on the cosines
    sims = {m[4].id: cosines.get(m[4].id, m[1]) for m in top}
    result, moved = resolve_hits(cp, [m[4] for m in top], [sims[m[4].id] for m in top])
    if cp.resolve_word_margin >= 0.0 and len(result) > 1:
        result, more = resolve_by_wording(cp, result, sims)
        moved.update(more)
    if cp.marks_rank:
        result = order_marked(eng.catalog, ns, result, marked_flags(top, ranked, result))
    if explain:
        for h in result:
            if h.explain is not None:
                bm, kwn = kw_by_id.get(h.id, (0.0, 0.0))
                h.set_explain(explained(h.explain, cosines.get(h.id, 0.0), bm, kwn, w))
        annotate_resolution(result, moved)
    return result


def explained(e: Explain, cos: float, bm: float, kwn: float, w: float) -> Explain:
    """A hit's explanation with the keyword signal shown (module docstring)."""
    raw = {**e.raw, "similarity": float(cos), "keywords": float(bm)}
    norm = dict(e.normalised)
    weights = dict(e.weights)
    terms = dict(e.terms)
    if e.mode == "product":  # the similarity factor is the fused relevance; keywords shown beside it
        norm["keywords"] = float(kwn)
        weights["keywords"] = w
    else:
        ws = weights.get("similarity", 0.0)
        sim_n = min(max(float(cos), 0.0), 1.0)
        norm["similarity"], norm["keywords"] = sim_n, float(kwn)
        weights["similarity"], weights["keywords"] = ws * (1.0 - w), ws * w
        terms["similarity"], terms["keywords"] = ws * (1.0 - w) * sim_n, ws * w * float(kwn)
    return replace(e, raw=raw, normalised=norm, weights=weights, terms=terms)


# -- the tiers -------------------------------------------------------------------------------


def _rank_hot(
    hot: HotNamespace,
    q: np.ndarray,
    k: int,
    eng: Engine,
    ctx: Any,
    allowed: np.ndarray,
    min_conf: float,
    now: float,
    kw: dict[Any, tuple[float, float, Any]],
    terms: KeywordTerms,
    w: float,
) -> tuple[RankedSlots, list[float]]:
    """The hot tier's best ``k`` (hold ``hot.lock.read()``): the vector
    candidates as :meth:`HotNamespace.search` takes them, and the keyword
    candidates that are hot, ranked by the fused rerank kernel on their
    fused similarity. Returns the ranked slots and each hit's cosine."""
    live = hot.live
    if live == 0:
        return RankedSlots(np.zeros((C.NRF, 0)), np.zeros((C.NRI, 0), np.int64)), []
    sc = eng.policy.scoring
    want = min(live, max(k * sc.oversample, sc.min_candidates, k))
    slot_of = hot.slot_of
    kw_ids = [i for i in kw if i in slot_of]
    kw_slots = np.array([slot_of[i] for i in kw_ids], np.int64)
    kw_norm = np.array([kw[i][1] for i in kw_ids], np.float64)
    if kw_ids and all(kw[i][2] is not None for i in kw_ids):  # the catalog's copies of the hot vectors
        kw_cos = np.frombuffer(b"".join(kw[i][2] for i in kw_ids), "<f4").reshape(len(kw_ids), -1) @ q
        kw_cos = kw_cos.astype(np.float64)
    else:
        kw_cos = (hot.vectors_of(kw_slots) @ q).astype(np.float64) if kw_slots.size else np.zeros(0)
    exact = hot.index is None
    sims = inner_products(q, hot.vectors, hot.n) if exact else None
    while True:
        if exact:
            cand = hot.slot_range() if want >= live else top_candidates(sims, hot.I[C.I_ALIVE], hot.n, want)
            cand_cos = np.asarray(sims, np.float64)[cand]
        else:
            try:
                labels, dist = hot.index.knn_query(q, want)  # type: ignore[union-attr]
                cand, cand_cos = labels[0].astype(np.int64), 1.0 - dist[0].astype(np.float64)
            except RuntimeError:  # hnswlib could not reach `want` live nodes: every live slot
                cand = np.flatnonzero(hot.I[C.I_ALIVE, : hot.n]).astype(np.int64)
                cand_cos = hot.vectors_of(cand).astype(np.float64) @ q
                want = live
        norm = np.zeros(cand.shape[0] + kw_slots.shape[0])
        cl = cand.tolist()
        norm[: len(cl)] = terms.normalised(hot.rids[cand].tolist(), [hot.ids[s] for s in cl])
        if kw_slots.size:
            at = {s: j for j, s in enumerate(cl)}
            extra = []
            for p, s in enumerate(kw_slots.tolist()):
                j = at.get(s)
                if j is None:
                    extra.append(p)
                    j = cand.shape[0] + len(extra) - 1
                norm[j] = kw_norm[p]
            slots = np.concatenate([cand, kw_slots[extra]])
            cos = np.concatenate([cand_cos, kw_cos[extra]])
            norm = norm[: slots.shape[0]]
        else:
            slots, cos = cand, cand_cos
            norm = norm[: slots.shape[0]]
        fused = fuse(cos, norm, w)
        rf, ri, _ = rank_and_gather(
            q, slots, fused, hot.F, hot.I, hot.tags, ctx.packed[0], ctx.packed_tags, allowed, now, min_conf, k
        )
        if ri.shape[1] >= k or want >= live:
            cos_of = dict(zip(slots.tolist(), cos.tolist()))
            return RankedSlots(rf, ri), [cos_of[s] for s in ri[C.R_SLOT].tolist()]
        want = min(live, want * 4)


def _rank_warm(
    eng: Engine,
    ns: str,
    q: np.ndarray,
    k: int,
    ctx: Any,
    allowed: np.ndarray,
    min_conf: float,
    now: float,
    explain: bool,
    kw: dict[Any, tuple[float, float, Any]],
    terms: KeywordTerms,
    w: float,
) -> tuple[list[RowHit], list[float]]:
    """The warm tier's best ``k``: the shards' vector candidates and the warm
    keyword candidates, their live rows, ranked on the fused similarity."""
    sc = eng.policy.scoring
    want = max(k * sc.oversample, sc.min_candidates, k)
    rids, sims = eng.warm.candidates(ns, q, want)
    cos_of = dict(zip(rids.tolist(), np.asarray(sims, np.float64).tolist()))
    wanted = list(dict.fromkeys([*cos_of, *kw]))
    rows = [r for r in eng.catalog.get_rows_by_rid(wanted) if r.tier == TIER_WARM and r.ns == ns]
    if not rows:
        return [], []
    cos = []
    for r in rows:
        c = cos_of.get(r.rid)
        if c is None:
            v = r.vector()
            c = float(v @ q) if v is not None else 0.0
        cos.append(c)
    norm = terms.normalised([r.rid for r in rows], [r.id for r in rows])
    picked, hits = eng.ranker.rank(
        rows,
        fuse(np.array(cos), np.array(norm), w).tolist(),
        k=k,
        ctx=ctx,
        allowed=allowed,
        min_conf=min_conf,
        now=now,
        explain=explain,
        tier="warm",
    )
    return hits, [cos[j] for j in picked]


def _rank_cold(
    eng: Engine,
    ns: str,
    q: np.ndarray,
    k: int,
    ctx: Any,
    allowed: np.ndarray,
    min_conf: float,
    now: float,
    explain: bool,
    note: str,
    reach: bool,
    kw: dict[Any, tuple[float, float, Any]],
    terms: KeywordTerms,
    w: float,
) -> tuple[list[RowHit], list[float]]:
    """The cold tier's best ``k``: the cold index's candidates (when the cold
    tier is reached for the vector's sake) and the cold keyword candidates;
    their rows (still cold, not superseded), the index's candidates narrowed
    by their int8 codes as a cold search narrows them (every keyword
    candidate kept: chosen by its words, not its meaning), exact cosines from
    the archived vectors, ranked on the fused similarity as a cold search ranks."""
    wanted: list[int] = []
    if reach and eng.cold_searchable and eng.cold_index.count(ns):
        rids, _ = eng.cold_index.candidates(ns, q, candidate_count(k))
        wanted = rids.tolist()
    wanted = list(dict.fromkeys([*wanted, *kw]))
    if not wanted:
        return [], []
    rows = _cold_rows(eng.catalog, ns, wanted, eng.compiled_policy.marks_rank)
    index, cold, cache = eng.cold_index, eng.cold, eng.vector_cache
    rows = exact_rows(eng.ranker, index, rows, q, k, ctx=ctx, allowed=allowed, min_conf=min_conf, now=now, always=kw)
    if not rows:
        return [], []
    failed: list[BaseException] = []
    vectors = fetch_row_vectors(index, cold, cache, ns, rows, failed)
    if any(isinstance(e, ObjectNotFoundError) for e in failed):
        failed = _read_moved_again(
            index, eng.catalog, cold, cache, ns, rows, vectors, failed, eng.compiled_policy.marks_rank
        )
    if failed:
        with eng.cold_errors_lock:
            eng.cold_search_errors += len(failed)
            eng.cold_error_log.extend(f"{type(e).__name__}: {e}" for e in failed)
            del eng.cold_error_log[:-100]
    readable = np.flatnonzero(~np.isnan(vectors[:, 0]))
    rows = [rows[i] for i in readable.tolist()]
    vectors = vectors[readable]
    if not rows:
        return [], []
    cos = exact_rescore(q, vectors).astype(np.float64)
    norm = np.array(terms.normalised([r.rid for r in rows], [r.id for r in rows]))
    picked, hits = eng.ranker.rank(
        rows,
        fuse(cos, norm, w).tolist(),
        k=k,
        ctx=ctx,
        allowed=allowed,
        min_conf=min_conf,
        now=now,
        explain=explain,
        tier="cold",
        note=note,
        by_relevance=eng.compiled_policy.cold_by_relevance,
    )
    return (
        [replace(h, embedding=vectors[j].astype("<f4").tobytes()) for j, h in zip(picked, hits)],
        [float(cos[j]) for j in picked],
    )

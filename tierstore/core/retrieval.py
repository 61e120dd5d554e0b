"""Search across tiers: the hot tier first, then the warm shards and the cold
index when they are wanted, merged by (score, similarity); recording the
hits' accesses where they are."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tierstore import embedding as _embedding
from tierstore.core import hybrid, row_ranker
from tierstore.core.engine import Engine
from tierstore.core.row_ranker import RowHit
from tierstore.core.trace import encode_vector
from tierstore.core.updates import count_accesses
from tierstore.errors import InvalidInputError, ReadOnlyStoreError, StoreClosedError
from tierstore.kernels import TIER_WARM, record_accesses
from tierstore.kernels import columns as C
from tierstore.records import Hit
from tierstore.rules import supersession
from tierstore.rules.resolution import (
    annotate_resolution,
    kernel_moves,
    marked_flags,
    order_marked,
    resolve_by_wording,
    resolve_hits,
)
from tierstore.rules.validation import (
    F32,
    check_confidence,
    check_namespace,
    check_positive_int,
    check_query_vectors,
    check_search_flags,
    check_tags,
    check_vector,
)
from tierstore.tiers.hot import HotNamespace


def search(
    eng: Engine,
    ns: str,
    query: Any,
    *,
    k: int = 5,
    context_tags: Iterable[str] = (),
    memory_types: Iterable[str] | None = None,
    min_confidence: float = 0.0,
    include_warm: bool = True,
    include_cold: bool | str | None = None,
    record_access: bool | None = None,
    explain: bool = False,
    in_memory_only: bool = False,
    text: str | None = None,
) -> list[Hit] | None:
    """See :meth:`TierStore.search`; ``in_memory_only``: see
    :meth:`TierStore.search_in_memory` (None when the search needs more);
    ``text``: the words of the query (a text query's own), for the keyword
    signal (:mod:`tierstore.core.hybrid`)."""
    # Written for speed: this runs per query, and after hnswlib's search
    # every Python step runs with cold caches.
    if (  # the flags' full check only when one is not of its usual type (the common call skips it)
        type(include_warm) is not bool
        or type(explain) is not bool
        or (record_access is not None and type(record_access) is not bool)
        or memory_types is not None
    ):
        memory_types = check_search_flags(include_warm, record_access, explain, memory_types)
    if eng.closed:
        raise StoreClosedError("the store is closed")
    if in_memory_only and (type(query) is str or text is not None or explain or eng.trace is not None):
        return None  # a model to run, the catalog to read, a trace file to write
    if text is not None and type(text) is not str:
        raise InvalidInputError(f"text must be a string, got {type(text).__name__}")
    if ns not in eng.valid_ns:
        eng.valid_ns.add(check_namespace(ns))
    if type(query) is str:
        if text is None:
            text = query  # a text query: its words are the keyword side's
        query = _embedding.embed_query(eng.embedder, query)
    if (
        type(query) is np.ndarray
        and query.dtype is F32
        and query.shape == eng.vector_shape
        and query.flags.c_contiguous
    ):
        # As given: the rerank kernel measures the query's length (in cache
        # after the candidate search); the hot tier checks and normalises
        # a zero, NaN, inf or oddly scaled one the kernel does not rank.
        q = query
    else:
        q = check_vector(query, eng.dim, "query")
    if type(k) is not int or k < 1:
        k = check_positive_int(k, "k")
    min_conf = (
        min_confidence
        if type(min_confidence) is float and 0.0 <= min_confidence <= 1.0
        else check_confidence(min_confidence, "min_confidence")
    )
    cp = eng.compiled_policy
    allowed = cp.all_types if memory_types is None else cp.type_allowed(list(memory_types))
    ctx_tags = (check_tags(context_tags, 1024) if context_tags else ()) or eng.contexts.get(ns, ())
    ctx = cp.context(ctx_tags) if ctx_tags else cp.empty_context
    asked_access = record_access  # the trace keeps what was asked: a replay under another policy applies its own
    if record_access is None:  # the policy's: hot and warm hits, cold ones only with record_access_cold
        record_access = eng.policy.scoring.record_access and not eng.readonly
        access_cold = eng.policy.scoring.record_access_cold
    elif record_access and eng.readonly:
        raise ReadOnlyStoreError("the store was opened read-only: search(record_access=True) would change it")
    else:
        access_cold = True  # asked for: every hit was used
    if include_cold is not None and not (include_cold == "auto" or type(include_cold) is bool):
        raise InvalidInputError(f"include_cold must be True, False, 'auto' or None, got {include_cold!r}")
    now = eng.store_time.now()
    sc = eng.policy.scoring
    cold_mode = sc.include_cold if include_cold is None else include_cold
    if text is not None and sc.keyword_weight > 0.0 and not in_memory_only:
        q = check_vector(query, eng.dim, "query")
        found = hybrid.search(
            eng,
            ns,
            q,
            text,
            k=k,
            ctx=ctx,
            allowed=allowed,
            min_conf=min_conf,
            now=now,
            include_warm=include_warm,
            cold_mode=cold_mode,
            record_access=record_access,
            access_cold=access_cold,
            explain=explain,
            record=record_hits,
        )
        if found is not None:  # else no word matched: by meaning alone, below
            if eng.trace is not None:
                trace_search(eng, now, ns, q, k, ctx_tags, memory_types, min_conf, include_warm, asked_access, found)
            if explain and found:
                supersession.annotate_explains(eng.catalog, ns, found, _factor(cp))
            return found
    if in_memory_only:
        hot = eng.hot.get(ns)  # a namespace not loaded yet is read from the catalog
        listed = eng.warm.shards_if_listed(ns)
        if (
            hot is None
            or k > hot.live
            or cold_mode is True
            or listed is None
            or (include_warm and listed)
            or not hot.lock.try_read()
        ):  # a writer holds or waits for the index
            return None
    else:
        hot = eng.hot.ensure(ns)
        if k > hot.live:  # never more than the namespace holds: k sizes the kernels' buffers
            k = max(
                1,
                min(
                    k,
                    hot.live
                    + sum(info.count for info in eng.warm.shards(ns))
                    + (eng.cold_index.count(ns) if eng.cold_searchable else 0),
                ),
            )
        hot.lock.acquire_read()  # released below, as try_read's is
    moved: dict[str, str] | None = None  # resolution's moves, where not read off the kernel's R_BEFORE
    estimate_note: str | None = None  # why the archive may rank (policy scoring.cold_estimate)
    warm_shards = include_warm and bool(eng.warm.shards(ns))
    archived = eng.cold_searchable and not eng.cold_index.known_empty(ns)  # the archive may hold some of ns
    # hot alone answers, whatever its hits, when there is no warm tier to merge and the cold tier is off or
    # holds nothing of the namespace: then the kernel records the hits' accesses as it ranks them
    surely_alone = not warm_shards and (cold_mode is False or not archived)
    recorded = record_access and surely_alone
    try:
        ranked = hot.search(q, k, cp, ctx, allowed, min_conf, now, recorded)
        hits = col_hits = hot.hits(ranked, cp, explain)  # col_hits: in the kernel's column order
        col_sims = (
            dict(zip((h.id for h in hits), ranked.rf[C.R_RAW].tolist()))
            if cp.resolve_word_margin >= 0.0 and len(hits) > 1
            else {}
        )
        hot_alone = surely_alone
        if not surely_alone and not warm_shards:
            # the cold tier "auto" with an archive: hot alone when it found k hits, one as similar as the
            # bar, or the archive turns out empty
            sims = ranked.rf[C.R_RAW].tolist()  # a list: max and min of ten floats cost less than numpy's
            hot_alone = (
                cold_mode == "auto" and len(hits) >= k and max(sims) >= sc.cold_similarity_bar
            ) or archive_empty(eng, ns, in_memory_only)
            if hot_alone and cold_mode == "auto" and sc.cold_estimate:
                estimate_note = archive_may_rank(eng, ns, query, min(sims, default=-math.inf), sc, in_memory_only)
                if estimate_note is _UNKNOWN:
                    return None  # the archive's codes are not loaded: the caller searches again where it may wait
                hot_alone = estimate_note is None
        if in_memory_only and not hot_alone:  # no warm shard to merge (refused above): the archive's codes to read
            return None  # nothing recorded: the caller searches again where it may wait
        if record_access and hits and hot_alone and not recorded:
            with hot.access_lock:
                record_accesses(
                    ranked.slots,
                    now,
                    hot.F,
                    hot.I,
                    cp.boost_by_type,
                    cp.refresh_by_type,
                    cp.deletes_by_type,
                    cp.thresholds,
                    cp.conf_half_life,
                )
    finally:
        hot.lock.release_read()
    if q is query and (not hot_alone or eng.trace is not None):
        q = check_vector(query, eng.dim, "query")  # the other tiers and the trace take unit vectors
    if hot_alone:
        if explain and hits and moved is None:  # the kernel resolved them
            moved = kernel_moves(ranked, hits)
        if cp.resolve_word_margin >= 0.0 and len(hits) > 1:
            hits, more = resolve_by_wording(cp, hits, col_sims)
            if more:
                moved = {**(moved or {}), **more}
        ttl_row = ranked.rf[C.R_TTL_OVERRIDE].tolist() if cp.marks_rank and hits and ranked.superseded else ()
        if 0.0 in ttl_row:  # a superseded hit
            col_of = {h.id: j for j, h in enumerate(col_hits)}
            hits = order_marked(eng.catalog, ns, hits, [ttl_row[col_of[h.id]] == 0.0 for h in hits])
        if eng.trace is not None:
            trace_search(eng, now, ns, q, k, ctx_tags, memory_types, min_conf, include_warm, asked_access, hits)
        if explain and hits:
            supersession.annotate_explains(eng.catalog, ns, hits, _factor(cp))
            annotate_resolution(hits, moved or {})
        return hits
    # Merge with the warm and cold tiers: the best k of all by (score, similarity).
    raw = ranked.raw
    # (score, similarity, tier, position in its tier's list, hit, the warm or cold tier's row; None for hot)
    merged: list[tuple[float, float, int, int, Hit, RowHit | None]] = [
        (h.score, float(raw[i, 0]), 0, i, h, None) for i, h in enumerate(hits)
    ]
    seen = {h.id for h in hits}  # a memory that moved tiers between two passes keeps its first hit
    if warm_shards:
        warm = search_warm(eng, ns, q, k, ctx, allowed, min_conf, now, explain)
        merged += [(w.hit.score, w.similarity, 1, i, w.hit, w) for i, w in enumerate(warm) if w.hit.id not in seen]
        seen.update(w.hit.id for w in warm)
    best = max((m[1] for m in merged), default=-math.inf)
    if (
        cold_mode == "auto"
        and estimate_note is None
        and sc.cold_estimate
        and eng.cold_searchable
        and best >= sc.cold_similarity_bar
        and len(merged) >= k
    ):
        kth = min(m[1] for m in sorted(merged, key=lambda m: (-m[0], -m[1], m[2], m[3]))[:k])
        estimate_note = archive_may_rank(eng, ns, q, kth, sc, False)
    if cold_mode is True or (
        cold_mode == "auto" and (best < sc.cold_similarity_bar or len(merged) < k or estimate_note is not None)
    ):
        if cold_mode is True:
            note = "include_cold=True"
        elif estimate_note is not None and best >= sc.cold_similarity_bar and len(merged) >= k:
            note = estimate_note
        elif best < sc.cold_similarity_bar:
            note = (
                f"hot and warm answered weakly: best similarity {best:.2f} < {sc.cold_similarity_bar:g} "
                "(policy scoring.cold_similarity_bar)"
                if merged
                else "hot and warm hold nothing that matches"
            )
        else:
            note = f"hot and warm answered weakly: {len(merged)} of the {k} hits asked for"
        cold = search_cold(eng, ns, q, k, ctx, allowed, min_conf, now, explain, note)
        merged += [(c.hit.score, c.similarity, 2, i, c.hit, c) for i, c in enumerate(cold) if c.hit.id not in seen]
        if sc.similar_first and note is not estimate_note:
            # archived memories that match better than anything recent first, in the cold order, when hot
            # and warm answered weakly (not when only the estimate sent the search here: the hits found
            # matched well, and the archive competes by score), and not a superseded one (it ranks by its
            # demoted score, after what replaced it)
            merged.sort(
                key=lambda m: (
                    (False, -m[5].order, m[3])
                    if m[2] == 2 and m[5] is not None and m[1] > best and m[5].row.ttl_seconds != 0.0
                    else (True, -m[0], -m[1], m[2], m[3])
                )
            )
        else:
            merged.sort(key=lambda m: (-m[0], -m[1], m[2], m[3]))
    else:
        merged.sort(key=lambda m: (-m[0], -m[1], m[2], m[3]))
    top = merged[:k]
    if record_access:
        record_hits(eng, ns, hot, top, now, access_cold)
    hot_only = len(merged) == len(hits)  # nothing came from the warm or cold tier
    if hot_only and len(top) == len(hits):
        # the hot hits alone, all of them: the kernel resolved them already (R_BEFORE, its slot before)
        result = hits
        moved = {}
        if explain and cp.resolves:
            moved = kernel_moves(ranked, hits)
    else:
        result, moved = resolve_hits(cp, [m[4] for m in top], [m[1] for m in top])
    if cp.resolve_word_margin >= 0.0 and len(result) > 1:
        result, more = resolve_by_wording(cp, result, {m[4].id: m[1] for m in top})
        moved.update(more)
    if cp.marks_rank and (not hot_only or ranked.superseded):  # a hot hit superseded (-1: not counted, so perhaps)
        result = order_marked(eng.catalog, ns, result, marked_flags(top, ranked, result))
    if eng.trace is not None:
        trace_search(eng, now, ns, q, k, ctx_tags, memory_types, min_conf, include_warm, asked_access, result)
    if explain and result:
        supersession.annotate_explains(eng.catalog, ns, result, _factor(cp))
        annotate_resolution(result, moved)
    return result


def search_batch(eng: Engine, ns: str, queries: Any, **options: Any) -> list[list[Hit]]:
    """See :meth:`TierStore.search_batch`: every vector checked, then :func:`search` per query."""
    eng.check_open()
    for name in ("text", "in_memory_only"):
        if name in options:
            raise InvalidInputError(f"search_batch takes no {name}= (vectors only)")
    vectors = check_query_vectors(queries, eng.dim)
    return [search(eng, ns, q, **options) for q in vectors]  # type: ignore[misc]


def search_in_memory(eng: Engine, ns: str, query: Any, **options: Any) -> list[Hit] | None:
    """See :meth:`TierStore.search_in_memory`: :func:`search` with ``in_memory_only``."""
    for name in ("explain", "text", "in_memory_only"):
        if name in options:
            raise InvalidInputError(f"search_in_memory takes no {name}=")
    return search(eng, ns, query, in_memory_only=True, **options)


_UNKNOWN = "unknown"  # archive_may_rank: the codes are not loaded and may not be loaded here


def archive_empty(eng: Engine, ns: str, in_memory_only: bool) -> bool:
    """Whether the searchable cold tier holds nothing of ``ns`` (False when
    ``in_memory_only`` and its codes are not loaded: unknown)."""
    index = eng.cold_index
    return (index.count_if_loaded(ns) if in_memory_only else index.count(ns)) == 0


def archive_may_rank(eng: Engine, ns: str, query: Any, kth: float, sc: Any, in_memory_only: bool) -> str | None:
    """Why the cold tier may hold a memory as similar as the hits found
    (``kth``: the least similar of them): its best code's estimated cosine
    is at least ``kth - sc.cold_estimate_slack``; ``None`` when it cannot,
    or the namespace has nothing archived; :data:`_UNKNOWN` when
    ``in_memory_only`` and the namespace's codes are not loaded."""
    index = eng.cold_index
    n = index.count_if_loaded(ns) if in_memory_only else index.count(ns)
    if n is None:
        return _UNKNOWN
    if n == 0:
        return None
    est = index.best_estimate(ns, check_vector(query, eng.dim, "query"))
    if est < kth - sc.cold_estimate_slack:
        return None
    return (
        f"an archived memory may match as well: estimated similarity {est:.2f} >= {kth:.2f} (the least similar"
        f" hit) - {sc.cold_estimate_slack:g} (policy scoring.cold_estimate)"
    )


def _factor(cp: Any) -> float | None:
    """The score factor of a superseded memory, for its explanation (None: marks do not demote)."""
    return cp.policy.supersession.superseded_factor if cp.marks_rank else None


def record_hits(
    eng: Engine, ns: str, hot: HotNamespace, top: list[tuple[Any, ...]], now: float, access_cold: bool
) -> None:
    """Count an access on each merged hit where it is: hot hits in place,
    warm ones promoted to hot, cold ones (when ``access_cold``) reactivated
    (back to hot, with the archived embedding the search already read)."""
    cp = eng.compiled_policy
    hot_ids = [m[4].id for m in top if m[2] == 0]
    moved_away: list[str] = []
    if hot_ids:
        with hot.lock.read(), hot.access_lock:
            # slots may have moved since the lock was released: look them up again
            slots = np.array([hot.slot_of[i] for i in hot_ids if i in hot.slot_of], np.int64)
            moved_away = [i for i in hot_ids if i not in hot.slot_of]
            if slots.size:
                record_accesses(
                    slots,
                    now,
                    hot.F,
                    hot.I,
                    cp.boost_by_type,
                    cp.refresh_by_type,
                    cp.deletes_by_type,
                    cp.thresholds,
                    cp.conf_half_life,
                )
    used_warm = [m[5].row for m in top if m[2] == 1]
    if used_warm:
        promoted = {r.rid for r in eng.migrator.promote(ns, used_warm, now, access=True, kind="promote")}
        moved_away += [r.id for r in used_warm if r.rid not in promoted]
    used_cold = [m[5] for m in top if m[2] == 2] if access_cold else []
    if used_cold:
        rows = [c.row for c in used_cold]
        back = {
            r.rid
            for r in eng.migrator.reactivate(
                ns, rows, now, records={c.row.id: {"embedding": c.embedding} for c in used_cold}
            )
        }
        moved_away += [r.id for r in rows if r.rid not in back]
    pending = moved_away
    for _ in range(16):  # hits that changed tier meanwhile: counted where they are now
        if not pending:
            break
        pending = count_accesses(eng, ns, hot, pending, now, strict=False)


def trace_search(
    eng: Engine,
    now: float,
    ns: str,
    q: np.ndarray,
    k: int,
    ctx_tags: Sequence[str],
    memory_types: Any,
    min_conf: float,
    include_warm: bool,
    record_access: bool | None,
    hits: list[Hit],
) -> None:
    assert eng.trace is not None
    eng.trace.write(
        "search",
        now,
        ns=ns,
        query=encode_vector(q),
        k=k,
        context_tags=list(ctx_tags),
        memory_types=None if memory_types is None else list(memory_types),
        min_confidence=min_conf,
        include_warm=include_warm,
        record_access=record_access,
        hits=[h.id for h in hits],
    )


def search_warm(
    eng: Engine,
    ns: str,
    q: np.ndarray,
    k: int,
    ctx: Any,
    allowed: np.ndarray,
    min_conf: float,
    now: float,
    explain: bool,
) -> list[RowHit]:
    """Warm hits: shard candidates, their live rows from the catalog (a
    row left its shard when the catalog says so), then the same fused
    rerank as the hot tier."""
    sc = eng.policy.scoring
    want = max(k * sc.oversample, sc.min_candidates, k)
    shards = eng.warm.shards(ns)
    if not shards:  # a concurrent sweep archived or merged them away since the caller looked
        return []
    largest = max(info.count for info in shards)
    while True:
        rids, sims = eng.warm.candidates(ns, q, want)
        rows_by_rid = {r.rid: r for r in eng.catalog.get_rows_by_rid(np.unique(rids).tolist())}
        seen: set[int] = set()
        rows, cand_sims = [], []
        for rid, sim in zip(rids.tolist(), sims.tolist()):
            r = rows_by_rid.get(rid)
            if r is None or r.tier != TIER_WARM or r.ns != ns or rid in seen:
                continue
            seen.add(rid)
            rows.append(r)
            cand_sims.append(sim)
        if not rows:
            return []
        picked, hits = eng.ranker.rank(
            rows, cand_sims, k=k, ctx=ctx, allowed=allowed, min_conf=min_conf, now=now, explain=explain, tier="warm"
        )
        if len(picked) >= k or want >= largest:
            return hits
        want *= 4


def search_cold(
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
) -> list[RowHit]:
    """Cold hits (see :func:`tierstore.core.row_ranker.search_cold`); none when
    the namespace has nothing archived."""
    if not eng.cold_searchable or eng.cold_index.count(ns) == 0:
        return []
    errors: list[BaseException] = []
    hits = row_ranker.search_cold(
        eng.ranker,
        index=eng.cold_index,
        catalog=eng.catalog,
        cold=eng.cold,
        cache=eng.vector_cache,
        ns=ns,
        q=q,
        k=k,
        ctx=ctx,
        allowed=allowed,
        min_conf=min_conf,
        now=now,
        explain=explain,
        note=note,
        errors=errors,
    )
    if errors:  # the search serves what it could read; the failures are counted and kept for stats
        with eng.cold_errors_lock:
            eng.cold_search_errors += len(errors)
            eng.cold_error_log.extend(f"{type(e).__name__}: {e}" for e in errors)
            del eng.cold_error_log[:-100]
    return hits

"""Choosing among a search's candidates: LangChain's ``filter`` and maximal
marginal relevance (MMR), over the hits of the store's fused ranking.

A filtered search asks the store for more candidates than it returns and
keeps those that pass, asking again for more (four times as many each time)
until ``k`` pass or the namespace has no more; the kept ones stay in the
store's order. The store is asked never to record accesses for candidates:
the caller records them for what it returns (:func:`record_use`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from tierstore.errors import InvalidInputError
from tierstore.integrations.filters import check_filter, matches
from tierstore.records import Hit

#: candidates asked for at most over a server (``tierstore serve --max-k``, 1000 by default)
REMOTE_MAX_CANDIDATES = 1000


def hit_filter(flt: Any, document: Callable[[Hit], Document]) -> Callable[[Hit], bool]:
    """A test on hits for LangChain's ``filter``: a callable taking a
    ``Document`` (as ``InMemoryVectorStore`` takes), or a dict over the
    document's metadata (equality and ``$eq $ne $gt $gte $lt $lte``, dotted
    paths into nested values: :mod:`tierstore.integrations.filters`)."""
    if callable(flt):
        return lambda h: bool(flt(document(h)))
    if isinstance(flt, Mapping):
        spec = check_filter(flt)
        return lambda h: matches(h.metadata or {}, spec)
    raise InvalidInputError(
        f"filter is a dict of metadata conditions or a function of a Document, got {type(flt).__name__}"
    )


def filtered_hits(
    search: Callable[[int], list[Hit]], k: int, keep: Callable[[Hit], bool] | None, max_candidates: int | None
) -> list[Hit]:
    """The first ``k`` hits that ``keep`` passes (all hits when ``keep`` is
    None), from ``search(n)`` (the ``n`` best) with ``n`` growing fourfold
    from ``4 * k`` until enough pass, the search returns fewer than asked
    (there are no more), or ``max_candidates`` is reached."""
    if keep is None:
        return search(k)[:k]
    n = max(4 * k, 32)
    while True:
        if max_candidates is not None:
            n = min(n, max_candidates)
        hits = search(n)
        kept = [h for h in hits if keep(h)]
        if len(kept) >= k or len(hits) < n or (max_candidates is not None and n >= max_candidates):
            return kept[:k]
        n *= 4


def mmr(query: np.ndarray, hits: Sequence[Hit], vectors: Sequence[np.ndarray], k: int, lambda_mult: float) -> list[Hit]:
    """``k`` of ``hits`` by maximal marginal relevance (LangChain's
    ``maximal_marginal_relevance`` over the candidates' vectors):
    ``lambda_mult`` 1 is relevance alone, 0 diversity alone."""
    if not hits:
        return []
    # LangChain types the candidates list[list[float]]; it takes arrays (it stacks them with numpy), and
    # float32 arrays keep its arithmetic in float32, as it always was here
    candidates = cast("list[list[float]]", [np.asarray(v, np.float32) for v in vectors])
    chosen = maximal_marginal_relevance(np.asarray(query, np.float32), candidates, lambda_mult=lambda_mult, k=k)
    return [hits[i] for i in chosen]


def check_mmr_args(k: Any, fetch_k: Any, lambda_mult: Any) -> None:
    """``k`` and ``fetch_k`` positive ints, ``lambda_mult`` a number in [0, 1]; else InvalidInputError."""
    for name, value in (("k", k), ("fetch_k", fetch_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInputError(f"{name} must be a positive int, got {value!r}")
    if isinstance(lambda_mult, bool) or not isinstance(lambda_mult, (int, float)) or not 0 <= lambda_mult <= 1:
        raise InvalidInputError(f"lambda_mult must be a number in [0, 1], got {lambda_mult!r}")


def record_use(store: Any, ns: str, hits: Sequence[Hit], record_access: bool | None) -> None:
    """Count an access on ``hits`` as ``search(record_access=...)`` would
    have: ``True`` all of them; ``None`` per the store's policy
    (``scoring.record_access`` for hot and warm hits, ``record_access_cold``
    for cold ones); ``False`` none."""
    if record_access is False or not hits:
        return
    if record_access is None:
        scoring = store.policy.scoring
        hits = [h for h in hits if (scoring.record_access_cold if h.memory.tier == "cold" else scoring.record_access)]
    if hits:
        store.touch(ns, [h.id for h in hits])

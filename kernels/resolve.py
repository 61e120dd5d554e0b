"""Query-time resolution: among a search's hits, the newer of two statements
that answer the query about as well ranks first.

Pure: arrays in, an order out. Nothing is retired; the caller reorders its
hits and says in each explanation which hit moved before which.
"""

import numpy as np
from numba import njit


@njit(inline="always", cache=True)
def _share_tag(tags, a, b):
    """Whether rows ``a`` and ``b`` of ``tags`` (ids padded with -1) share an id."""
    for x in range(tags.shape[1]):
        ta = tags[a, x]
        if ta < 0:
            break
        for y in range(tags.shape[1]):
            tb = tags[b, y]
            if tb < 0:
                break
            if ta == tb:
                return True
    return False


@njit(inline="always", cache=True)
def _replaces(j, i, sims, created, conf, types, tags, rows, margin, tag_margin, min_gap, conf_margin):
    """Whether hit ``j`` is taken as a newer statement of what hit ``i`` says."""
    if types[j] != types[i] or created[j] - created[i] < min_gap or conf[j] < conf[i] - conf_margin:
        return False
    shared = _share_tag(tags, rows[j], rows[i])
    if not shared and tags.shape[1] > 0 and tags[rows[j], 0] >= 0 and tags[rows[i], 0] >= 0:
        return False  # both tagged, no tag in common: the caller said they are about different things
    m = tag_margin if tag_margin >= margin and shared else margin
    return m >= 0.0 and sims[j] >= sims[i] - m


@njit(nogil=True, cache=True)
def resolve_rows(sims, created, conf, types, tags, rows, margin, tag_margin, min_gap, conf_margin):
    """:func:`resolve_order` with each hit's tags in row ``rows[j]`` of
    ``tags`` (the rerank kernel passes the hot tier's whole tag table)."""
    m = sims.shape[0]
    order = np.empty(m, np.int64)
    before = np.full(m, -1, np.int64)
    n = 0
    for j in range(m):
        at = n
        for p in range(n):
            if _replaces(j, order[p], sims, created, conf, types, tags, rows, margin, tag_margin, min_gap, conf_margin):
                at = p
                break
        for p in range(n, at, -1):
            order[p] = order[p - 1]
        order[at] = j
        if at < n:
            before[j] = order[at + 1]
        n += 1
    return order, before


@njit(nogil=True, cache=True)
def resolve_order(sims, created, conf, types, tags, margin, tag_margin, min_gap, conf_margin):
    """The hits' order after resolution, and what each moved before.

    Hits ``0..m-1`` come best first. sims: cosine to the query; created:
    creation time (seconds); conf: current confidence [0, 1]; types: type
    index; tags: int32 ``(m, w)`` tag ids padded with -1; margin /
    tag_margin: similarity margins ([0, 1]; negative: off; tag_margin
    applies when the two share a tag and is at least ``margin``); min_gap:
    seconds; conf_margin: [0, 1].

    Hit ``j`` *replaces* an older hit ``i`` when both have the same type,
    ``created[j] - created[i] >= min_gap``, ``conf[j] >= conf[i] - conf_margin``,
    they do not both carry tags without one in common (tags veto, as for
    automatic supersession), and ``sims[j] >= sims[i] - margin``
    (``tag_margin`` if they share a tag).
    Hits are placed in rank order, each just before the first placed hit it
    replaces, else last. Returns ``(order, before)``: int64 hit indices in
    their new order, and for each hit the index of the hit it was placed
    before, or -1 where it kept its place."""
    return resolve_rows(
        sims, created, conf, types, tags, np.arange(sims.shape[0]), margin, tag_margin, min_gap, conf_margin
    )

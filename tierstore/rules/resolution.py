"""What supersession and query-time resolution do to a search's hits.

Two rules, applied after the fused score (issue 27):

* **a mark ranks at once**: a superseded memory (its per-memory TTL is 0,
  which every mark's damping sets) scores ``superseded_factor`` times its
  fused score (in the kernel), and is placed after the memory that
  superseded it whenever both are hits (:func:`order_marked`);
* **resolution**: among the hits, a newer statement of the same type that
  answers the query about as well (policy ``supersession.resolve_margin``)
  is placed before the older (:func:`kernels.resolve.resolve_order`; the hot
  tier's kernel does it in place, :func:`resolve_hits` for merged hits).

Nothing is retired by either: the older memory stays a hit, and its
explanation says why it moved.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tierstore.kernels import columns as C
from tierstore.kernels import resolve_order
from tierstore.records import Hit
from tierstore.rules import supersession
from tierstore.rules.scoring import CompiledPolicy


def marked_flags(top: Sequence[tuple[Any, ...]], ranked: Any, result: Sequence[Hit]) -> list[bool]:
    """Whether each of ``result`` (the hits of the merge entries ``top``, in
    any order) is superseded (its per-memory TTL is 0), without building its
    Memory: a hot hit's TTL from the kernel's columns, a warm or cold one's
    from its catalog row."""
    flag = {
        m[4].id: (ranked.rf[C.R_TTL_OVERRIDE, m[3]] == 0.0 if m[2] == 0 else m[5].row.ttl_seconds == 0.0) for m in top
    }
    return [bool(flag[h.id]) for h in result]


def kernel_moves(ranked: Any, hits: Sequence[Hit]) -> dict[str, str]:
    """What the hot kernel's resolution moved: ``{id: id of the hit it was
    placed before}``, read off ``R_BEFORE`` (``hits``: in the kernel's
    column order)."""
    slots = ranked.ri[C.R_SLOT].tolist()
    id_of = dict(zip(slots, (h.id for h in hits)))
    return {id_of[s]: id_of[b] for s, b in zip(slots, ranked.ri[C.R_BEFORE].tolist()) if b >= 0}


def resolve_hits(cp: CompiledPolicy, hits: list[Hit], sims: Sequence[float]) -> tuple[list[Hit], dict[str, str]]:
    """``hits`` (best first; ``sims``: each one's cosine to the query) in the
    order resolution gives, and ``{id: id of the hit it was placed before}``."""
    m = len(hits)
    if not cp.resolves or m < 2:
        return hits, {}
    mems = [h.memory for h in hits]
    type_ids: dict[str, int] = {}
    tag_ids: dict[str, int] = {}
    width = max(len(x.tags) for x in mems)
    tags = np.full((m, width), -1, np.int32)
    for j, x in enumerate(mems):
        for w, t in enumerate(x.tags):
            tags[j, w] = tag_ids.setdefault(t, len(tag_ids))
    order, before = resolve_order(
        np.asarray(sims, np.float64),
        np.array([x.created_at for x in mems], np.float64),
        np.array([x.confidence for x in mems], np.float64),
        np.array([type_ids.setdefault(x.memory_type, len(type_ids)) for x in mems], np.int64),
        tags,
        cp.resolve_margin,
        cp.resolve_tag_margin,
        cp.resolve_min_gap,
        cp.resolve_conf_margin,
    )
    moved = {hits[j].id: hits[b].id for j, b in enumerate(before.tolist()) if b >= 0}
    return [hits[j] for j in order.tolist()], moved


def order_marked(catalog: Any, ns: str, hits: list[Hit], marked: Sequence[bool]) -> list[Hit]:
    """``hits`` with each superseded one (``marked``: a flag per hit) placed
    right after the memory that superseded it, where that one is a hit and
    ranks lower. Reads the marks from the catalog only when a marked hit
    ranks above an unmarked one (else no successor can be below it)."""
    first_marked = next((i for i, f in enumerate(marked) if f), None)
    if first_marked is None or all(marked[first_marked:]):
        return hits
    ids = [h.id for h, f in zip(hits, marked) if f]
    by = {
        mid: info.superseded_by
        for mid, info in supersession.marks_of(catalog, ns, ids).items()
        if info.superseded_by is not None
    }
    out = list(hits)
    for _ in range(len(out)):  # a chain (a by b by c) settles in at most len(out) passes
        changed = False
        pos = {h.id: i for i, h in enumerate(out)}
        for old_id, new_id in by.items():
            i, j = pos.get(old_id), pos.get(new_id)
            if i is not None and j is not None and i < j:
                out.insert(j, out.pop(i))  # after new_id, which moved up one place
                pos = {h.id: p for p, h in enumerate(out)}
                changed = True
        if not changed:
            break
    return out


def annotate_resolution(hits: Sequence[Hit], moved: dict[str, str]) -> None:
    """Say in the explanations of explained ``hits`` what resolution moved:
    ``moved`` maps a hit's id to the id of the older hit it was placed before."""
    from dataclasses import replace

    after = {old: new for new, old in moved.items()}
    for h in hits:
        if h.explain is None:
            continue
        notes = []
        if h.id in moved:
            notes.append(
                f"placed before {moved[h.id]}: an older statement of the same type that answers about as"
                " well (policy supersession.resolve_margin)"
            )
        if h.id in after:
            notes.append(
                f"ranked after {after[h.id]}: a newer statement of the same type that answers about as"
                " well (policy supersession.resolve_margin)"
            )
        if notes:
            h.set_explain(replace(h.explain, resolution="; ".join(notes)))


_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset(
    """a an the is are was were be been being am at in on of for to from by with and or but not no
now still also just then than that this these those it its he she they them his her their my your our i you we me
him us do does did has have had will would can could should may might very really so as into about over after
before since until while""".split()
)


def content_words(text: str) -> frozenset[str]:
    """The words of ``text`` that carry content: lower case, possessive 's
    dropped, without the small function words of :data:`_STOP`."""
    out = set()
    for w in _WORD.findall(text.lower()):
        if w == "s" or w in _STOP:
            continue
        out.add(w)
    return frozenset(out)


def same_wording(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two statements share their subject and relation wording: at
    least two content words in common, half the shorter one's."""
    shared = len(a & b)
    return shared >= 2 and 2 * shared >= min(len(a), len(b))


def resolve_by_wording(cp: CompiledPolicy, hits: list[Hit], sims: dict[str, float]) -> tuple[list[Hit], dict[str, str]]:
    """A second pass of resolution with the wider margin
    ``supersession.resolve_margin_same_wording``, for pairs whose texts share
    their wording (:func:`same_wording`): the differing words are the value."""
    margin = cp.resolve_word_margin
    if margin < 0 or len(hits) < 2:
        return hits, {}
    mems = [h.memory for h in hits]
    words = [content_words(x.content) for x in mems]
    gap, conf_margin = cp.resolve_min_gap, cp.resolve_conf_margin

    def replaces(j: int, i: int) -> bool:
        a, b = mems[j], mems[i]
        if a.tags and b.tags and not set(a.tags) & set(b.tags):
            return False  # both tagged, none in common: about different things
        return (
            a.memory_type == b.memory_type
            and a.created_at - b.created_at >= gap
            and a.confidence >= b.confidence - conf_margin
            and sims[hits[j].id] >= sims[hits[i].id] - margin
            and same_wording(words[j], words[i])
        )

    placed: list[int] = []
    moved: dict[str, str] = {}
    for j in range(len(hits)):
        at = next((p for p, i in enumerate(placed) if replaces(j, i)), None)
        if at is None:
            placed.append(j)
        else:
            moved[hits[j].id] = hits[placed[at]].id
            placed.insert(at, j)
    return [hits[j] for j in placed], moved

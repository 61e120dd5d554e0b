"""Query-time resolution that reaches beyond the top k, replayed on suites g and i (issue 27).

    .venv/bin/python benchmarks/resolution_beyond_k.py --rule gated --suites i,g --json OUT

Resolution today reorders a search's k hits: a newer statement of the same
type within the margin goes before an older one. A replaced value that ranks
sixth or lower (an archived live value with its use factors at their floor,
under hot memories of the same person) is never among them. This asks what
happens when resolution may pull such a statement into the k.

Each search of the suites (``TierStore.search`` wrapped, the default policy,
MiniLM) runs as it does, then a second search for ``4k`` hits
(``record_access=False, explain=True``) gives the pool. For each of the k
hits in order, the newest pool hit beyond the k that would replace it (the
resolution kernel's test: same type, at least ``resolve_min_gap`` newer,
confidence within the margin, the tag veto, similarity within
``resolve_margin``, ``resolve_margin_shared_tag`` when they share a tag) is
placed just before it and the list is cut to k. Rules:

* ``open``: that alone;
* ``gated``: only when the pulled statement is at least as similar to the
  query as the hit it pushes out of the k;
* ``gated-untagged``: the gate for every pair but two that share a tag.

A screening replay, not the mechanism: the accesses the search records are
its own hits', the pool is a second search's. Prints supersession_rows.py's
rows (``--render`` there renders the JSON), then how many hits were pulled.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RULES = ("open", "gated", "gated-untagged")


def pulled_up(store: Any, hits: list[Any], pool: list[Any], k: int, rule: str, count: dict[str, int]) -> list[Any]:
    """``hits`` with newer statements from ``pool`` beyond them placed before the hits they replace."""
    cp = store.engine.compiled_policy
    margin, tag_margin = cp.resolve_margin, cp.resolve_tag_margin
    if margin < 0 and tag_margin < 0:
        return hits
    sim = {h.id: h.explain.raw["similarity"] for h in pool}
    top = {h.id for h in hits}
    rest = [h for h in pool if h.id not in top]
    used: set[str] = set()
    out: list[Any] = []
    for h in hits:
        a, best = h.memory, None
        for j in rest if h.id in sim else ():
            b = j.memory
            if j.id in used or b.memory_type != a.memory_type or b.created_at - a.created_at < cp.resolve_min_gap:
                continue
            if b.confidence < a.confidence - cp.resolve_conf_margin:
                continue
            shared = bool(set(a.tags) & set(b.tags))
            if a.tags and b.tags and not shared:
                continue  # both tagged, none in common: about different things
            m = tag_margin if shared and tag_margin >= margin else margin
            if m < 0 or sim[j.id] < sim[h.id] - m:
                continue
            if rule != "open" and not (rule == "gated-untagged" and shared):
                out_at = len(hits) - 1 - count["pulled_here"]  # the hit this pull pushes out of the k
                if out_at < 0 or hits[out_at].id not in sim or sim[j.id] < sim[hits[out_at].id]:
                    continue
            if best is None or b.created_at > best.memory.created_at:
                best = j
        if best is not None:
            used.add(best.id)
            out.append(best)
            count["pulled_here"] += 1
            count["pulled"] += 1
        out.append(h)
    return out[:k]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rule", choices=RULES, required=True)
    ap.add_argument("--suites", default="i,g")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import supersession_rows

    from tierstore.store import TierStore

    plain = TierStore.search
    count = {"searches": 0, "pulled": 0, "pulled_here": 0}

    def search(self: TierStore, ns: str, query: Any, *, k: int = 5, **kw: Any) -> list[Any]:
        hits = plain(self, ns, query, k=k, **kw)
        if kw.get("record_access") is False or kw.get("explain") or not hits:
            return hits
        count["searches"] += 1
        count["pulled_here"] = 0
        rest = {x: v for x, v in kw.items() if x not in ("record_access", "explain")}
        pool = plain(self, ns, query, k=4 * k, record_access=False, explain=True, **rest)
        return pulled_up(self, hits, pool, k, args.rule, count)

    TierStore.search = search  # type: ignore[method-assign]
    only = str(next(i for i, v in enumerate(supersession_rows.VARIANTS) if v[1] is None))  # the default policy
    rc = supersession_rows.main(
        ["--suites", args.suites, "--only", only] + (["--json", args.json] if args.json else [])
    )
    print(f"rule {args.rule}: searches {count['searches']}, hits pulled {count['pulled']}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

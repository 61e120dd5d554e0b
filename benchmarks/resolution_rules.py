"""Rules for query-time resolution tried on suite i's hits, every row printed.

    .venv/bin/python benchmarks/resolution_rules.py [--households 30] [--json OUT]

Issue 27 asks that, among a search's hits, the newest value of a replaced
statement come first and nothing still true be pushed aside. The default
(``supersession.resolve_margin`` 0.1) leaves suite i's drift stale-hit@1 at
0.137; a wider margin alone (0.15) pushes newer statements about *other*
relations first. This script asks whether a second signal separates "the new
value of this relation" from "another relation of the same subject": the two
statements' similarity to *each other*.

It runs suite i once per variant (drift and safety) with the default policy,
keeps each end-of-period question's top 5 as the store returned them, and
replays candidate rules on them: a hit ``j`` created at least an hour after
hit ``i`` of the same type is placed before it when the rule holds (the
same insertion the resolution kernel does). Rules:

* ``pair cosine ≥ G within M``: ``sim_j ≥ sim_i − M`` and the two statements'
  exact cosine ≥ G;
* the same with the cosine estimated from the statements' 1-bit sign codes
  (``cos(π · hamming / d)``: what a hot tier could keep for 48 bytes a memory);
* ``sliding``: ``sim_j ≥ sim_i − slope · max(0, cosine − G)``;
* ``+ wording``: also share their subject and relation wording
  (:func:`tierstore.rules.resolution.same_wording`).

Columns: suite i's metrics (:func:`tierstore.bench.relations.metrics`), and
live@1 split into the questions whose relation changed (where stale@1 is
counted) and the rest. A rule that lowers stale@1 by placing another
relation's newer statement first shows as a lower ``live@1 rest``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

Hit = tuple[
    str, float, float, str, str, frozenset[str]
]  # id, similarity to the query, created (s), type, content, the question's content words
Rule = Callable[[Hit, Hit], bool]


def replay(hits: list[Hit], rule: Rule) -> list[str]:
    """``hits`` (best first) reordered: each placed before the first placed hit it replaces."""
    placed: list[int] = []
    for j in range(len(hits)):
        at = next((p for p, i in enumerate(placed) if rule(hits[j], hits[i])), None)
        placed.append(j) if at is None else placed.insert(at, j)
    return [hits[j][0] for j in placed]


def rules(
    cos: Callable[[str, str], float],
    est: Callable[[str, str], float],
    judges: list[tuple[str, Callable[[str, str], float]]] | None = None,
) -> list[tuple[str, Rule | None]]:
    from tierstore.rules.resolution import content_words, same_wording

    def newer(a: Hit, b: Hit) -> bool:
        return a[3] == b[3] and a[2] - b[2] >= 3600.0

    def gate(m: float, g: float, f: Callable[[str, str], float]) -> Rule:
        return lambda a, b: newer(a, b) and a[1] >= b[1] - m and f(a[4], b[4]) >= g

    def sliding(g: float, slope: float) -> Rule:
        return lambda a, b: newer(a, b) and a[1] >= b[1] - slope * max(0.0, cos(a[4], b[4]) - g)

    def worded(m: float, g: float) -> Rule:
        return lambda a, b: gate(m, g, cos)(a, b) and same_wording(content_words(a[4]), content_words(b[4]))

    out: list[tuple[str, Rule | None]] = [("the default (no second rule)", None)]
    out.append(("margin 0.15, no pair test", lambda a, b: newer(a, b) and a[1] >= b[1] - 0.15))
    for m, g in ((0.3, 0.55), (0.3, 0.6), (0.3, 0.65), (0.3, 0.7), (0.2, 0.65)):
        out.append((f"pair cosine >= {g} within {m}", gate(m, g, cos)))
        out.append((f"pair cosine >= {g} within {m}, sign codes", gate(m, g, est)))
    for g, slope in ((0.45, 1.0), (0.5, 1.0), (0.5, 1.5), (0.55, 1.0)):
        out.append((f"sliding from {g}, slope {slope}", sliding(g, slope)))
    out.append(("pair cosine >= 0.55 within 0.3 + wording", worded(0.3, 0.55)))

    def names_older(a: Hit, b: Hit) -> bool:
        # the question names a word of the older statement that the newer lacks, and none of the newer's own
        wa, wb = content_words(a[4]), content_words(b[4])
        return bool(a[5] & (wb - wa)) and not a[5] & (wa - wb)

    def unless_named(m: float) -> Rule:
        return lambda a, b: newer(a, b) and a[1] >= b[1] - m and not names_older(a, b)

    def unless_named_gate(m: float, g: float) -> Rule:
        return lambda a, b: unless_named(m)(a, b) and cos(a[4], b[4]) >= g

    def named_or_margin(m: float) -> Rule:
        # default margin always; the wider one only when the question names neither statement's own words
        def rule(a: Hit, b: Hit) -> bool:
            if not newer(a, b):
                return False
            wa, wb = content_words(a[4]), content_words(b[4])
            own = bool(a[5] & (wb - wa)) or bool(a[5] & (wa - wb))
            return a[1] >= b[1] - (0.1 if own else m)

        return rule

    for m in (0.1, 0.15, 0.2, 0.3):
        out.append((f"margin {m} unless the question names the older's own words", unless_named(m)))
    for m, g in ((0.3, 0.5), (0.3, 0.6), (0.2, 0.5)):
        out.append((f"margin {m}, pair cosine >= {g}, unless named", unless_named_gate(m, g)))
    for m in (0.15, 0.2, 0.3):
        out.append((f"margin {m} when the question names neither's own words, else 0.1", named_or_margin(m)))
    for name, judge in judges or []:
        for p in (0.5, 0.7, 0.9):
            out.append(
                (
                    f"{name} >= {p} within 0.3",
                    lambda a, b, p=p, j=judge: newer(a, b) and a[1] >= b[1] - 0.3 and j(a[4], b[4]) >= p,
                )
            )
    return out


def trained_judges(vec: Callable[[str], np.ndarray]) -> list[tuple[str, Callable[[str, str], float]]]:
    """Fifth round: the judges of ``relation_judge.py`` trained on every generated relation (none of
    suite i's), each a probability that two statements give the same relation another value."""
    import relation_judge as rj

    train = rj.pairs(sorted(rj.REL), 8000, 0)
    gen = rj.embed_vectors([t for a, b, _ in train for t in (a, b)])
    y = np.array([p[2] for p in train], float)
    out = []
    for judge in rj.JUDGES[1:]:
        X = rj.features(train, gen, judge)
        mu, sd = X.mean(0), X.std(0) + 1e-6
        w, b = rj.fit_logistic((X - mu) / sd, y)

        def prob(a: str, c: str, judge: str = judge, mu: Any = mu, sd: Any = sd, w: Any = w, b: float = b) -> float:
            x = rj.features([(a, c, 0)], {a: vec(a), c: vec(c)}, judge)[0]
            return float(1.0 / (1.0 + np.exp(-((x - mu) / sd @ w + b))))

        out.append((f"learned judge ({judge})", prob))
    return out


def variant_rows(drift: bool, households: int, cfg: Any, judge: bool = False) -> list[dict[str, Any]]:
    """Suite i's variant (drift, or the safety variant) run once, every rule replayed on its hits."""
    from tierstore.bench.relations import DEFAULT_SEED, metrics, store_rankings, workload_vectors
    from tierstore.bench.relations_workload import relations_workload
    from tierstore.kernels import sign_codes
    from tierstore.rules.resolution import content_words

    out_rows: list[dict[str, Any]] = []
    variant = "drift" if drift else "safety"
    wl = relations_workload(households, 90, DEFAULT_SEED, drift=drift, hints="none")
    vec = workload_vectors(wl, "auto", progress=cfg.progress)
    run = store_rankings(wl, vec, cfg)
    by_store_id = {run.alias.get(m.id, m.id): m for m in wl.mems}
    codes: dict[str, np.ndarray] = {}

    def code(t: str) -> np.ndarray:
        if t not in codes:
            codes[t] = sign_codes(np.asarray(vec(t), np.float32)[None])[0]
        return codes[t]

    def cos(a: str, b: str) -> float:
        return float(np.dot(vec(a), vec(b)))

    def est(a: str, b: str) -> float:
        h = sum(bin(int(x) ^ int(y)).count("1") for x, y in zip(code(a), code(b)))
        return float(np.cos(np.pi * h / 384))

    hits: dict[str, list[Hit]] = {}
    for q in wl.questions:
        if q.phase != "end" or q.id not in run.rankings:
            continue
        qv = vec(q.text)
        qw = content_words(q.text)
        hits[q.id] = [
            (i, float(np.dot(qv, vec(m.content))), m.t, m.memory_type, m.content, qw)
            for i in run.rankings[q.id]
            for m in (by_store_id[i],)
        ]
    changed = {q.id for q in wl.questions if q.phase == "end" and q.kind == "current" and q.stale}
    for name, rule in rules(cos, est, trained_judges(vec) if judge else None):
        ranked = dict(run.rankings)
        if rule is not None:
            ranked.update({qid: replay(h, rule) for qid, h in hits.items()})
        row = metrics(wl, ranked, None, run.state, run.alias)
        live_first = {
            q.id: float(bool(ranked.get(q.id)) and ranked[q.id][0] in {run.alias.get(i, i) for g in q.live for i in g})
            for q in wl.questions
            if q.id in hits and q.kind != "history"
        }
        split = {
            "live@1 changed": np.mean([v for i, v in live_first.items() if i in changed]) if changed else np.nan,
            "live@1 rest": np.mean([v for i, v in live_first.items() if i not in changed]),
        }
        r = {"variant": variant, "rule": name, **{k: row[k] for k in ("stale@1", "live@1", "live@5")}, **split}
        out_rows.append(r)
        print(
            f"{variant:6s} {name:48s} "
            + " ".join(f"{k.replace(' ', '_')}={float(v):.3f}" for k, v in r.items() if k not in ("variant", "rule")),
            flush=True,
        )
    return out_rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--households", type=int, default=30)
    ap.add_argument("--json", default=None)
    ap.add_argument("--judge", action="store_true", help="also the learned judges of relation_judge.py (fifth round)")
    args = ap.parse_args(argv)
    if args.households < 1:
        ap.error("--households: at least 1")

    from tierstore.bench.common import BenchConfig

    cfg = BenchConfig(progress=sys.stderr.isatty())
    out_rows = [r for drift in (True, False) for r in variant_rows(drift, args.households, cfg, args.judge)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out_rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

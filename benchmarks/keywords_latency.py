"""Issue 28: what the keyword signal costs a search, A/B in one process.

    .venv/bin/python benchmarks/keywords_latency.py [--sizes 1000,10000] [--rounds 3] [--cold 0.0]

One store per size: a namespace of N memories whose texts are chat-log turns
(tierstore/bench/chatlog.py: names, places, dates among small talk) and
whose vectors are clustered unit vectors (384 dimensions; the embedding is
not what is measured). With ``--cold F`` a share F of them is archived
first (a sweep), so keyword candidates are read from the cold tier too.

Per size, for each of the questions about those turns, interleaved in a
shuffled order, each call timed on its own (record_access=False, k=10):

* A: ``search(ns, vector)`` — today's search (the vector alone);
* B: ``search(ns, vector, text=question)`` — the hybrid search;
* K: ``keyword_candidates`` alone (the FTS5 query).

Prints the medians (p50) and p90 of each, the ratio B/A, and the keyword
index's bytes per memory (SQLite's dbstat over ``memory_text``'s shadow
tables) beside the vector's (4·dim in the catalog, and the hnswlib graph).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from conftest import clustered_vectors  # noqa: E402

from tierstore import ManualClock, Policy, TierStore  # noqa: E402
from tierstore.bench.chatlog import chatlog_workload  # noqa: E402
from tierstore.storage import keyword_index  # noqa: E402

T0 = 1_700_000_000.0


# every turn its own memory (no dedupe of repeated small talk, no automatic supersession of similar vectors)
POLICY = {"dedupe": "off", "types": {"fact": {"supersede_above": "off"}}}


def build(path: Path, n: int, cold: float, seed: int = 0, embedder: str | None = None):
    wl = chatlog_workload(users=max(1, n // 600 + 1), days=60, seed=7)
    turns = wl.turns[:n]
    assert len(turns) == n, f"the workload has {len(wl.turns)} turns, fewer than {n}"
    have = {t.id for t in turns}
    questions = [q for q in wl.questions if all(i in have for g in q.evidence for i in g)]
    vecs = clustered_vectors(n, 384, seed=seed)
    clock = ManualClock(T0)
    store = TierStore.open(path, dim=384, clock=clock, policy=Policy.from_dict(POLICY), embedder=embedder)
    ncold = int(cold * n)
    for s in range(0, n, 500):
        store.add_batch(
            "ns",
            [
                {
                    "content": t.text,
                    "embedding": vecs[i],
                    "id": t.id,
                    "memory_type": "conversation" if i < ncold else "fact",
                }
                for i, t in enumerate(turns[s : s + 500], start=s)
            ],
        )
    if ncold:
        clock.advance(2 * 3600)
        while store.sweep().remaining_due:
            pass
    qv = clustered_vectors(len(questions), 384, seed=seed + 1)
    return store, questions, qv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cold", type=float, default=0.0, help="share of the memories archived first")
    ap.add_argument("--max-questions", type=int, default=400)
    ap.add_argument(
        "--embedder",
        default=None,
        help="minilm: text queries, the question embedded in each call "
        '(A: search(ns, question, text="") = today\'s, embed + vector; B: search(ns, question))',
    )
    args = ap.parse_args()
    for n in [int(x) for x in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            store, questions, qv = build(Path(d) / "s", n, args.cold, embedder=args.embedder)
            by_text = args.embedder is not None
            questions = questions[: args.max_questions]
            try:
                tiers = store.stats().by_tier

                def search_a(i: int, q, store=store, qv=qv, by_text=by_text) -> None:
                    if by_text:
                        store.search("ns", q.text, k=10, record_access=False, text="")
                    else:
                        store.search("ns", qv[i], k=10, record_access=False)

                def search_b(i: int, q, store=store, qv=qv, by_text=by_text) -> None:
                    if by_text:
                        store.search("ns", q.text, k=10, record_access=False)
                    else:
                        store.search("ns", qv[i], k=10, record_access=False, text=q.text)

                for i, q in enumerate(questions[:30]):  # warm up
                    search_a(i, q)
                    search_b(i, q)
                tp = time.perf_counter_ns
                res: dict[str, list[int]] = {"A": [], "B": [], "K": []}
                rng = random.Random(0)
                for _ in range(args.rounds):
                    calls = [(i, kind) for i in range(len(questions)) for kind in res]
                    rng.shuffle(calls)
                    for i, kind in calls:
                        q = questions[i]
                        if kind == "A":
                            t = tp()
                            search_a(i, q)
                        elif kind == "B":
                            t = tp()
                            search_b(i, q)
                        else:
                            t = tp()
                            keyword_index.keyword_candidates(store.engine.catalog, "ns", q.text, 50)
                        res[kind].append(tp() - t)
                kw_bytes = keyword_index.index_bytes(store.engine.catalog)
                vec_bytes = 384 * 4
            finally:
                store.close()
        p50 = {k: float(np.median(v)) / 1e3 for k, v in res.items()}
        p90 = {k: float(np.percentile(v, 90)) / 1e3 for k, v in res.items()}
        print(
            f"N={n} ({dict(tiers)}; built in {time.perf_counter() - t0:.0f} s), {len(questions)} questions x "
            f"{args.rounds} rounds, shuffled"
        )
        a, b = (
            ("search(question, text='') ", "search(question)         ")
            if by_text
            else ("search(vector)           ", "search(vector, text=...)  ")
        )
        print(f"  A {a}: p50 {p50['A']:8.1f} us  p90 {p90['A']:8.1f} us")
        print(f"  B {b}: p50 {p50['B']:8.1f} us  p90 {p90['B']:8.1f} us")
        print(f"  K keyword_candidates(50):    p50 {p50['K']:8.1f} us  p90 {p90['K']:8.1f} us")
        print(f"  ratio B/A p50 {p50['B'] / p50['A']:.2f}, p90 {p90['B'] / p90['A']:.2f}")
        print(
            f"  keyword index {kw_bytes} bytes = {kw_bytes / n:.1f} B/memory; the vector {vec_bytes} B/memory "
            f"(float32 x 384) in the catalog, plus the hnswlib graph above 2048"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 28: the keyword signal's quality on two conversational workloads.

    python benchmarks/keywords_quality.py --workload h --json h.json        # suite h's logged conversations
    python benchmarks/keywords_quality.py --workload chat --json chat.json  # the chat log of names (bench/chatlog.py)

Rows, on the same MiniLM vectors (the hashing embedder without the embed extra):

* without forgetting (every turn said so far, exact): cosine alone; BM25
  alone (SQLite FTS5 over the same turns, the store's query: words, stop
  words dropped, OR); the fused relevance ``(1 - w)·cos + w·bm25/best`` at
  several ``w``; reciprocal-rank fusion (k = 60) of the two lists;
* real TierStore replays (suite h's replay: nightly sweeps, forgetting on),
  turns stored as ``conversation``: the default policy searched by the
  vector alone (today's search), and searched with the question's text
  (``search(..., text=)``) at several ``scoring.keyword_weight``.

Metric: evidence recall@10 (any evidence turn in the top 10), per category,
evidence@1 and stale-hit@1 for changed values (Score.row).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tierstore.bench.chatlog import chatlog_workload  # noqa: E402
from tierstore.bench.common import BenchConfig  # noqa: E402
from tierstore.bench.conversation import (  # noqa: E402
    Score,
    TierVariant,
    _stored_identity,
    conversation_workload,
    embed_conversations,
    embedder_label,
    score_plain,
    score_tierstore,
)
from tierstore.bench.forgetting import make_embedder  # noqa: E402
from tierstore.storage.keyword_index import fts_query, query_words  # noqa: E402


def plain_rows(wl, tv, qv, weights, k=10) -> list[Score]:
    """Cosine, BM25, fused and RRF over every turn said before each question (no forgetting)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize = 'porter unicode61')")
    conn.executemany("INSERT INTO t (rowid, content) VALUES (?, ?)", [(i, tr.text) for i, tr in enumerate(wl.turns)])
    user = np.array([tr.user for tr in wl.turns])
    when = np.array([tr.t for tr in wl.turns])
    stored = _stored_identity(wl)
    n_docs = len(wl.turns)
    df: dict[str, int] = {}

    def ideal(words: list[str]) -> float:
        """FTS5's BM25 of a document of average length holding each word once: the query's best possible."""
        total = 0.0
        for w in words:
            if w not in df:
                df[w] = conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", ('"' + w + '"',)).fetchone()[0]
            d = df[w]
            total += max(1e-6, np.log((n_docs - d + 0.5) / (d + 0.5)))
        return total

    scores = {"bm25": Score("BM25 alone (no forgetting)"), "rrf": Score("reciprocal-rank fusion, k=60 (no forgetting)")}
    for w in weights:
        scores[w] = Score(f"fused (1-w)·cos + w·bm25/best, w={w} (no forgetting)")
    for w in weights:
        scores[("ideal", w)] = Score(f"fused (1-w)·cos + w·min(1, bm25/ideal), w={w} (no forgetting)")
    for w in weights:
        scores[("floor", w)] = Score(f"fused (1-w)·cos + w·(bm25-floor)/(best-floor), w={w} (no forgetting)")
    by_user = {u: np.flatnonzero(user == u) for u in np.unique(user)}
    for j, q in enumerate(wl.questions):
        idx = by_user[q.user]
        idx = idx[when[idx] < q.t]
        cos = tv[idx] @ qv[j]
        pos = {int(i): p for p, i in enumerate(idx.tolist())}
        expr = fts_query(q.text)
        bm = np.zeros(idx.shape[0])
        if expr is not None:
            # BM25 over the user's turns said so far: FTS5 ranks all turns, filter to this user's past
            for rid, s in conn.execute("SELECT rowid, bm25(t) FROM t WHERE t MATCH ? ORDER BY rank", (expr,)):
                p = pos.get(rid)
                if p is not None:
                    bm[p] = -s
        ids = [wl.turns[int(i)].id for i in idx]
        order_bm = np.lexsort((np.arange(bm.shape[0]), -bm))
        scores["bm25"].record(q, [ids[o] for o in order_bm[:k] if bm[o] > 0], stored, k)
        order_cos = np.argsort(-cos, kind="stable")
        rank_cos = np.empty(len(ids))
        rank_cos[order_cos] = np.arange(len(ids))
        rank_bm = np.full(len(ids), np.inf)
        nz = [o for o in order_bm if bm[o] > 0]
        rank_bm[nz] = np.arange(len(nz))
        rrf = 1.0 / (60 + rank_cos + 1) + np.where(np.isinf(rank_bm), 0.0, 1.0 / (60 + rank_bm + 1))
        scores["rrf"].record(q, [ids[o] for o in np.argsort(-rrf, kind="stable")[:k]], stored, k)
        best = bm.max() if bm.size else 0.0
        kwn = bm / best if best > 0 else bm
        for w in weights:
            fused = (1 - w) * np.clip(cos, 0, 1) + w * kwn
            scores[w].record(q, [ids[o] for o in np.argsort(-fused, kind="stable")[:k]], stored, k)
        # the store's: the best 50 of the user's keyword matches; floor = the 50th when there were more
        matched = np.sort(bm[bm > 0])[::-1]
        floor = matched[49] if matched.shape[0] > 50 else 0.0
        kwf = np.where(bm > floor, (bm - floor) / (best - floor), 0.0) if best > floor else np.zeros_like(bm)
        for w in weights:
            fused = (1 - w) * np.clip(cos, 0, 1) + w * kwf
            scores[("floor", w)].record(q, [ids[o] for o in np.argsort(-fused, kind="stable")[:k]], stored, k)
        top = ideal(query_words(q.text)) if expr is not None else 0.0
        kwi = np.minimum(1.0, bm / top) if top > 0 else bm
        for w in weights:
            fused = (1 - w) * np.clip(cos, 0, 1) + w * kwi
            scores[("ideal", w)].record(q, [ids[o] for o in np.argsort(-fused, kind="stable")[:k]], stored, k)
    return list(scores.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=["h", "chat"], required=True)
    ap.add_argument("--users", type=int, default=30)
    ap.add_argument("--embedder", default="auto")
    ap.add_argument("--weights", default="0.3,0.5,0.6,0.8", help="keyword_weight values of the tierstore rows")
    ap.add_argument("--plain-weights", default="0.2,0.3,0.4,0.5,0.6,0.7,0.8")
    ap.add_argument("--no-tierstore", action="store_true")
    ap.add_argument("--no-baseline", action="store_true", help="leave out the vector-only TierStore row")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cache", type=Path, help="keep the vectors here (the same workload and embedder: not again)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.workload == "h":
        wl = conversation_workload(args.users, 60, seed=83)  # suite h's seed (cfg.seed 0 + 83)
    else:
        wl = chatlog_workload(args.users, 60, seed=1)
    emb = make_embedder(args.embedder)
    cache = None if args.cache is None else args.cache / f"{args.workload}-{args.users}-{embedder_label(emb)[:8]}.npz"
    if cache is not None and cache.exists():
        z = np.load(cache)
        tv, qv = z["tv"], z["qv"]
    else:
        tv, qv = embed_conversations(wl, emb, BenchConfig(progress=False))
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(cache, tv=tv, qv=qv)
    print(
        f"{args.workload}: {len(wl.turns)} turns, {len(wl.questions)} questions, embedder {embedder_label(emb)}, "
        f"embedded in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    scores = [score_plain(wl, tv, qv)]
    scores += plain_rows(wl, tv, qv, [float(w) for w in args.plain_weights.split(",")])
    for s in scores:
        r = s.row()
        print(f"  {r['scorer']}: recall@10 {r['recall_at_10']:.3f}", flush=True)
    if not args.no_tierstore:
        cfg = BenchConfig(progress=False)
        variants = [] if args.no_baseline else [TierVariant("tierstore, default policy, vector only (today's search)")]
        for w in args.weights.split(","):
            variants.append(
                TierVariant(
                    f"tierstore, default policy, text query, keyword_weight={w}",
                    policy={"scoring": {"keyword_weight": float(w)}},
                    text_query=True,
                )
            )
        for v in variants:
            s = score_tierstore(wl, tv, qv, cfg, v)
            scores.append(s)
            r = s.row()
            print(f"  {r['scorer']}: recall@10 {r['recall_at_10']:.3f} ({s.elapsed_s:.0f} s)", flush=True)
    rows = [s.row() for s in scores]
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "workload": args.workload,
                    "users": args.users,
                    "turns": len(wl.turns),
                    "questions": len(wl.questions),
                    "embedder": embedder_label(emb),
                    "rows": rows,
                },
                indent=1,
                default=str,
            )
        )
    cols = [
        "recall_at_10",
        "recall_at_10_current",
        "recall_at_10_current_mid",
        "recall_at_10_old",
        "recall_at_10_passing",
        "evidence_at_1_current",
        "stale_hit_at_1_current",
    ]
    print("| scorer | recall@10 | current | current day 30 | old | passing | current evidence@1 | stale-hit@1 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = ["n/a" if r.get(c) is None else f"{r[c]:.3f}" for c in cols]
        print(f"| {r['scorer']} | " + " | ".join(cells) + " |")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

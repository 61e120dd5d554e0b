"""(a) ``store.search`` against raw hnswlib ``knn_query``.

Same clustered vectors, same queries, k=10, ef=64, M=16, ef_construction=200.
The fairest baseline is ``knn_query`` on the store's own hot index
(``store.engine.hot.ensure(ns).index``): the difference is then exactly what the
store adds (validation, oversampled candidates, the fused rerank kernel,
hit snapshots). A separately built raw index is reported too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tierstore.bench.common import (
    DIM,
    EF,
    BenchConfig,
    K,
    Row,
    SuiteResult,
    add_in_batches,
    clustered_vectors,
    exact_topk,
    interleaved,
    open_store,
    queries_near,
    raw_index,
    timed,
    workdir,
)

TITLE = "store.search vs raw hnswlib knn_query"


def measure(
    n: int,
    cfg: BenchConfig,
    *,
    n_queries: int = 1000,
    rounds: int = 15,
    recall_queries: int = 200,
    with_record_access: bool = True,
) -> dict[str, Any]:
    """Build a store and a raw index of ``n`` clustered vectors and time the
    searches, interleaved. Returns medians (s per query), recalls, build times."""
    vecs = clustered_vectors(n, DIM, seed=cfg.seed + 1)
    queries = queries_near(vecs, n_queries, seed=cfg.seed + 2)
    out: dict[str, Any] = {"n": n}
    with workdir(cfg, "search") as d:
        store = open_store(d / "store")
        try:
            t_store, _ = timed(lambda: add_in_batches(store, "big", vecs, batch=20_000, label=f"(a) add {n}", cfg=cfg))
            hot = store.engine.hot.ensure("big")
            index = hot.index
            if index is None:
                raise RuntimeError(
                    f"{n} memories stayed below the store's exact threshold: no hnswlib index to compare"
                )
            t_raw, own = timed(lambda: raw_index(vecs))
            fns = {
                "tierstore_search": lambda i: store.search("big", queries[i], k=K, record_access=False),
                "knn_query_same_index": lambda i: index.knn_query(queries[i], k=K),
                "knn_query_own_index": lambda i: own.knn_query(queries[i], k=K),
            }
            if with_record_access:
                fns["tierstore_search_record_access"] = lambda i: store.search("big", queries[i], k=K)
            for f in fns.values():  # warm up: first calls pay for page faults and lazy set-up
                for i in range(20):
                    f(i)
            med = interleaved(fns, n_queries, rounds=rounds, label=f"(a) search {n}", cfg=cfg)
            rq = queries[:recall_queries]
            truth = [set(exact_topk(vecs, q, K).tolist()) for q in rq]
            r_store = np.mean(
                [
                    len(t & {int(h.id[1:]) for h in store.search("big", q, k=K, record_access=False)}) / K
                    for t, q in zip(truth, rq)
                ]
            )
            r_raw = np.mean([len(t & set(own.knn_query(q, k=K)[0][0].tolist())) / K for t, q in zip(truth, rq)])
            out.update(
                medians=med, recall_store=float(r_store), recall_raw=float(r_raw), add_s=t_store, raw_build_s=t_raw
            )
        finally:
            store.close()
    return out


def run(cfg: BenchConfig) -> SuiteResult:
    n = cfg.size("a.n", 100_000, 20_000)
    res = SuiteResult("a", TITLE)
    m = measure(n, cfg, n_queries=cfg.size("a.queries", 1000, 400), rounds=cfg.size("a.rounds", 15, 9))
    med = m["medians"]
    p = {"N": n, "k": K, "ef": EF, "dim": DIM}
    res.rows.append(
        Row(
            "a",
            "search, same index",
            "store.search",
            "knn_query (store's index)",
            med["tierstore_search"],
            med["knn_query_same_index"],
            "per query",
            p,
        )
    )
    res.rows.append(
        Row(
            "a",
            "search, own raw index",
            "store.search",
            "knn_query (separate index)",
            med["tierstore_search"],
            med["knn_query_own_index"],
            "per query",
            p,
        )
    )
    if "tierstore_search_record_access" in med:
        res.rows.append(
            Row(
                "a",
                "search + access recording",
                "store.search(record_access)",
                "knn_query (store's index)",
                med["tierstore_search_record_access"],
                med["knn_query_same_index"],
                "per query",
                p,
            )
        )
    res.extra.update(
        recall_at_10_store=m["recall_store"],
        recall_at_10_raw=m["recall_raw"],
        store_add_s=round(m["add_s"], 2),
        raw_build_s=round(m["raw_build_s"], 2),
    )
    res.notes.append(
        "store.search(record_access=False) asks hnswlib for max(k*4, 40) candidates at ef=64, then "
        "reranks; knn_query asks for k=10. Recall@10 is against exact inner-product top-10 (all "
        "memories fresh and equally confident, so score order = similarity order)."
    )
    return res

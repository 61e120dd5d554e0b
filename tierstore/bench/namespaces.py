"""(d) Many namespaces: tierstore's namespace-partitioned hot tier against one
global hnswlib index restricted to the namespace with a filter callable.

Each namespace (a user, an agent) holds ``per_ns`` memories; its vectors are
spread over the whole clustered space, as one person's memories are. A query
is about one namespace. tierstore searches that namespace's own hot space
(exact Numba search below 2048 memories); the baseline is the usual shortcut
of one shared index and ``knn_query(q, k, filter=lambda label: ns_of(label)
== ns)`` — hnswlib calls the Python filter for every node it visits.
"""

from __future__ import annotations

import gc

import numpy as np

from tierstore.bench.common import (
    DIM,
    EF,
    EF_CONSTRUCTION,
    BenchConfig,
    K,
    M,
    Row,
    SuiteResult,
    clustered_vectors,
    interleaved,
    open_store,
    raw_index,
    rss_bytes,
    timed,
    workdir,
)
from tierstore.progress import Progress

TITLE = "many namespaces vs one global hnswlib index with a filter"


def run(cfg: BenchConfig) -> SuiteResult:
    n_ns = cfg.size("d.namespaces", 10_000, 500)
    per = cfg.size("d.per_ns", 200, 200)
    n_queries = cfg.size("d.queries", 40, 60)
    rounds = cfg.size("d.rounds", 4, 6)
    n = n_ns * per
    res = SuiteResult("d", TITLE)
    vecs = clustered_vectors(n, DIM, seed=cfg.seed + 11)
    rng = np.random.default_rng(cfg.seed + 12)
    q_ns = rng.integers(0, n_ns, n_queries)
    base = vecs[q_ns * per + rng.integers(0, per, n_queries)]
    q = base + 0.05 * rng.normal(size=base.shape).astype(np.float32) / np.sqrt(DIM)
    queries = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)

    with workdir(cfg, "namespaces") as d:
        store = open_store(d / "store")
        try:
            gc.collect()
            rss0 = rss_bytes()

            def ingest() -> None:
                with Progress(n_ns, f"(d) add {n_ns}x{per}", enabled=cfg.progress) as bar:
                    for ns in range(n_ns):
                        lo = ns * per
                        store.add_batch(
                            f"u{ns}",
                            [
                                {"content": f"m{lo + i}", "embedding": vecs[lo + i], "id": f"m{lo + i}"}
                                for i in range(per)
                            ],
                        )
                        bar.update()

            t_store, _ = timed(ingest)
            rss_store = rss_bytes() - rss0
            gc.collect()
            rss1 = rss_bytes()
            t_index, index = timed(lambda: raw_index(vecs))
            rss_index = rss_bytes() - rss1

            failures = {"n": 0}

            def filtered(i: int):
                ns = int(q_ns[i])
                try:
                    return index.knn_query(queries[i], k=K, filter=lambda label: label // per == ns)
                except RuntimeError:  # hnswlib found fewer than k labels passing the filter
                    failures["n"] += 1
                    return None

            fns = {
                "tierstore_search": lambda i: store.search(f"u{int(q_ns[i])}", queries[i], k=K, record_access=False),
                "global_filtered_knn": filtered,
            }
            for i in range(min(3, n_queries)):
                for f in fns.values():
                    f(i)
            failures["n"] = 0
            med = interleaved(fns, n_queries, rounds=rounds, label=f"(d) search {n_ns} ns", cfg=cfg)

            # recall@10 against the exact top-10 within the namespace
            r_store, r_glob = [], []
            for i in range(min(n_queries, 40)):
                ns = int(q_ns[i])
                lo = ns * per
                s = vecs[lo : lo + per] @ queries[i]
                truth = set((lo + np.argsort(-s)[:K]).tolist())
                got = {int(h.id[1:]) for h in store.search(f"u{ns}", queries[i], k=K, record_access=False)}
                r_store.append(len(truth & got) / K)
                try:
                    labels = index.knn_query(queries[i], k=K, filter=lambda label, ns=ns: label // per == ns)[0][0]
                    r_glob.append(len(truth & set(labels.tolist())) / K)
                except RuntimeError:
                    r_glob.append(0.0)
        finally:
            store.close()

    p = {"namespaces": n_ns, "per_ns": per, "N": n, "k": K, "ef": EF}
    res.rows.append(
        Row(
            "d",
            "search one namespace",
            "store.search(ns)",
            "global knn_query(filter=ns)",
            med["tierstore_search"],
            med["global_filtered_knn"],
            "per query",
            p,
        )
    )
    res.rows.append(
        Row(
            "d",
            "build",
            "add_batch per namespace",
            "global add_items",
            t_store / n,
            t_index / n,
            "per memory",
            p,
            note="one run each, not interleaved",
        )
    )
    res.extra.update(
        recall_at_10_store=float(np.mean(r_store)),
        recall_at_10_global_filter=float(np.mean(r_glob)),
        filter_failures=failures["n"],
        store_ingest_s=round(t_store, 1),
        global_build_s=round(t_index, 1),
        store_rss_mb=round(rss_store / 2**20),
        global_index_rss_mb=round(rss_index / 2**20),
    )
    res.notes.append(
        f"global index: hnswlib ip, M={M}, ef_construction={EF_CONSTRUCTION}, ef={EF}, one index for all "
        f"{n} memories; the filter is a Python callable `label // {per} == ns` (hnswlib calls it per "
        "visited node, holding the GIL). tierstore: one hot space per namespace; with "
        f"{per} < 2048 memories each is searched exactly (Numba), so its recall is 1."
    )
    res.notes.append(
        "memory: RSS growth while ingesting (tierstore: vectors, columns, ids, strings of every "
        "namespace in the hot tier, plus SQLite page cache) and while building the global index "
        "(vectors + graph). tierstore also writes everything durably to its SQLite catalog; the "
        "raw index is in memory only."
    )
    return res

"""(c) ``store.search`` against LangChain's ``TimeWeightedVectorStoreRetriever``
(langchain-classic) on the same vectors.

How the vectors reach LangChain (nothing is re-embedded): see
:mod:`tierstore.bench.lcadapter` — memories are ``Document("m<i>")`` whose
vectors a lookup ``Embeddings`` returns; the vector store is an hnswlib index
with tierstore's parameters. The retriever keeps its defaults but ``k``:
``decay_rate=0.01``, ``search_kwargs={"k": 100}`` (it over-fetches 100 and
rescores them in Python, adding its ``k`` most recent memories), ``k=10``.
Both sides record an access on what they return (the retriever sets
``last_accessed_at`` on its results; ``store.search`` follows the default
policy, ``record_access=True``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tierstore.bench.common import (
    DIM,
    EF,
    BenchConfig,
    K,
    Row,
    SuiteResult,
    add_in_batches,
    clustered_vectors,
    interleaved,
    open_store,
    queries_near,
    require,
    timed,
    workdir,
)

TITLE = "store.search vs LangChain TimeWeightedVectorStoreRetriever"


def run(cfg: BenchConfig) -> SuiteResult:
    require("langchain_classic")
    require("langchain_core")
    from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
    from langchain_core.documents import Document

    from tierstore.bench.lcadapter import HnswVectorStore, LookupEmbeddings

    n = cfg.size("c.n", 100_000, 10_000)
    n_queries = cfg.size("c.queries", 600, 300)
    rounds = cfg.size("c.rounds", 10, 6)
    res = SuiteResult("c", TITLE)
    vecs = clustered_vectors(n, DIM, seed=cfg.seed + 31)
    queries = queries_near(vecs, n_queries, seed=cfg.seed + 32)

    emb = LookupEmbeddings(DIM)
    emb.register((f"m{i}" for i in range(n)), vecs)
    emb.register((f"q{j}" for j in range(n_queries)), queries)
    vs = HnswVectorStore(emb, n)
    retriever = TimeWeightedVectorStoreRetriever(vectorstore=vs, decay_rate=0.01, k=K)
    created = datetime.now() - timedelta(days=1)

    def lc_add() -> None:
        for s in range(0, n, 10_000):
            docs = [Document(page_content=f"m{i}") for i in range(s, min(n, s + 10_000))]
            retriever.add_documents(docs, current_time=created)

    t_lc, _ = timed(lc_add)
    with workdir(cfg, "langchain") as d:
        store = open_store(d / "store")
        try:
            t_store, _ = timed(
                lambda: add_in_batches(store, "mem", vecs, batch=10_000, cfg=cfg, label=f"(c) tierstore add {n}")
            )
            q_names = [f"q{j}" for j in range(n_queries)]
            fns = {
                "tierstore_search": lambda i: store.search("mem", queries[i], k=K),
                "langchain_tw_invoke": lambda i: retriever.invoke(q_names[i]),
                "adapter_search_100": lambda i: vs.similarity_search_with_relevance_scores(q_names[i], k=100),
            }
            for f in fns.values():
                for i in range(5):
                    f(i)
            med = interleaved(fns, n_queries, rounds=rounds, label=f"(c) search {n}", cfg=cfg)
        finally:
            store.close()

    p = {"N": n, "k": K, "ef": EF, "lc_fetch": 100}
    res.rows.append(
        Row(
            "c",
            "search",
            "store.search",
            "TW retriever.invoke",
            med["tierstore_search"],
            med["langchain_tw_invoke"],
            "per query",
            p,
        )
    )
    res.rows.append(
        Row(
            "c",
            "search vs LangChain's fetch alone",
            "store.search",
            "vectorstore fetch k=100",
            med["tierstore_search"],
            med["adapter_search_100"],
            "per query",
            p,
            note="the retriever's vector-store call alone, without its rescoring",
        )
    )
    res.rows.append(
        Row(
            "c",
            "ingest",
            "tierstore add_batch",
            "TW retriever.add_documents",
            t_store / n,
            t_lc / n,
            "per memory",
            {"N": n, "batch": 10_000},
            note="one run each",
        )
    )
    res.notes.append(
        "vectors fed through LookupEmbeddings (a dict from 'm<i>'/'q<j>' to the precomputed vector) "
        "into HnswVectorStore (hnswlib, same M/ef_construction/ef as tierstore); see "
        "tierstore/bench/lcadapter.py. Retriever defaults kept: decay_rate=0.01, "
        "search_kwargs={'k': 100}; k=10."
    )
    return res

"""(b) ``store.search`` against the seed's reference design: a Chroma
collection (cosine HNSW, embeddings given explicitly) and the article's fused
rerank in Python (§4.3: over-fetch ``top_k * 3`` non-archived memories,
recency ``0.5 ** (hours / 24)``, confidence, +0.2 per matching context tag,
weight). Same vectors, same metadata, same queries and context tags.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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
    add_in_batches,
    clustered_vectors,
    interleaved,
    open_store,
    queries_near,
    require,
    timed,
    workdir,
)
from tierstore.bench.seedref import SeedMemorySystem, seed_metadata

TITLE = "store.search vs the seed's Chroma + Python rerank (§4.3)"
TAGS = ["travel", "food", "work", "health", "family", "budget", "japan", "summer"]
T0 = 1_700_000_000.0


def memory_attrs(n: int, seed: int) -> tuple[np.ndarray, list[list[str]]]:
    """Confidence and tags per memory, shared by both sides."""
    rng = np.random.default_rng(seed)
    conf = np.round(rng.uniform(0.5, 1.0, n), 3)
    tags = [[TAGS[j] for j in rng.choice(len(TAGS), int(rng.integers(1, 4)), replace=False)] for _ in range(n)]
    return conf, tags


def run(cfg: BenchConfig) -> SuiteResult:
    require("chromadb")
    n = cfg.size("b.n", 100_000, 10_000)
    n_queries = cfg.size("b.queries", 100, 60)
    rounds = cfg.size("b.rounds", 5, 6)
    res = SuiteResult("b", TITLE)
    vecs = clustered_vectors(n, DIM, seed=cfg.seed + 21)
    queries = queries_near(vecs, n_queries, seed=cfg.seed + 22)
    conf, tags = memory_attrs(n, cfg.seed + 23)
    rng = np.random.default_rng(cfg.seed + 24)
    q_tags = [[TAGS[j] for j in rng.choice(len(TAGS), 2, replace=False)] for _ in range(n_queries)]
    t0 = datetime.fromtimestamp(T0, tz=UTC).replace(tzinfo=None)
    now = t0 + timedelta(days=1)

    with workdir(cfg, "chroma") as d:
        from tierstore import ManualClock

        clock = ManualClock(T0)
        store = open_store(d / "store", clock=clock)
        try:
            t_store, _ = timed(
                lambda: add_in_batches(
                    store,
                    "mem",
                    vecs,
                    batch=10_000,
                    cfg=cfg,
                    label=f"(b) tierstore add {n}",
                    item=lambda i: {"confidence": float(conf[i]), "tags": tags[i], "memory_type": "fact"},
                )
            )
            seed = SeedMemorySystem(str(d / "chroma"))
            ids = [f"m{i}" for i in range(n)]
            metas = [
                seed_metadata(
                    ids[i],
                    memory_type="fact",
                    created=t0,
                    last_access=t0,
                    confidence=float(conf[i]),
                    tags=tags[i],
                    ttl=None,
                )
                for i in range(n)
            ]
            t_chroma, _ = timed(lambda: _chroma_add(seed, ids, vecs, metas, cfg))
            clock.set(T0 + 86400)
            fns = {
                "tierstore_search": lambda i: store.search(
                    "mem", queries[i], k=K, context_tags=q_tags[i], record_access=False
                ),
                "seed_retrieve": lambda i: seed.retrieve_memories(queries[i], q_tags[i], top_k=K, now=now),
                "seed_retrieve_no_where": lambda i: seed.retrieve_memories(
                    queries[i], q_tags[i], top_k=K, now=now, where=False
                ),
                "chroma_query_only": lambda i: seed.collection.query(query_embeddings=[queries[i]], n_results=3 * K),
            }
            for f in fns.values():
                for i in range(3):
                    f(i)
            med = interleaved(fns, n_queries, rounds=rounds, label=f"(b) search {n}", cfg=cfg)
            # how often both designs agree on the best hit (they score differently; for orientation only)
            agree = np.mean(
                [
                    store.search("mem", queries[i], k=1, context_tags=q_tags[i], record_access=False)[0].id
                    == seed.retrieve_memories(queries[i], q_tags[i], top_k=K, now=now)[0]["id"]
                    for i in range(min(n_queries, 50))
                ]
            )
        finally:
            store.close()

    p = {"N": n, "k": K, "ef": EF}
    res.rows.append(
        Row(
            "b",
            "search, seed design as printed",
            "store.search",
            "Chroma query(where) + rerank",
            med["tierstore_search"],
            med["seed_retrieve"],
            "per query",
            p,
        )
    )
    res.rows.append(
        Row(
            "b",
            "search, seed without `where`",
            "store.search",
            "Chroma query + rerank",
            med["tierstore_search"],
            med["seed_retrieve_no_where"],
            "per query",
            p,
            note="a variant: the article filters archived memories in the query",
        )
    )
    res.rows.append(
        Row(
            "b",
            "search vs Chroma alone",
            "store.search",
            "Chroma query (no rerank)",
            med["tierstore_search"],
            med["chroma_query_only"],
            "per query",
            p,
        )
    )
    res.rows.append(
        Row(
            "b",
            "ingest",
            "tierstore add_batch",
            "Chroma add",
            t_store / n,
            t_chroma / n,
            "per memory",
            {"N": n, "batch": "10000 / 5461"},
            note="one run each; see (f) for interleaved ingest",
        )
    )
    res.extra.update(top1_agreement=float(agree))
    res.notes.append(
        f"Chroma collection: hnsw space=cosine (the article's hnsw:space), ef_search={EF}, "
        f"ef_construction={EF_CONSTRUCTION}, max_neighbors={M}; embeddings passed explicitly "
        "(embedding_function=None); PersistentClient in a temporary directory. Queries over-fetch "
        f"top_k*3={3 * K} with where={{archived: {{$ne: True}}}} and rerank with the article's "
        "Python loop (tierstore/bench/seedref.py). Both sides: k=10, the same 2 context tags per query."
    )
    return res


def _chroma_add(seed: SeedMemorySystem, ids: list[str], vecs: np.ndarray, metas: list[dict], cfg: BenchConfig) -> None:
    from tierstore.progress import Progress

    b = seed.max_batch
    with Progress(len(ids), f"(b) Chroma add {len(ids)}", enabled=cfg.progress) as bar:
        for s in range(0, len(ids), b):
            docs = [f"m{i}" for i in range(s, min(len(ids), s + b))]
            seed.add_many(ids[s : s + b], vecs[s : s + b], docs, metas[s : s + b])
            bar.update(min(b, len(ids) - s))

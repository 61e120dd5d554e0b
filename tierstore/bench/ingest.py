"""(f) Ingest: ``add_batch`` against raw hnswlib ``add_items`` and against
Chroma ``add``, same vectors, same batch size, each into a fresh empty
store/index. Repetitions alternate the order of the engines.

What each does per batch: tierstore validates and normalises every item,
computes its lifetime, commits the rows (content, metadata, vector) to SQLite
in one transaction, then inserts into the hot tier (an hnswlib index with the
same M/ef_construction once the namespace passes 2048 memories). ``add_items``
only inserts into the graph (no durability). Chroma ``add`` stores documents,
metadata and vectors durably (PersistentClient) and indexes them.
"""

from __future__ import annotations

import numpy as np

from tierstore.bench.common import (
    DIM,
    EF_CONSTRUCTION,
    BenchConfig,
    M,
    Row,
    SuiteResult,
    clustered_vectors,
    have,
    open_store,
    timed,
    workdir,
)

TITLE = "add_batch vs raw add_items and Chroma add"


def run(cfg: BenchConfig) -> SuiteResult:
    import hnswlib

    n = cfg.size("f.n", 100_000, 10_000)
    batch = cfg.size("f.batch", 1000, 1000)
    reps = cfg.size("f.reps", 2, 2)
    with_chroma = have("chromadb") and not cfg.sizes.get("f.no_chroma", False)
    res = SuiteResult("f", TITLE)
    vecs = clustered_vectors(n, DIM, seed=cfg.seed + 51)
    ids = [f"m{i}" for i in range(n)]

    def tier(d):
        def go() -> None:
            store = open_store(d / "store")
            try:
                for s in range(0, n, batch):
                    store.add_batch(
                        "mem",
                        [{"content": ids[i], "embedding": vecs[i], "id": ids[i]} for i in range(s, min(n, s + batch))],
                    )
            finally:
                store.close()

        return go

    def raw() -> None:
        index = hnswlib.Index(space="ip", dim=DIM)
        index.init_index(max_elements=n, M=M, ef_construction=EF_CONSTRUCTION, random_seed=100)
        for s in range(0, n, batch):
            stop = min(n, s + batch)
            # the store's own choice of threads: all cores for >= 1000 items, one below
            index.add_items(vecs[s:stop], np.arange(s, stop), num_threads=-1 if stop - s >= 1000 else 1)

    def chroma(d):
        def go() -> None:
            from tierstore.bench.seedref import SeedMemorySystem

            seed = SeedMemorySystem(str(d / "chroma"))
            for s in range(0, n, batch):
                stop = min(n, s + batch)
                seed.collection.add(
                    ids=ids[s:stop],
                    embeddings=vecs[s:stop],
                    documents=ids[s:stop],
                    metadatas=[{"type": "fact", "confidence": 0.8} for _ in range(s, stop)],
                )

        return go

    times: dict[str, list[float]] = {"tierstore": [], "raw": [], "chroma": []}
    from tierstore.progress import Progress

    names = ["tierstore", "raw"] + (["chroma"] if with_chroma else [])
    with Progress(reps * len(names), f"(f) ingest {n}", enabled=cfg.progress) as bar:
        for r in range(reps):
            order = names if r % 2 == 0 else names[::-1]
            for name in order:
                with workdir(cfg, f"ingest-{name}") as d:
                    fn = {"tierstore": tier(d), "raw": raw, "chroma": chroma(d) if with_chroma else None}[name]
                    el, _ = timed(fn)
                times[name].append(el / n)
                bar.update()
    med = {k: float(np.median(v)) for k, v in times.items() if v}
    p = {"N": n, "batch": batch, "reps": reps}
    res.rows.append(Row("f", "ingest", "add_batch", "hnswlib add_items", med["tierstore"], med["raw"], "per memory", p))
    if "chroma" in med:
        res.rows.append(Row("f", "ingest", "add_batch", "Chroma add", med["tierstore"], med["chroma"], "per memory", p))
    else:
        res.notes.append(
            "the Chroma ingest was skipped: chromadb is not installed (pip install 'tierstore[bench]') "
            "or f.no_chroma was set."
        )
    res.notes.append(
        f"batches of {batch}; tierstore: one namespace, durable SQLite commit per batch; hnswlib: M={M}, "
        f"ef_construction={EF_CONSTRUCTION}, in memory only; Chroma: PersistentClient, documents + "
        "two metadata fields per memory."
    )
    return res

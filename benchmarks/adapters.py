"""TierStoreVectorStore.similarity_search against store.search on the same
data, interleaved (issue 18 target: <= 1.3x).

    .venv/bin/python benchmarks/adapters.py --n 20000 --rounds 30
    .venv/bin/python benchmarks/adapters.py --base /tmp/base   # also the adapter of another revision

``--base DIR``: a directory holding another revision's ``tierstore`` package
(``git archive <rev> tierstore | tar -x -C DIR``); its
``integrations/langchain/vectorstore.py`` is loaded beside this one (on this
checkout's store) and timed as a fourth side, so a change to the adapter is
measured before and after in one run.

Both sides answer the same queries at k = 4 (LangChain's default) with
``record_access=False`` (the vector store's default). The vector store's
embedding is a lookup table of precomputed query vectors, so what is timed is
the adapter (the call, the query conversion, a ``Document`` per hit with its
metadata) beside the engine, not an embedding model. Each round times a
block of ``store.search`` calls whose hits' content and metadata are read (what
the adapter reads to build its Documents), a block of bare ``store.search``
calls and a block of ``similarity_search`` calls on the same queries, in a
random order per round; the medians of the per-round ratios are reported,
with each side's median time per query. Every memory
carries a small metadata dict, as LangChain documents do.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import clustered_vectors  # noqa: E402  (also pins BLAS to one thread)
from langchain_core.embeddings import Embeddings  # noqa: E402

from tierstore import TierStore  # noqa: E402
from tierstore.integrations.langchain import TierStoreVectorStore, adapter_policy  # noqa: E402


class LookupEmbeddings(Embeddings):
    """Precomputed vectors by text: embedding costs a dict lookup."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]  # type: ignore[misc]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--base", default=None, help="another revision's tierstore package directory, timed beside")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    vectors = clustered_vectors(args.n, args.dim)
    queries = np.ascontiguousarray(
        vectors[rng.choice(args.n, args.queries, replace=False)]
        + 0.05 * rng.normal(size=(args.queries, args.dim)).astype(np.float32)
    )
    texts = [f"query {i}" for i in range(args.queries)]
    table = {t: q for t, q in zip(texts, queries)}
    with tempfile.TemporaryDirectory() as tmp:
        store = TierStore.open(Path(tmp) / "s", dim=args.dim, policy=adapter_policy())
        vs = TierStoreVectorStore(store, LookupEmbeddings(table), namespace="bench")
        base_vs = None
        if args.base:
            base_vs = base_adapter(args.base)(store, LookupEmbeddings(table), namespace="bench")
        for start in range(0, args.n, 5000):
            store.add_batch(
                "bench",
                [
                    {
                        "content": f"document {i}",
                        "embedding": vectors[i],
                        "metadata": {"source": f"doc-{i}.md", "page": i % 50},
                    }
                    for i in range(start, min(args.n, start + 5000))
                ],
            )
        for t, q in zip(texts[:20], queries[:20]):  # warm up both paths
            store.search("bench", q, k=args.k, record_access=False)
            vs.similarity_search(t, k=args.k)
            if base_vs is not None:
                base_vs.similarity_search(t, k=args.k)

        def run_store() -> float:
            t0 = time.perf_counter()
            for q in queries:
                hits = store.search("bench", q, k=args.k, record_access=False)
                for h in hits:  # read what a caller reads: content and metadata
                    _ = h.memory.content, h.memory.metadata
            return (time.perf_counter() - t0) / len(queries)

        def run_bare() -> float:
            t0 = time.perf_counter()
            for q in queries:
                store.search("bench", q, k=args.k, record_access=False)
            return (time.perf_counter() - t0) / len(queries)

        def run_adapter(which: object = vs) -> float:
            t0 = time.perf_counter()
            for t in texts:
                which.similarity_search(t, k=args.k)  # type: ignore[attr-defined]
            return (time.perf_counter() - t0) / len(queries)

        ratios, bare_ratios, base, bare, adapted = [], [], [], [], []
        old, old_ratios, new_old = [], [], []
        for _ in range(args.rounds):
            sides = [("b", run_store), ("n", run_bare), ("a", run_adapter)]
            if base_vs is not None:
                sides.append(("o", lambda: run_adapter(base_vs)))
            random.shuffle(sides)
            t = {name: fn() for name, fn in sides}
            base.append(t["b"])
            bare.append(t["n"])
            adapted.append(t["a"])
            ratios.append(t["a"] / t["b"])
            bare_ratios.append(t["a"] / t["n"])
            if base_vs is not None:
                old.append(t["o"])
                old_ratios.append(t["o"] / t["n"])
                new_old.append(t["a"] / t["o"])
        store.close()
    print(f"n={args.n} dim={args.dim} k={args.k} queries={args.queries} rounds={args.rounds}")
    print(f"store.search, hits not read:                   median {statistics.median(bare) * 1e6:.1f} us/query")
    print(f"store.search (hits' content and metadata read): median {statistics.median(base) * 1e6:.1f} us/query")
    print(f"TierStoreVectorStore.similarity_search:        median {statistics.median(adapted) * 1e6:.1f} us/query")
    print(f"ratio to store.search reading its hits: {statistics.median(ratios):.3f}  (target <= 1.3)")
    print(f"ratio to store.search alone:            {statistics.median(bare_ratios):.3f}")
    if old:
        print(f"the base revision's adapter:                   median {statistics.median(old) * 1e6:.1f} us/query")
        print(f"its ratio to store.search alone:        {statistics.median(old_ratios):.3f}")
        print(f"this adapter / the base's:              {statistics.median(new_old):.3f}")
    return 0


def base_adapter(src: str) -> type:
    """The TierStoreVectorStore class of the revision under ``src``, loaded beside this one (its relative
    imports resolve to this checkout's store)."""
    name = "tierstore.integrations.langchain._base_vectorstore"
    path = Path(src) / "tierstore" / "integrations" / "langchain" / "vectorstore.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    module.__package__ = "tierstore.integrations.langchain"
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.TierStoreVectorStore  # type: ignore[no-any-return]


if __name__ == "__main__":
    raise SystemExit(main())

"""search() against raw hnswlib knn_query at 100k x 384 (k=10, ef=64), on
clustered vectors; and exact small-namespace search against a numpy matmul."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import add_vectors, clustered_vectors, record

from tierstore import HotSettings, ManualClock, Settings, TierStore
from tierstore.kernels import flat_topk

N, DIM, K, EF = 100_000, 384, 10, 64


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    import hnswlib

    vecs = clustered_vectors(N, DIM, seed=1)
    queries = clustered_vectors(1000, DIM, seed=1)[::-1].copy()  # same centres, fresh noise
    queries = queries + 0.05 * np.random.default_rng(9).normal(size=queries.shape).astype(np.float32) / np.sqrt(DIM)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    path = tmp_path_factory.mktemp("bench") / "store"
    settings = Settings(hot=HotSettings(hnsw_m=16, hnsw_ef_construction=200, hnsw_ef_search=EF))
    store = TierStore.open(path, dim=DIM, clock=ManualClock(), settings=settings)
    add_vectors(store, "big", vecs)
    own = hnswlib.Index(space="ip", dim=DIM)
    own.init_index(max_elements=N, M=16, ef_construction=200, random_seed=100)
    own.add_items(vecs, np.arange(N))
    own.set_ef(EF)
    own.set_num_threads(1)
    hot = store.engine.hot.ensure("big")
    assert hot.index is not None
    yield store, hot.index, own, vecs, queries.astype(np.float32)
    store.close()


def cycle(queries):
    it = itertools.cycle(range(len(queries)))
    return lambda: queries[next(it)]


@pytest.mark.benchmark(group="search-100k")
def test_hnswlib_knn_query_same_index(benchmark, big):
    _, index, _, _, queries = big
    nxt = cycle(queries)
    benchmark(lambda: index.knn_query(nxt(), k=K))
    record("search-100k", "hnswlib_knn_query_same_index", benchmark)


@pytest.mark.benchmark(group="search-100k")
def test_hnswlib_knn_query_own_index(benchmark, big):
    _, _, own, _, queries = big
    nxt = cycle(queries)
    benchmark(lambda: own.knn_query(nxt(), k=K))
    record("search-100k", "hnswlib_knn_query_own_index", benchmark)


@pytest.mark.benchmark(group="search-100k")
def test_tierstore_search(benchmark, big):
    store, _, _, _, queries = big
    nxt = cycle(queries)
    benchmark(lambda: store.search("big", nxt(), k=K, record_access=False))
    record("search-100k", "tierstore_search", benchmark)


@pytest.mark.benchmark(group="search-100k")
def test_tierstore_search_explain(benchmark, big):
    store, _, _, _, queries = big
    nxt = cycle(queries)
    benchmark(lambda: store.search("big", nxt(), k=K, record_access=False, explain=True))
    record("search-100k", "tierstore_search_explain", benchmark)


@pytest.mark.benchmark(group="search-100k")
def test_tierstore_search_record_access(benchmark, big):
    store, _, _, _, queries = big
    nxt = cycle(queries)
    benchmark(lambda: store.search("big", nxt(), k=K, record_access=True))
    record("search-100k", "tierstore_search_record_access", benchmark)


def test_recall_against_exact(big):
    """Not a timing: the ANN + rerank path must still find the true neighbours
    (all memories are fresh and equally confident, so the score order is the
    similarity order)."""
    store, _, _, vecs, queries = big
    recalls = []
    for q in queries[:200]:
        truth = set(np.argsort(-(vecs @ q))[:K].tolist())
        got = {int(h.id[1:]) for h in store.search("big", q, k=K, record_access=False)}
        recalls.append(len(truth & got) / K)
    print(f"recall@{K} of search vs exact: {np.mean(recalls):.3f}")
    assert np.mean(recalls) > 0.9


NS = 2000


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    vecs = clustered_vectors(NS, DIM, clusters=50, seed=3)
    queries = clustered_vectors(500, DIM, clusters=50, seed=4)
    store = TierStore.open(tmp_path_factory.mktemp("bench-small") / "store", dim=DIM, clock=ManualClock())
    store.add_batch("small", [{"content": f"m{i}", "embedding": v, "id": f"m{i}"} for i, v in enumerate(vecs)])
    assert store.engine.hot.ensure("small").index is None
    yield store, vecs, queries
    store.close()


@pytest.mark.benchmark(group="exact-2k")
def test_numpy_matmul_topk(benchmark, small):
    _, vecs, queries = small
    nxt = cycle(queries)

    def run():
        s = vecs @ nxt()
        top = np.argpartition(-s, K)[:K]
        return top[np.argsort(-s[top])]

    benchmark(run)
    record("exact-2k", "numpy_matmul_topk", benchmark)


@pytest.mark.benchmark(group="exact-2k")
def test_kernel_flat_topk(benchmark, small):
    _, vecs, queries = small
    nxt = cycle(queries)
    benchmark(lambda: flat_topk(nxt(), vecs, NS, K))
    record("exact-2k", "kernel_flat_topk", benchmark)


@pytest.mark.benchmark(group="exact-2k")
def test_tierstore_search_exact(benchmark, small):
    store, _, queries = small
    nxt = cycle(queries)
    benchmark(lambda: store.search("small", nxt(), k=K, record_access=False))
    record("exact-2k", "tierstore_search_exact", benchmark)

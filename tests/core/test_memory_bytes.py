"""What a store says it holds in memory (``Stats.memory_bytes``).

What is checked: the hot part counts every loaded namespace's columns and
vectors and grows with them; the estimate of what an hnswlib graph holds is
within a fifth of the RSS a graph with free slots takes; the warm shard
cache, the loaded archive codes and the archived-vector cache are counted
once a search has loaded them and are 0 before; the figures cross the wire
and add up over a cluster's parts.
"""

from __future__ import annotations

import subprocess
import sys

from helpers import DIM, T0, unit

from tierstore import ManualClock, Policy, TierStore
from tierstore.cluster.stats import sum_stats
from tierstore.kernels import columns as C
from tierstore.remote.wire import stats_from_wire

DAY = 86400.0
HOUR = 3600.0
PARTS = {"hot", "warm_cache", "cold_codes", "vector_cache"}


def held(store: TierStore) -> dict[str, int]:
    return store.stats(lifecycle=False).memory_bytes


def test_the_hot_part_counts_the_loaded_namespaces_and_grows_with_them(store, rng):
    assert held(store) == dict.fromkeys(PARTS, 0)
    store.add_batch("a", [{"content": f"note {i}", "embedding": unit(rng)} for i in range(300)])
    one = held(store)["hot"]
    # at least each slot's vector and columns (float64 F, int32 I)
    assert one >= 300 * (DIM * 4 + C.NF * 8 + C.NI * 4)
    store.add_batch("b", [{"content": f"note {i}", "embedding": unit(rng)} for i in range(300)])
    two = held(store)["hot"]
    assert 1.8 * one <= two <= 2.2 * one  # a second namespace of the same size: about as much again


def test_the_graph_estimate_is_within_a_fifth_of_the_rss_a_graph_takes():
    # a fresh interpreter: the RSS a graph adds, measured around its build alone
    code = """
import hnswlib, numpy as np
from tierstore.tiers.hot import graph_bytes
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
x = np.random.default_rng(0).random((30000, 96), dtype=np.float32)
before = rss()
g = hnswlib.Index(space='ip', dim=96)
g.init_index(max_elements=40000, M=16, ef_construction=100)
g.add_items(x, num_threads=1)
print(rss() - before, graph_bytes(40000, 30000, 96, 16))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    measured, estimate = map(int, out.stdout.split())
    assert 0.8 * measured <= estimate <= 1.2 * measured, (measured, estimate)


def test_warm_and_cold_parts_count_what_searches_loaded(tmp_path, rng):
    clock = ManualClock(T0)
    policy = Policy.from_dict({"types": {"chat": {"ttl": "1h", "half_life": "20m"}}})
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, policy=policy) as store:
        facts = [unit(rng) for _ in range(6)]
        store.add_batch(
            "w", [{"content": f"fact {i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(facts)]
        )
        chats = [unit(rng) for _ in range(4)]
        store.add_batch(
            "c", [{"content": f"chat {i}", "embedding": v, "memory_type": "chat"} for i, v in enumerate(chats)]
        )
        clock.advance(20 * DAY)  # unused facts decay to warm; the chats' hour is long over: archived
        while store.sweep().examined:
            pass
        assert store.stats(lifecycle=False).by_tier["warm"] == 6
        assert store.stats(lifecycle=False).by_tier["cold"] == 4
        before = held(store)
        assert before["warm_cache"] == before["cold_codes"] == before["vector_cache"] == 0
        store.search("w", facts[0], k=3, record_access=False)
        assert held(store)["warm_cache"] > 0
        hits = store.search("c", chats[1], k=2, include_cold=True, record_access=False)
        assert hits and hits[0].memory.tier == "cold"
        after = held(store)
        assert after["cold_codes"] > 0 and after["vector_cache"] >= DIM * 4


def test_the_figures_cross_the_wire_and_add_up_over_parts(store, rng):
    store.add("a", "hello", unit(rng))
    stats = store.stats(lifecycle=False)
    wire = stats.as_dict()
    assert stats_from_wire(wire).memory_bytes == stats.memory_bytes and stats.memory_bytes["hot"] > 0
    older = {k: v for k, v in wire.items() if k != "memory_bytes"}  # a server or shard before the count
    assert stats_from_wire(older).memory_bytes == {}
    total = sum_stats([wire, wire, older])
    assert total.memory_bytes == {k: 2 * v for k, v in stats.memory_bytes.items()}
    assert total.total == 3

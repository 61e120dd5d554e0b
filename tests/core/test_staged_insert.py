"""A batch's graph insert runs while its commit is in flight (tierstore.core.ingest.commit_and_insert):
what the commit decides is what the hot tier holds, and a reader never sees more."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import DIM, T0, unit

from tierstore import HotSettings, ManualClock, Settings, TierStore
from tierstore.errors import DuplicateIdError
from tierstore.kernels import columns as C


def open_indexed(tmp_path, clock: ManualClock) -> TierStore:
    # a small exact threshold: the namespace has an hnswlib index, where batches are staged
    return TierStore.open(tmp_path / "s", dim=DIM, clock=clock, settings=Settings(hot=HotSettings(exact_threshold=16)))


def batch(rng: np.random.Generator, n: int, prefix: str) -> list[dict]:
    return [{"id": f"{prefix}{i}", "content": f"{prefix} fact {i}", "embedding": unit(rng)} for i in range(n)]


def test_a_staged_batch_is_found_and_survives_reopen(tmp_path, rng) -> None:
    clock = ManualClock(T0)
    store = open_indexed(tmp_path, clock)
    store.add_batch("ns", batch(rng, 20, "seed"))  # past the threshold: indexed
    items = batch(rng, 100, "b")
    store.add_batch("ns", items)
    hot = store.engine.hot.ensure("ns")
    assert hot.index is not None and hot.live == 120
    for item in items[::7]:
        assert store.search("ns", item["embedding"], k=1)[0].id == item["id"]
    store.close()
    again = open_indexed(tmp_path, clock)
    assert again.search("ns", items[50]["embedding"], k=1)[0].id == "b50"
    assert again.verify().ok
    again.close()


def test_duplicates_in_a_staged_batch_leave_dead_slots_only(tmp_path, rng) -> None:
    clock = ManualClock(T0)
    store = open_indexed(tmp_path, clock)
    store.add_batch("ns", batch(rng, 20, "seed"))
    hot = store.engine.hot.ensure("ns")
    n_before = hot.n
    # the same content and type as a live memory: exact dedupe reinforces it instead of adding
    items = batch(rng, 40, "new")
    items[3] = {"content": "seed fact 5", "embedding": unit(rng)}
    items[39] = {"content": "seed fact 6", "embedding": unit(rng)}  # the last slot staged is a duplicate too
    ids = store.add_batch("ns", items)
    assert ids[3] == "seed5" and ids[39] == "seed6"
    assert hot.live == 20 + 38
    assert hot.n == n_before + 40  # the duplicates' slots are taken and dead: never reused as graph labels
    dead = [s for s in range(n_before, hot.n) if hot.I[C.I_ALIVE, s] == 0]
    assert dead == [n_before + 3, n_before + 39]
    assert set(hot.index.get_ids_list()) >= set(range(n_before, hot.n))
    # a duplicate's own vector is not a hit: its slot was marked deleted in the graph
    assert {h.id for h in store.search("ns", items[39]["embedding"], k=58)} == set(
        [f"seed{i}" for i in range(20)] + [f"new{i}" for i in range(40) if i not in (3, 39)]
    )
    # the next batch goes on after the dead slots
    store.add_batch("ns", batch(rng, 40, "after"))
    assert hot.live == 98 and hot.n == n_before + 80
    after7 = store.get("ns", "after7")
    assert after7 is not None and after7.embedding is not None
    assert store.search("ns", after7.embedding, k=1)[0].id == "after7"
    assert store.verify().ok
    store.close()
    again = open_indexed(tmp_path, clock)  # from the checkpoint with its dead slots, or the catalog
    assert again.engine.hot.ensure("ns").live == 98
    assert again.search("ns", items[5]["embedding"], k=1)[0].id == "new5"
    assert again.verify().ok
    again.close()


def test_a_failed_commit_leaves_the_hot_tier_as_it_was(tmp_path, rng) -> None:
    clock = ManualClock(T0)
    store = open_indexed(tmp_path, clock)
    store.add_batch("ns", batch(rng, 20, "seed"))
    hot = store.engine.hot.ensure("ns")
    live, q = hot.live, unit(rng)
    before = [(h.id, h.score) for h in store.search("ns", q, k=10, record_access=False)]
    items = batch(rng, 50, "x")
    items[49] = {"id": "seed0", "content": "clash", "embedding": unit(rng)}  # an id that exists: the commit fails
    with pytest.raises(DuplicateIdError):
        store.add_batch("ns", items)
    assert hot.live == live
    assert store.get("ns", "x0") is None
    assert [(h.id, h.score) for h in store.search("ns", q, k=10, record_access=False)] == before
    # the staged vectors are no hit, however close the query
    assert store.search("ns", items[10]["embedding"], k=1)[0].id.startswith("seed")
    store.add_batch("ns", batch(rng, 40, "ok"))
    assert hot.live == live + 40
    assert store.verify().ok
    store.close()


def test_no_reader_sees_a_staged_row_before_its_commit(tmp_path, rng) -> None:
    clock = ManualClock(T0)
    store = open_indexed(tmp_path, clock)
    store.add_batch("ns", batch(rng, 20, "seed"))
    items = batch(rng, 40, "late")
    catalog = store.engine.catalog
    submit = catalog.submit
    in_commit, release = threading.Event(), threading.Event()

    def held(fn):
        def run(conn):
            in_commit.set()
            assert release.wait(10)
            return fn(conn)

        return submit(run)

    catalog.submit = held  # type: ignore[method-assign]
    writer = threading.Thread(target=store.add_batch, args=("ns", items))
    writer.start()
    try:
        assert in_commit.wait(10)
        seen: list[list[str]] = []
        reader = threading.Thread(
            target=lambda: seen.append([h.id for h in store.search("ns", items[0]["embedding"], k=3)])
        )
        reader.start()
        reader.join(0.3)
        # the reader waits on the namespace's lock (the graph changed, the rows are not durable yet)
        assert reader.is_alive() and seen == []
        release.set()
        writer.join(10)
        reader.join(10)
    finally:
        release.set()
        catalog.submit = submit  # type: ignore[method-assign]
    assert seen and seen[0][0] == "late0"  # once the commit is done the row is there at once
    store.close()

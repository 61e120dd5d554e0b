"""Eight threads mixing search, add, touch, feedback and restore while the
background migrator sweeps and another thread moves the clock, so memories
move hot -> warm -> cold (and back) under the callers' feet.

What is exactly checkable, and checked:

* no call raises (other than the documented MemoryNotFoundError for a memory
  deleted meanwhile, which cannot happen here: nothing is deleted), and nothing
  deadlocks (every join has a timeout; a hang fails with a dump of every
  thread's stack);
* nothing is lost or duplicated: every memory added is in the catalog once,
  the hot index holds exactly the catalog's hot rows;
* access counts: a memory that stayed hot all along (its only lifecycle events
  are create and feedback) has ``access_count`` exactly equal to the touches
  plus the search hits recorded on it; for every memory, the count is never
  more than that (nothing is counted twice). Accesses racing a move are
  covered by the deterministic tests further down.
"""

from __future__ import annotations

import faulthandler
import random
import threading
import time
from collections import Counter

import numpy as np
import pytest
from helpers import DIM, T0, unit

from tierstore import ManualClock, MemoryNotFoundError, Settings, TierStore
from tierstore.core import retrieval

RUN_S = 3.0
MAX_RUN_S = 30.0
JOIN_S = 30.0


def _dump_threads_to_tmp(tmp_path) -> str:
    path = tmp_path / "threads.txt"
    with open(path, "w") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
    return path.read_text()


@pytest.mark.slow
def test_eight_threads_with_the_background_migrator_and_a_moving_clock(tmp_path):
    clock = ManualClock(T0)
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock, settings=Settings(flush_interval_s=0.05))
    rng = np.random.default_rng(7)
    namespaces = ("a", "b")
    ids: dict[str, list[str]] = {}
    for ns in namespaces:
        items = [
            {
                "content": f"{ns} chat {i}",
                "embedding": unit(rng),
                "memory_type": "conversation",
                "confidence": 0.9,
                "id": f"{ns}-c{i}",
            }
            for i in range(60)
        ]
        items += [
            {
                "content": f"{ns} fact {i}",
                "embedding": unit(rng),
                "memory_type": "fact",
                "confidence": 0.9,
                "id": f"{ns}-f{i}",
            }
            for i in range(60)
        ]
        ids[ns] = store.add_batch(ns, items)
    ids_lock = threading.Lock()
    store.start_migrator(interval_s=0.02, max_items=500, time_budget_s=0.5)

    stop = threading.Event()
    errors: list[str] = []
    touches: list[Counter] = []
    hits: list[Counter] = []
    ops = Counter()
    ops_lock = threading.Lock()

    def worker(name, body):
        local_rng = random.Random(name)

        def run():
            n = 0
            try:
                while not stop.is_set():
                    body(local_rng)
                    n += 1
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                import traceback

                errors.append(f"{name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            with ops_lock:
                ops[name] += n

        return threading.Thread(target=run, name=name, daemon=True)

    # Half the conversations are never touched nor given feedback, so that they
    # surely age out of the hot tier while the clock moves.
    untouched = {f"{ns}-c{i}" for ns in namespaces for i in range(30, 60)}

    def pick(r):
        ns = r.choice(namespaces)
        with ids_lock:
            while True:
                mid = r.choice(ids[ns])
                if mid not in untouched:
                    return ns, mid

    def searcher(r):
        ns = r.choice(namespaces)
        for h in store.search(ns, np.asarray(unit(np.random.default_rng(r.getrandbits(32)))), k=5, record_access=False):
            if h.memory.namespace != ns or h.memory.tier not in ("hot", "warm", "cold"):
                raise AssertionError(f"bad hit {h!r} for {ns}")  # cold hits are fine: the search reaches archives

    def recording_searcher_factory():
        mine = Counter()
        hits.append(mine)

        def body(r):
            ns = r.choice(namespaces)
            for h in store.search(
                ns, np.asarray(unit(np.random.default_rng(r.getrandbits(32)))), k=3, record_access=True
            ):
                mine[(ns, h.id)] += 1

        return body

    def toucher_factory():
        mine = Counter()
        touches.append(mine)

        def body(r):
            ns, mid = pick(r)
            store.touch(ns, [mid])
            mine[(ns, mid)] += 1

        return body

    counter = [0]

    def adder(r):
        ns = r.choice(namespaces)
        counter[0] += 1
        mid = store.add(
            ns,
            f"{ns} new {counter[0]}",
            unit(np.random.default_rng(r.getrandbits(32))),
            memory_type=r.choice(["conversation", "fact"]),
            confidence=0.9,
        )
        with ids_lock:
            ids[ns].append(mid)

    def feedbacker(r):
        ns, mid = pick(r)
        m = store.feedback(ns, mid, positive=r.random() < 0.7, strength=0.5)
        if m.id != mid:
            raise AssertionError("feedback returned another memory")

    def restorer(r):
        ns = r.choice(namespaces)
        cold = [
            i
            for (i,) in store.engine.catalog.query("SELECT id FROM memories WHERE ns = ? AND tier = 2 LIMIT 10", (ns,))
        ]
        if cold:
            store.restore(ns, ids=cold)
        time.sleep(0.01)

    def clock_mover(r):
        clock.advance(120.0)  # two minutes of simulated time every few milliseconds
        time.sleep(0.005)

    threads = [
        worker("search-1", searcher),
        worker("search-2", searcher),
        worker("search-record", recording_searcher_factory()),
        worker("touch-1", toucher_factory()),
        worker("touch-2", toucher_factory()),
        worker("add", adder),
        worker("feedback", feedbacker),
        worker("restore", restorer),
        worker("clock", clock_mover),
    ]
    for t in threads:
        t.start()
    time.sleep(RUN_S)
    # On a starved machine the threads get less done in RUN_S: keep them going
    # (at most MAX_RUN_S) until the migrator has demoted, archived and restored.
    moved_by = time.monotonic() + MAX_RUN_S - RUN_S
    while time.monotonic() < moved_by and not all(
        store.engine.catalog.query_one("SELECT 1 FROM events WHERE kind = ? LIMIT 1", (kind,))
        for kind in ("demote", "archive", "restore")
    ):
        time.sleep(0.1)
    stop.set()
    deadline = time.monotonic() + JOIN_S
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        dump = _dump_threads_to_tmp(tmp_path)
        pytest.fail(f"threads {hung} did not finish within {JOIN_S} s (deadlock?)\n{dump}")
    store.stop_migrator(timeout=JOIN_S)
    assert not store.engine.migrator.running, _dump_threads_to_tmp(tmp_path)
    try:
        assert errors == [], "\n".join(errors[:3])
        assert store.engine.migrator.background_errors == []
        assert all(ops[t.name] > 0 for t in threads), ops
        store.flush()
        cat = store.engine.catalog

        # the migrator really moved things meanwhile
        kinds = Counter(k for (k,) in cat.query("SELECT kind FROM events"))
        assert kinds["demote"] and kinds["archive"] and kinds["restore"], kinds

        # nothing lost or duplicated; the hot index agrees with the catalog
        rows = cat.query("SELECT ns, id, tier, access_count FROM memories")
        assert len(rows) == sum(len(v) for v in ids.values())
        assert {(ns, i) for ns, i, _, _ in rows} == {(ns, i) for ns in ids for i in ids[ns]}
        for ns in namespaces:
            hot = store.engine.hot.ensure(ns)
            assert set(hot.slot_of) == {i for n, i, tier, _ in rows if n == ns and tier == 0}
            assert hot.live == len(hot.slot_of)

        # access counts
        expected = Counter()
        for c in touches + hits:
            expected.update(c)
        moved = {
            (ns, i)
            for ns, i in cat.query("SELECT DISTINCT ns, id FROM events WHERE kind NOT IN ('create', 'feedback')")
        }
        stayed_hot = [(ns, i, n) for ns, i, tier, n in rows if (ns, i) not in moved]
        assert sum(expected[(ns, i)] for ns, i, _ in stayed_hot) > 100  # enough was checked
        for ns, i, n in stayed_hot:
            assert n == expected[(ns, i)], f"{ns}/{i}: access_count {n}, recorded {expected[(ns, i)]}"
        for ns, i, _tier, n in rows:
            assert n <= expected[(ns, i)], f"{ns}/{i} counted {n} accesses of {expected[(ns, i)]}"
    finally:
        store.close()


# -- accesses racing a move: deterministic interleavings ------------------------------------------

HOUR = 3600.0
DAY = 86400.0


def test_touch_counts_an_access_on_a_warm_memory_archived_meanwhile(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        mid = store.add("ns", "a fact", unit(rng), memory_type="fact", confidence=0.9)
        clock.advance(20 * DAY)
        store.sweep()
        assert store.get("ns", mid).tier == "warm"
        promote = store.engine.migrator.promote

        raced = []

        def racing_promote(*args, **kwargs):
            # another thread's sweep archives the memory between touch's read and its promote
            # (once: the touch then reactivates it from the cold tier, through promote again)
            if not raced:
                raced.append(True)
                clock.advance(30 * DAY)
                assert store.sweep().archived == 1
            return promote(*args, **kwargs)

        store.engine.migrator.promote = racing_promote
        store.touch("ns", [mid])
        store.engine.migrator.promote = promote
        store.flush()
        assert store.get("ns", mid).access_count == 1


def test_touch_counts_an_access_on_a_cold_memory_restored_meanwhile(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        mid = store.add("ns", "a chat", unit(rng), memory_type="conversation", confidence=0.9)
        clock.advance(2 * HOUR)
        assert store.sweep().archived == 1
        engine = store.engine
        update_row = engine.update_row

        def racing_update_row(ns, id, change):
            store.restore(ns, ids=[id])  # another thread restores it first
            return update_row(ns, id, change)

        engine.update_row = racing_update_row
        store.touch("ns", [mid])
        engine.update_row = update_row
        store.flush()
        m = store.get("ns", mid)
        assert m.tier == "hot" and m.access_count == 1
        store.close()
        with TierStore.open(tmp_path / "s", clock=clock) as again:
            assert again.get("ns", mid).access_count == 1


def test_touch_on_a_memory_deleted_meanwhile_raises_not_found(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        mid = store.add("ns", "a chat", unit(rng), memory_type="conversation")
        clock.advance(2 * HOUR)
        store.sweep()
        reactivate = store.engine.migrator.reactivate

        def racing(ns, rows, now, records=None):  # the archived memory is deleted as the touch reactivates it
            store.delete(ns, rows[0].id)
            return reactivate(ns, rows, now, records)

        store.engine.migrator.reactivate = racing
        with pytest.raises(MemoryNotFoundError):
            store.touch("ns", [mid])
        store.engine.migrator.reactivate = reactivate
        assert store.get("ns", mid) is None


def test_search_never_returns_a_memory_twice_when_it_is_demoted_meanwhile(tmp_path, rng, monkeypatch):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        store.add("ns", "an old fact", unit(rng), memory_type="fact")
        clock.advance(20 * DAY)
        store.sweep()  # now the namespace has a warm shard
        v = unit(rng)
        mid = store.add("ns", "a fresh fact", v, memory_type="fact")
        clock.advance(20 * DAY)  # due for demotion, not swept yet
        search_warm = retrieval.search_warm

        def racing_search_warm(*args, **kwargs):
            assert store.sweep().demoted == 1  # a concurrent sweep, between the two passes
            return search_warm(*args, **kwargs)

        monkeypatch.setattr(retrieval, "search_warm", racing_search_warm)
        hits = store.search("ns", v, k=5, record_access=False)
        monkeypatch.undo()
        ids = [h.id for h in hits]
        assert mid in ids
        assert len(ids) == len(set(ids)), f"{mid} returned {ids.count(mid)} times"


def test_search_survives_a_warm_shard_replaced_while_it_reads(tmp_path, rng):
    """A compaction replacing a shard (new shard committed, old files removed)
    between a search listing the shards and loading them: the search reads the
    new list instead of failing with FileNotFoundError or calling the shard
    damaged (found by the eight-thread test above)."""
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        vecs = [unit(rng) for _ in range(10)]
        ids = store.add_batch(
            "w", [{"content": f"fact {i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(vecs)]
        )
        clock.advance(20 * DAY)
        assert store.sweep().demoted == 10
        (info,) = store.engine.warm.shards("w")
        store.engine.warm.forget(info.shard)
        load = store.engine.warm.load
        replaced = []

        def racing_load(i):
            if not replaced:
                replaced.append(i)
                store.engine.migrator.rebuild_shards("w", [i], clock.now())  # a concurrent compaction
            return load(i)

        store.engine.warm.load = racing_load
        hits = store.search("w", vecs[3], k=5, record_access=False)
        store.engine.warm.load = load
        assert replaced and not (store.path / "warm" / info.name).exists()
        assert any(h.id == ids[3] and h.memory.tier == "warm" for h in hits)
        assert store.engine.warm.errors == [] and store.engine.warm.damaged == {}

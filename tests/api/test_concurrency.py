"""Eight threads searching, adding, touching and giving feedback at once."""

from __future__ import annotations

import threading

import numpy as np
from helpers import DIM, T0

from tierstore import HotSettings, ManualClock, Settings, TierStore

THREADS = 8


def run_threads(target, n=THREADS, timeout=120):
    errors: list[BaseException] = []

    def wrap(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "deadlock: a worker did not finish"
    assert not errors, errors


def test_eight_threads_exact_access_counts(tmp_path):
    clock = ManualClock(T0)
    # A low threshold so the namespace switches to hnswlib while threads add.
    settings = Settings(hot=HotSettings(exact_threshold=300), flush_interval_s=0.01)
    rng = np.random.default_rng(5)
    base = rng.normal(size=(100, DIM)).astype(np.float32)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, settings=settings) as store:
        ids = store.add_batch(
            "shared", [{"content": f"base {i}", "embedding": v, "id": f"b{i}"} for i, v in enumerate(base)]
        )
        touches_per_thread = 200
        expected = {i: 0 for i in ids}
        plan = []
        for t in range(THREADS):
            r = np.random.default_rng(100 + t)
            plan.append([ids[j] for j in r.integers(0, len(ids), touches_per_thread)])
            for mid in plan[-1]:
                expected[mid] += 1
        added: list[list[str]] = [[] for _ in range(THREADS)]

        def worker(t):
            r = np.random.default_rng(t)
            for j, mid in enumerate(plan[t]):
                store.touch("shared", mid)
                if j % 4 == 0:
                    # record_access=False keeps the expected counts exact
                    hits = store.search("shared", r.normal(size=DIM), k=5, record_access=False)
                    assert len(hits) == 5
                if j % 5 == 0:
                    added[t].append(store.add("shared", f"t{t} {j}", r.normal(size=DIM)))
                if j % 20 == 0:
                    store.feedback("shared", mid, positive=bool(j % 40))
                    expected_feedback.add(mid)

        expected_feedback: set[str] = set()
        run_threads(worker)
        for mid, count in expected.items():
            assert store.get("shared", mid).access_count == count
        all_added = [m for part in added for m in part]
        assert len(set(all_added)) == THREADS * touches_per_thread // 5
        assert all(store.get("shared", m) is not None for m in all_added)
        assert store.stats().hot_loaded["shared"] == "hnsw"
        # group commit: concurrent adds shared transactions
        commits = store.stats().catalog_commits
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        for mid, count in expected.items():
            assert store.get("shared", mid).access_count == count
        assert store.stats().total == len(ids) + len(all_added)
    assert commits > 0


def test_concurrent_adds_are_group_committed(tmp_path):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        start = store.engine.catalog.commits
        per_thread = 100

        def worker(t):
            r = np.random.default_rng(t)
            for j in range(per_thread):
                store.add(f"ns{t % 2}", f"{t}-{j}", r.normal(size=DIM))

        run_threads(worker)
        commits = store.engine.catalog.commits - start
        assert store.stats().total == THREADS * per_thread
    # Eight writers, one writer thread: at least some commits carried several adds.
    assert commits < THREADS * per_thread

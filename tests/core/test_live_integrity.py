"""verify() and close() on a store that is busy in other threads (issue 13,
items 3 and 4): verify reports damage, never the work under way; close()
waits for a sweep instead of pulling the catalog from under it, and calls
racing it get StoreClosedError, never SQLite's ProgrammingError."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tierstore import ManualClock, Settings, StoreClosedError, TierStore
from tierstore.core.integrity import IntegrityReport

DIM = 8
T0 = 1_700_000_000.0
DAY = 86400.0


def _items(rng, n, prefix):
    return [
        {
            "id": f"{prefix}-{i}",
            "content": f"note {prefix} {i}",
            "embedding": rng.normal(size=DIM),
            "memory_type": "conversation" if i % 2 else "fact",
        }
        for i in range(n)
    ]


def test_verify_reports_no_problems_while_archives_and_restores_churn(tmp_path):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        stop = threading.Event()
        errors: list[BaseException] = []

        def churn() -> None:
            r = np.random.default_rng(4)
            n = 0
            try:
                while not stop.is_set():
                    ids = store.add_batch("ns", _items(r, 30, f"b{n}"))
                    n += 1
                    clock.advance(40 * DAY)
                    store.sweep()  # archive (and compact, collect tombstones)
                    cold = [
                        i
                        for (i,) in store.engine.catalog.query(
                            "SELECT id FROM memories WHERE tier = 2 ORDER BY random() LIMIT 20"
                        )
                    ]
                    if cold:
                        store.restore("ns", ids=cold[:10])  # empties objects: collected
                        for mid in cold[10:15]:
                            store.delete("ns", mid)  # tombstones, collected outside the sweep lock
                    store.delete("ns", ids[0])
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                errors.append(exc)

        worker = threading.Thread(target=churn)
        worker.start()
        reports: list[IntegrityReport] = []
        try:
            deadline = time.monotonic() + 60
            seen_objects = False  # verify can be quicker than the first archive: go on until it has seen some
            while (len(reports) < 60 or not seen_objects) and time.monotonic() < deadline:
                reports.append(store.verify())
                seen_objects = seen_objects or reports[-1].checked.get("archive_objects", 0) > 0
        finally:
            stop.set()
            worker.join(60)
        assert not errors, errors
        problems = [p for r in reports for p in r.problems]
        assert problems == [], problems[:5]
        assert sum(r.checked.get("archive_objects", 0) for r in reports) > 0  # it did look at objects


def test_verify_lists_interrupted_work_as_in_flight_not_as_damage(tmp_path):
    rng = np.random.default_rng(5)
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        store.add_batch("ns", _items(rng, 6, "a"))
        clock.advance(40 * DAY)
        store.engine.migrator._record_batches({"ns": [1, 2]}, clock.now())  # an archive interrupted after its intent
        report = store.verify()
        assert report.ok and report.problems == []
        assert len(report.in_flight) == 1 and "pending" in report.in_flight[0].message
        assert report.as_dict()["in_flight"][0]["where"].startswith("archive/")
        fixed = store.repair()
        assert fixed.ok and fixed.in_flight == [] and "finished pending archive batches" in fixed.repaired


@pytest.mark.slow
def test_close_waits_for_a_sweep_and_racing_calls_get_store_closed(tmp_path):
    rng = np.random.default_rng(6)
    for trial in range(6):
        clock = ManualClock(T0)
        path = tmp_path / f"s{trial}"
        store = TierStore.open(path, dim=DIM, clock=clock, settings=Settings(sweep_batch=50))
        for b in range(10):
            store.add_batch("ns", _items(rng, 200, f"t{trial}b{b}"))
        clock.advance(40 * DAY)
        outcomes: list[BaseException | str] = []

        def sweeper(store=store, outcomes=outcomes) -> None:
            try:
                store.sweep()
                outcomes.append("done")
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcomes.append(exc)

        def searcher(store=store, outcomes=outcomes, trial=trial) -> None:
            try:
                while True:
                    store.search("ns", rng.normal(size=DIM), k=5)
                    store.get("ns", f"t{trial}b0-1")
            except BaseException as exc:  # noqa: BLE001 - checked below
                outcomes.append(exc)

        threads = [threading.Thread(target=sweeper), threading.Thread(target=searcher)]
        for t in threads:
            t.start()
        time.sleep(0.05 * (trial % 3))
        store.close()
        for t in threads:
            t.join(60)
        assert len(outcomes) == 2
        for o in outcomes:
            assert o == "done" or isinstance(o, StoreClosedError), repr(o)
        with TierStore.open(path, clock=ManualClock(T0 + 40 * DAY)) as again:  # and the next open goes on
            assert again.verify().ok
            again.sweep()
            assert again.engine.catalog.count_due(again.now()) == 0

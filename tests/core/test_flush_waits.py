"""flush() returns only when every access update taken before it is in the
catalog, including one the background flusher took a moment earlier whose
write is still queued."""

from __future__ import annotations

import threading

import numpy as np

from tierstore import ManualClock, TierStore
from tierstore.kernels import columns as C


def test_flush_waits_for_a_write_another_flush_queued(tmp_path):
    store = TierStore.open(tmp_path / "s", dim=8, clock=ManualClock(1_700_000_000.0))
    try:
        mid = store.add("u", "a fact", np.ones(8, np.float32), memory_type="fact")
        store.flush()
        eng = store.engine
        release = threading.Event()
        entered = threading.Event()

        def blocker(conn):  # holds the catalog's writer: later writes queue behind it
            entered.set()
            release.wait(30)

        blocked = eng.catalog.submit(blocker)
        assert entered.wait(10)
        store.touch("u", mid)  # counted in the hot tier, dirty
        other = threading.Thread(target=eng.flush)  # as the background flusher would: takes the state, waits
        other.start()
        hot = eng.hot.get("u")
        slot = hot.slot_of[mid]
        for _ in range(1000):  # until the other flush has taken the dirty state (its write queued)
            if hot.I[C.I_DIRTY, slot] == 0:
                break
            threading.Event().wait(0.01)
        assert hot.I[C.I_DIRTY, slot] == 0
        done = threading.Event()
        mine = threading.Thread(target=lambda: (store.flush(), done.set()))
        mine.start()
        assert not done.wait(0.5)  # the other flush's write is still queued: this one waits for it
        release.set()
        assert done.wait(30)
        blocked.result(10)
        other.join(10)
        assert store.engine.catalog.query_one("SELECT access_count FROM memories WHERE id = ?", (mid,))[0] == 1
    finally:
        release.set()
        store.close()

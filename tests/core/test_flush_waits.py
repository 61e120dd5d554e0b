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


def _state_of_slot(hot, s):
    """What the catalog should hold for slot ``s``: STATE_COLUMNS order, then the rid (one slot at a time, as
    a plain reference for the column-wise take_dirty)."""
    F, I = hot.F, hot.I  # noqa: E741
    f = {c: float(F[c, s]) for c in range(C.NF)}

    def opt(x, ok):
        return x if ok else None

    return (
        f[C.F_LAST_ACCESS],
        int(I[C.I_ACCESS_COUNT, s]),
        opt(f[C.F_CONF_FEEDBACK], not np.isnan(f[C.F_CONF_FEEDBACK])),
        f[C.F_CONF],
        f[C.F_T_CONF],
        int(I[C.I_PINNED, s]),
        f[C.F_W_REF],
        f[C.F_T_REF],
        f[C.F_HALF_LIFE],
        opt(f[C.F_TTL], np.isfinite(f[C.F_TTL])),
        f[C.F_TTL_ANCHOR],
        f[C.F_CTX_MULT],
        opt(f[C.F_DUE], np.isfinite(f[C.F_DUE])),
        opt(f[C.F_TTL_OVERRIDE], not np.isnan(f[C.F_TTL_OVERRIDE])),
        int(hot.rids[s]),
    )


def test_dirty_state_is_taken_column_by_column_as_each_slot_holds_it(tmp_path):
    """take_dirty reads every dirty live slot's columns in one pass: each row equals the slot's own columns
    (None where a column holds no value: no feedback, no TTL, no due time, no override), dead slots and
    clean ones are left out, the flags are cleared, and the access log gets one row per slot with new
    accesses, counted once."""
    clock = ManualClock(1_700_000_000.0)
    rng = np.random.default_rng(3)
    store = TierStore.open(tmp_path / "s", dim=8, clock=clock)
    try:
        vecs = rng.normal(size=(12, 8)).astype(np.float32)
        ids = [
            store.add("u", f"memory {i}", vecs[i], memory_type=("fact", "conversation", "task")[i % 3], pinned=i == 4)
            for i in range(12)
        ]
        store.flush()
        clock.advance(3600)
        store.feedback("u", ids[1], positive=True)  # a feedback value
        store.add("u", "memory 2, corrected", vecs[2], supersedes=ids[2])  # an override of 0 on ids[2]
        store.touch("u", [ids[1], ids[2], ids[3], ids[3], ids[4], ids[5]])  # ids[3] twice
        store.delete("u", ids[6])  # a dead slot
        hot = store.engine.hot.get("u")
        with hot.access_lock:
            dirty = [s for s in np.flatnonzero(hot.I[C.I_DIRTY, : hot.n]).tolist() if hot.I[C.I_ALIVE, s]]
            expected = [_state_of_slot(hot, s) for s in dirty]
            counts = {hot.ids[s]: int(hot.I[C.I_ACCESS_COUNT, s] - hot.I[C.I_FLUSHED_COUNT, s]) for s in dirty}
            states, accesses = hot.take_dirty()
            assert not hot.I[C.I_DIRTY, : hot.n].any()
            again = hot.take_dirty()
        assert {hot.slot_of[i] for i in (ids[1], ids[2], ids[3], ids[4], ids[5])} <= set(dirty)
        assert hot.slot_of.get(ids[6]) is None or hot.slot_of[ids[6]] not in dirty
        assert states == expected
        assert [type(x) for x in states[0]] == [type(x) for x in expected[0]]
        day = int(clock.now() // 86400)
        assert sorted(accesses) == sorted(("u", mid, day, n) for mid, n in counts.items() if n > 0)
        assert ("u", ids[3], day, 2) in accesses and ("u", ids[5], day, 1) in accesses
        assert again == ([], [])
        row = {r[-1]: r for r in states}
        rid = {mid: int(hot.rids[hot.slot_of[mid]]) for mid in (ids[1], ids[2], ids[3], ids[4])}
        assert row[rid[ids[1]]][2] is not None and row[rid[ids[3]]][2] is None  # feedback, none
        assert row[rid[ids[2]]][13] == 0.0 and row[rid[ids[3]]][13] is None  # superseded: override 0
        assert row[rid[ids[4]]][5] == 1 and row[rid[ids[4]]][12] is None  # pinned: never due
    finally:
        store.close()

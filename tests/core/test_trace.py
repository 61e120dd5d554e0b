"""Recording a workload trace and the access log."""

from __future__ import annotations

import pytest
from helpers import DIM, T0, unit

from tierstore import ManualClock, TierStore
from tierstore.core.trace import decode_vector, read_trace
from tierstore.errors import CorruptDataError


def test_trace_records_every_call_with_time_and_vectors(tmp_path, rng):
    clock = ManualClock(T0)
    trace = tmp_path / "trace.jsonl"
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        store.start_trace(trace)
        v = unit(rng)
        mid = store.add("a", "hello", v, tags=["x"], id="m1")
        stored = store.get("a", mid).embedding
        clock.advance(10)
        hits = store.search("a", v, k=1, context_tags=["x"])
        store.touch("a", [mid])
        store.feedback("a", mid, positive=False, strength=0.5)
        store.pin("a", mid)
        store.set_context("a", ["travel"])
        store.delete("a", mid)
        store.stop_trace()
        store.add("a", "not traced", unit(rng))
    recs = list(read_trace(trace))
    assert [r["op"] for r in recs] == ["add", "search", "touch", "feedback", "pin", "set_context", "delete"]
    assert recs[0]["id"] == "m1" and recs[0]["t"] == T0 and recs[1]["t"] == T0 + 10
    assert decode_vector(recs[0]["embedding"]).tobytes() == stored.tobytes()  # the vector as stored
    assert recs[1]["hits"] == [h.id for h in hits] and recs[1]["context_tags"] == ["x"]
    assert recs[3]["strength"] == 0.5 and recs[3]["positive"] is False


def test_bad_trace_is_rejected(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"op": "add", "t": 1}\n{"op": "explode", "t": 2}\n')
    with pytest.raises(CorruptDataError, match="line 2"):
        list(read_trace(bad))


def test_access_log_aggregates_per_memory_and_day(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        a = store.add("a", "x", unit(rng), id="a")
        for _ in range(5):
            store.touch("a", a)
        store.search("a", unit(rng), k=1)  # counts one more (record_access by policy)
        store.flush()
        clock.advance(86400)
        store.touch("a", [a, a])
        store.flush()
        rows = store.engine.catalog.query("SELECT id, day, count FROM access_log ORDER BY day")
    day0 = int(T0 // 86400)
    assert rows == [("a", day0, 6), ("a", day0 + 1, 2)]

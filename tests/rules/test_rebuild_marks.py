"""A catalog rebuilt from the bucket alone keeps slots (keys) and keeps
retired statements retired: archive records carry the memory's key and the
supersession marks on it and by it (tierstore/rules/supersession.py,
``record_marks``; ``TierStore.rebuild_catalog``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import DIM, unit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierstore import ManualClock, TierStore
from tierstore.errors import CorruptDataError
from tierstore.tiers.archive import check_record, decode_batch

HOUR = 3600.0
DAY = 24 * HOUR


def _rebuilt(tmp_path, old, clock):
    """A store with an empty catalog on ``old``'s object store, rebuilt from it."""
    old.close()
    fresh = TierStore.open(tmp_path / "rebuilt", dim=DIM, clock=clock, cold=old.path / "cold", take_over_cold=True)
    return fresh, fresh.rebuild_catalog()


def _archived_slot(tmp_path, clock, rng):
    """A store where slot ``k`` held two memories, ``old`` superseded by
    ``new``, a sweep later (both archived); returns ``(store, old, new, report)``."""
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    old = store.add("u", "v1", unit(rng), memory_type="conversation", key="k")
    new = store.add("u", "v2", unit(rng), memory_type="conversation", key="k")
    clock.advance(2 * HOUR)
    return store, old, new, store.sweep()


def _ids(hits):
    return [h.id for h in hits]


def _supersessions(store):
    return sorted(
        store.engine.catalog.query("SELECT m.id, s.by_id, s.kind FROM supersessions s JOIN memories m ON m.rid = s.rid")
    )


def test_a_retired_statement_stays_retired_and_a_slot_keeps_its_key(tmp_path, clock, rng):
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    v = {name: unit(rng) for name in ("paris", "berlin", "old_plan", "new_plan", "lang")}
    paris = store.add("u", "lives in Paris", v["paris"], memory_type="fact", key="city")
    clock.advance(1.0)
    berlin = store.add("u", "lives in Berlin", v["berlin"], memory_type="fact", key="city")  # retires paris
    old_plan = store.add("u", "plan: ship in May", v["old_plan"], memory_type="conversation")
    lang = store.add("u", "writes Rust", v["lang"], memory_type="conversation", key="lang")
    clock.advance(2 * HOUR)
    assert store.sweep().archived == 3  # paris (TTL 0 once superseded), old_plan, lang
    # a statement superseded after it was archived: the mark is in the superseding memory's record
    new_plan = store.add("u", "plan: ship in June", v["new_plan"], memory_type="conversation", supersedes=[old_plan])
    clock.advance(2 * HOUR)
    assert store.sweep().archived == 1 and store.get("u", new_plan).tier == "cold"
    assert store.get("u", berlin).tier == "hot"  # lost with the catalog
    before = _supersessions(store)
    assert (paris, berlin, "key") in before and (old_plan, new_plan, "explicit") in before

    fresh, counts = _rebuilt(tmp_path, store, clock)
    try:
        assert counts["inserted"] == 4 and counts["marks"] == 2
        assert _supersessions(fresh) == sorted([(old_plan, new_plan, "explicit"), (paris, berlin, "key")])
        # the retired statements stay retired: still found (true history), demoted, after what replaced them ...
        for name, mid in (("paris", paris), ("old_plan", old_plan)):
            hits = fresh.search("u", v[name], k=5, include_cold=True, record_access=False, explain=True)
            ex = hits[_ids(hits).index(mid)].explain
            assert ex.superseded_by in (berlin, new_plan) and ex.superseded_factor == 0.5
        ids = _ids(fresh.search("u", v["old_plan"], k=5, include_cold=True, record_access=False))
        assert ids.index(new_plan) < ids.index(old_plan)
        assert _ids(fresh.search("u", v["new_plan"], k=1, include_cold=True, record_access=False)) == [new_plan]
        # ... restore by id still reaches them
        assert fresh.restore("u", ids=[paris]) == [paris]
        # the slot is back: the key's memory, and a new value supersedes it
        assert fresh.get_by_key("u", "lang").id == lang
        rust = fresh.add("u", "writes Go now", unit(rng), memory_type="fact", key="lang")
        assert fresh.get_by_key("u", "lang").id == rust
        assert (lang, rust, "key") in _supersessions(fresh)
        # a restored mark damps as a fresh one does: TTL 0 (its record was archived after the damping)
        assert fresh.engine.catalog.get_row("u", old_plan).ttl_seconds == 0.0
    finally:
        fresh.close()


def test_a_slot_left_with_two_live_memories_keeps_the_newest(tmp_path, clock, rng):
    # records archived without their marks (as an earlier version wrote them)
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    first = store.add("u", "tea", unit(rng), memory_type="conversation", key="drink")
    clock.advance(5.0)
    second = store.add("u", "coffee", unit(rng), memory_type="conversation", key="drink")
    store.engine.catalog.write(lambda conn: conn.execute("DELETE FROM supersessions"))
    clock.advance(2 * HOUR)
    assert store.sweep().archived == 2
    fresh, counts = _rebuilt(tmp_path, store, clock)
    try:
        assert counts["marks"] == 1
        assert _supersessions(fresh) == [(first, second, "key")]
        assert fresh.get_by_key("u", "drink").id == second
    finally:
        fresh.close()


def test_a_memory_the_catalog_kept_keeps_its_own_state(tmp_path, clock, rng):
    # rebuilt over a catalog that still has the memories: nothing inserted, no mark touched
    store, a, b, swept = _archived_slot(tmp_path, clock, rng)
    assert swept.archived == 2
    before = _supersessions(store)
    counts = store.rebuild_catalog()
    assert counts["inserted"] == 0 and counts["marks"] == 0 and _supersessions(store) == before == [(a, b, "key")]
    store.close()


def test_archive_records_carry_the_marks_and_refuse_malformed_ones(tmp_path, clock, rng):
    store, old, new, _ = _archived_slot(tmp_path, clock, rng)
    key = store.engine.catalog.get_row("u", old).cold_key
    _, records = decode_batch(store.engine.cold.store.get(key), key)
    by_id = {rec["id"]: rec for _, rec in records}
    assert by_id[old]["key"] == "k" and by_id[old]["superseded_by"]["id"] == new
    assert by_id[old]["superseded_by"]["kind"] == "key" and by_id[old]["supersedes"] is None
    assert by_id[new]["superseded_by"] is None and [m["id"] for m in by_id[new]["supersedes"]] == [old]
    store.close()
    rec = dict(by_id[old])
    check_record(rec, "here", DIM)
    for bad in (
        {**rec["superseded_by"], "kind": "maybe"},
        {**rec["superseded_by"], "t": "noon"},
        {k: v for k, v in rec["superseded_by"].items() if k != "id"},
        "k",
    ):
        with pytest.raises(CorruptDataError, match="supersession mark"):
            check_record(
                {**rec, "superseded_by": bad} if isinstance(bad, dict) else {**rec, "supersedes": [bad]}, "here", DIM
            )
    with pytest.raises(CorruptDataError, match="key"):
        check_record({**rec, "key": 5}, "here", DIM)
    older = {k: v for k, v in rec.items() if k not in ("key", "superseded_by", "supersedes")}
    assert check_record(older, "here", DIM) is older  # records written before these fields still read
    assert np.frombuffer(rec["embedding"], "<f4").shape == (DIM,)


OPS = st.lists(
    st.tuples(st.sampled_from(["add", "supersede", "sweep", "delete"]), st.integers(0, 2), st.integers(0, 10_000)),
    min_size=1,
    max_size=24,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_rebuild_keeps_every_slot_and_mark_the_archive_can_know(tmp_path_factory, ops):
    """Random adds to three slots, explicit supersessions, sweeps and deletes,
    then everything archived and the catalog rebuilt from the bucket: each
    slot keeps its live memory and has no other, and every mark made by a
    memory that was not deleted stays. (A mark made on an archived memory
    lives in the archive in the record of the memory that made it: once that
    memory is deleted and a sweep rewrites its object, only the catalog has it;
    a slot then still gets its newest memory back as its live one.)"""
    root = tmp_path_factory.mktemp("fuzz")
    clock = ManualClock(1_700_000_000.0)
    rng = np.random.default_rng(0)
    store = TierStore.open(root / "s", dim=DIM, clock=clock)
    ids: list[str] = []
    gone: set[str] = set()
    n = 0
    for op, slot, pick in ops:
        live = [i for i in ids if i not in gone]
        clock.advance(1.0)  # one add per second: a slot's newest memory is unambiguous
        if op == "add":
            ids.append(store.add("u", f"turn {n}", unit(rng), memory_type="conversation", key=f"k{slot}"))
            n += 1
        elif op == "supersede" and live:
            ids.append(
                store.add("u", f"turn {n}", unit(rng), memory_type="conversation", supersedes=[live[pick % len(live)]])
            )
            n += 1
        elif op == "sweep":
            clock.advance(2 * HOUR)
            store.sweep()
        elif op == "delete" and live:
            mid = live[pick % len(live)]
            assert store.delete("u", mid)
            gone.add(mid)
    clock.advance(2 * HOUR)
    while store.sweep().archived:  # everything left archived: the bucket holds every record it will
        pass
    marks_before = _supersessions(store)
    slots_before = {k: store.get_by_key("u", k) for k in ("k0", "k1", "k2")}
    fresh, _ = _rebuilt(root, store, clock)
    try:
        live_per_slot = fresh.engine.catalog.query(
            "SELECT m.key, count(*) FROM memories m WHERE m.key IS NOT NULL AND NOT EXISTS"
            " (SELECT 1 FROM supersessions s WHERE s.rid = m.rid) GROUP BY m.key"
        )
        assert all(count == 1 for _, count in live_per_slot)
        for k, m in slots_before.items():
            if m is not None:
                assert fresh.get_by_key("u", k).id == m.id
        after = set(_supersessions(fresh))
        for old, new, kind in marks_before:
            if old not in gone and new not in gone:
                assert (old, new, kind) in after
    finally:
        fresh.close()


def test_a_rebuild_cut_short_before_the_marks_is_finished_by_the_next(tmp_path, clock, rng, monkeypatch):
    from tierstore.rules import supersession

    store, old, new, swept = _archived_slot(tmp_path, clock, rng)
    assert swept.archived == 2
    store.close()
    fresh = TierStore.open(tmp_path / "rebuilt", dim=DIM, clock=clock, cold=store.path / "cold", take_over_cold=True)
    try:

        def crash(*args, **kwargs):
            raise RuntimeError("killed before the marks")

        monkeypatch.setattr(supersession, "restore_marks", crash)
        with pytest.raises(RuntimeError, match="before the marks"):
            fresh.rebuild_catalog()
        assert _supersessions(fresh) == [] and fresh.engine.catalog.get_row("u", old).tier == 2  # rows in, marks not
        monkeypatch.undo()
        counts = fresh.rebuild_catalog()
        assert counts["inserted"] == 0 and counts["marks"] == 1
        assert _supersessions(fresh) == [(old, new, "key")] and fresh.get_by_key("u", "k").id == new
    finally:
        fresh.close()

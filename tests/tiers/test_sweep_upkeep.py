"""A sweep's upkeep of the archive keeps up with its own deletes and reads
only what is due.

What is checked: a sweep that deletes archived memories from more objects
than its fixed share of rewrites (64) rewrites all of them, so no deleted
text stays behind and the tombstones are collected the same night; the
queries a sweep runs for pending batches, marked batches and pending
tombstones use an index (they read every row of the store before); the
look for objects left empty by a crash runs once a process, and again after
a failure to collect one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tierstore import ManualClock, Policy, TierStore
from tierstore.errors import ObjectStoreError
from tierstore.storage.objectstore import LocalObjectStore
from tierstore.tiers import migrator as migrator_module

T0 = 1_700_000_000.0
HOUR = 3600.0
DIM = 8
TYPES = {
    "chat": {"ttl": "1h", "half_life": "20m"},
    "keep": {"ttl": "1h", "half_life": "20m", "sweep_deletes": False},
}
ARCHIVING = Policy.from_dict({"types": TYPES})  # confidences 0.8 stay above the delete bar: archived, kept
DELETING = Policy.from_dict({"types": TYPES, "thresholds": {"delete_below_confidence": 1.0}})


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def archived_namespaces(path, cold, clock: ManualClock, n: int) -> None:
    """``n`` namespaces, each with one archive object holding a chat (to be deleted) and a keep."""
    rng = np.random.default_rng(1)
    with TierStore.open(path, dim=DIM, clock=clock, policy=ARCHIVING, cold=cold) as store:
        for i in range(n):
            store.add(f"u{i}", "hello", unit(rng), memory_type="chat", id="chat")
            store.add(f"u{i}", "my name", unit(rng), memory_type="keep", id="keep")
        clock.advance(2 * HOUR)
        while store.sweep().archived:
            pass
        assert store.stats(lifecycle=False).by_tier.get("cold") == 2 * n


def states(store: TierStore) -> dict[str, int]:
    return dict(store.engine.catalog.query("SELECT state, count(*) FROM archives GROUP BY state"))


def test_a_sweep_rewrites_every_object_its_deletes_marked(tmp_path):
    n = 80  # more objects than a sweep's fixed share of rewrites
    assert n > migrator_module._COMPACT_PER_SWEEP
    clock = ManualClock(T0)
    cold = LocalObjectStore(tmp_path / "cold")
    archived_namespaces(tmp_path / "s", cold, clock, n)
    clock.advance(10 * HOUR)  # the chats' weight is under the delete threshold
    with TierStore.open(tmp_path / "s", clock=clock, policy=DELETING, cold=cold) as store:
        report = store.sweep()
        assert report.deleted == n
        assert report.compacted == n  # each object rewritten without its chat, in the same sweep
        assert states(store) == {"done": n}
        for i in range(n):  # the keeps are found where the rewrite put them; the chats are gone
            assert store.get(f"u{i}", "keep").tier == "cold" and store.get(f"u{i}", "chat") is None
        assert store.restore("u7", ids=["keep"]) == ["keep"]
        # the rewritten objects hold no deleted text, so no tombstone is needed any more
        store.sweep()
        assert store.engine.catalog.query("SELECT count(*) FROM tombstones") == [(0,)]
        assert not [k for k in cold.list("tombstone/")]
        assert store.verify().ok


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT key, ns, rids FROM archives WHERE state = 'pending'",
        "SELECT key, ns FROM archives WHERE state = 'purge' ORDER BY batch",
        "SELECT key, ns, id, deleted_at FROM tombstones WHERE state = 'pending' ORDER BY key, id",
    ],
)
def test_what_a_sweep_asks_of_batches_and_tombstones_uses_an_index(tmp_path, sql):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        plan = " ".join(str(r[3]) for r in store.engine.catalog.query("EXPLAIN QUERY PLAN " + sql))
    assert "USING INDEX" in plan and "SCAN" not in plan and "TEMP B-TREE" not in plan, plan


def test_the_look_for_emptied_objects_runs_once_a_process_and_after_a_failed_collection(tmp_path, monkeypatch):
    clock = ManualClock(T0)
    cold = LocalObjectStore(tmp_path / "cold")
    archived_namespaces(tmp_path / "s", cold, clock, 3)
    with TierStore.open(tmp_path / "s", clock=clock, policy=ARCHIVING, cold=cold) as store:
        catalog = store.engine.catalog
        asked: list[str] = []
        real = catalog.query

        def counted(sql, params=()):
            if "FROM archives a WHERE state != 'pending' AND NOT EXISTS" in sql:
                asked.append(sql)
            return real(sql, params)

        monkeypatch.setattr(catalog, "query", counted)
        store.sweep()
        store.sweep()
        assert len(asked) == 1  # the first sweep of the process only
        # a delete whose object's removal fails leaves an emptied object: the next sweep looks again
        real_delete = cold.delete
        monkeypatch.setattr(cold, "delete", lambda key: (_ for _ in ()).throw(ObjectStoreError("down")))
        store.delete("u1", "chat")
        with pytest.raises(ObjectStoreError):
            store.delete("u1", "keep")
        key_left = [k for k in cold.list("archive/u1/")]
        assert key_left  # the object stays, holding nothing anyone points at
        monkeypatch.setattr(cold, "delete", real_delete)
        store.sweep()
        assert len(asked) == 2
        assert not [k for k in cold.list("archive/u1/")]  # collected by that look
        store.sweep()
        assert len(asked) == 2


def test_marked_objects_are_rewritten_in_groups_with_few_commits(tmp_path):
    """40 objects marked by deletes: rewritten in two groups (32 and 8), each
    paying one transaction to record its batches, one to move its rows and one
    to forget the old objects, and two syncs — not three commits and two syncs
    per object."""
    n = 40
    clock = ManualClock(T0)
    cold = LocalObjectStore(tmp_path / "cold")
    archived_namespaces(tmp_path / "s", cold, clock, n)
    with TierStore.open(tmp_path / "s", clock=clock, policy=ARCHIVING, cold=cold) as store:
        for i in range(n):
            store.delete(f"u{i}", "chat")
        assert states(store) == {"purge": n}
        catalog = store.engine.catalog
        commits, syncs = catalog.commits, catalog.syncs
        assert store.engine.migrator.compact_archives(clock.now()) == n
        assert catalog.commits - commits <= 2 * 3
        assert catalog.syncs - syncs <= 2 * 2
        assert states(store) == {"done": n}
        assert len(cold.list("archive/")) == n  # the old objects collected, one new object each
        for i in range(n):
            assert store.restore(f"u{i}", ids=["keep"]) == ["keep"]
        assert store.verify().ok


def test_rewrite_groups_bound_objects_and_records():
    small = [(f"k{i}", "u", 10) for i in range(70)]
    groups = list(migrator_module.rewrite_groups(small))
    assert [len(g) for g in groups] == [32, 32, 6]
    assert [k for g in groups for k, _ in g] == [k for k, _, _ in small]  # in order, each once
    big = [("a", "u", 3000), ("b", "u", 2000), ("c", "v", 5000), ("d", "v", 1)]
    assert [[k for k, _ in g] for g in migrator_module.rewrite_groups(big)] == [["a"], ["b"], ["c"], ["d"]]
    assert list(migrator_module.rewrite_groups([])) == []


def test_a_sweeps_deletes_leave_the_loaded_codes_without_a_search(tmp_path):
    # A long-running process keeps each searched namespace's codes loaded; the sweep's deletes of
    # archived memories take theirs out at once (they stayed until a search met them before).
    clock = ManualClock(T0)
    cold = LocalObjectStore(tmp_path / "cold")
    archived_namespaces(tmp_path / "s", cold, clock, 3)
    clock.advance(10 * HOUR)
    with TierStore.open(tmp_path / "s", clock=clock, policy=DELETING, cold=cold) as store:
        index = store.engine.cold_index
        rid = {
            m: store.engine.catalog.query_one("SELECT rid FROM memories WHERE ns = 'u1' AND id = ?", (m,))[0]
            for m in ("chat", "keep")
        }
        q = unit(np.random.default_rng(5))
        assert store.search("u1", q, k=2, include_cold=True, record_access=False)  # loads u1's codes
        assert index.count_if_loaded("u1") == 2 and index.count_if_loaded("u2") is None
        token = index.generation("u1")
        assert store.sweep().deleted == 3
        assert index.count_if_loaded("u1") == 1  # no search since
        rids, _ = index.candidates("u1", q, m=5)
        assert rids.tolist() == [rid["keep"]]
        assert index.generation("u1") != token  # a load or a search's discard under way is not taken
        assert index.count_if_loaded("u2") is None  # not loaded: nothing read for it
        hits = store.search("u1", q, k=2, include_cold=True, record_access=False)
        assert [h.id for h in hits] == ["keep"]


def test_a_sweep_that_moved_memories_gives_the_freed_pages_back_once(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(migrator_module, "release_freed", lambda: calls.append(1) or True)
    clock = ManualClock(T0)
    cold = LocalObjectStore(tmp_path / "cold")
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, policy=ARCHIVING, cold=cold) as store:
        rng = np.random.default_rng(2)
        for i in range(5):
            store.add(f"u{i}", "hello", unit(rng), memory_type="chat")
        assert store.sweep().archived == 0 and calls == []  # nothing due, nothing moved: no trim
        clock.advance(2 * HOUR)
        assert store.sweep().archived == 5
        assert calls == [1]  # one trim for the sweep, not one per batch or memory
        store.sweep()
        assert calls == [1]

"""Tombstones: a deleted memory stays forgotten when the catalog is rebuilt
from the object store alone, until a sweep has rewritten every archive object
that held its record (tierstore/tiers/tombstones.py)."""

from __future__ import annotations

import pytest
from helpers import DIM, T0, unit

from tierstore import ManualClock, TierStore
from tierstore.errors import CorruptDataError, ObjectStoreError
from tierstore.storage.objectstore import LocalObjectStore
from tierstore.tiers import tombstones
from tierstore.tiers.tombstones import TOMBSTONE_PREFIX, Tombstone, decode, encode

HOUR = 3600.0


def _stones(store):
    return store.engine.cold.store.list(TOMBSTONE_PREFIX + "/")


def _rows(store):
    return store.engine.catalog.query("SELECT ns, id, state FROM tombstones ORDER BY key")


def _archive(store, clock, rng, contents=("alpha secret", "bravo", "charlie", "delta"), **fields):
    return _archive_in(store, clock, rng, {"c": contents}, **fields)["c"]


def _archive_in(store, clock, rng, contents_by_ns, **fields):
    """Conversation memories of each namespace, archived by one sweep; their ids by namespace."""
    ids = {
        ns: store.add_batch(
            ns, [{"content": c, "embedding": unit(rng), "memory_type": "conversation", **fields} for c in contents]
        )
        for ns, contents in contents_by_ns.items()
    }
    clock.advance(2 * HOUR)
    assert store.sweep().archived == sum(len(v) for v in ids.values())
    return ids


def _rebuilt(tmp_path, old, clock):
    """A store with an empty catalog on the same object store, rebuilt from it
    (the catalog of ``old`` lost)."""
    fresh = TierStore.open(tmp_path / "rebuilt", dim=DIM, clock=clock, cold=old.path / "cold", take_over_cold=True)
    return fresh, fresh.rebuild_catalog()


def test_a_deleted_archived_memory_is_not_brought_back_by_a_rebuild(tmp_path, clock, rng):
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = _archive(store, clock, rng)
    assert _stones(store) == [] and _rows(store) == []  # archiving writes none
    assert store.delete("c", ids[0])
    (stone,) = _stones(store)
    assert stone.startswith("tombstone/c/") and _rows(store) == [("c", ids[0], "written")]
    (t,) = decode(store.engine.cold.store.get(stone), stone)
    assert (t.ns, t.id, t.deleted_at) == ("c", ids[0], clock.now())
    store.close()  # the catalog is lost before any sweep rewrote the object

    fresh, counts = _rebuilt(tmp_path, store, clock)
    assert counts["forgotten"] == 1 and counts["inserted"] == 3
    assert fresh.get("c", ids[0]) is None
    # the rebuilt catalog knows the object holds a forgotten record, and the tombstone
    assert fresh.engine.catalog.query("SELECT state FROM archives") == [("purge",)]
    assert _rows(fresh) == [("c", ids[0], "written")]
    report = fresh.sweep()
    assert report.compacted == 1 and not report.errors
    assert _stones(fresh) == [] and _rows(fresh) == []  # no object needs it any more
    assert all(b"alpha secret" not in fresh.engine.cold.store.get(k) for k in fresh.engine.cold.list_batches())
    assert sorted(fresh.restore("c", ids=ids[1:])) == sorted(ids[1:])
    assert fresh.get("c", ids[1]).content == "bravo"
    fresh.close()


def test_a_restored_memory_deleted_from_the_hot_tier_gets_a_tombstone(tmp_path, clock, rng):
    """Its record in the old object is stale (marked purge); deleting it while
    hot must still keep a rebuild from bringing it back."""
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = _archive(store, clock, rng)
    assert store.restore("c", ids=[ids[0]]) == [ids[0]]
    assert store.get("c", ids[0]).tier == "hot"
    assert store.delete("c", ids[0])
    assert len(_stones(store)) == 1
    store.close()
    fresh, counts = _rebuilt(tmp_path, store, clock)
    assert counts["forgotten"] == 1 and fresh.get("c", ids[0]) is None
    fresh.close()


def test_a_delete_that_leaves_no_record_writes_no_tombstone(store, clock, rng):
    plain = store.add("h", "never archived", unit(rng))
    assert store.delete("h", plain)
    # a namespace with a stale object, holding other memories' records only
    ids = _archive(store, clock, rng)
    store.restore("c", ids=[ids[1]])
    assert store.engine.catalog.query("SELECT state FROM archives") == [("purge",)]
    fresh = store.add("c", "added after the archive", unit(rng))
    assert store.delete("c", fresh)
    assert _stones(store) == [] and _rows(store) == []


def test_a_memory_added_again_under_the_same_id_comes_back_as_its_new_self(tmp_path, clock, rng):
    """Records archived at or before the tombstone are forgotten, later ones
    are the new memory's."""
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    (old_id,) = _archive(store, clock, rng, contents=("old text",))
    (old_key,) = store.engine.cold.list_batches()
    old_bytes = store.engine.cold.store.get(old_key)
    assert store.delete("c", old_id)
    (stone,) = _stones(store)
    stone_bytes = store.engine.cold.store.get(stone)
    clock.advance(1.0)
    store.add("c", "new text", unit(rng), memory_type="conversation", id=old_id)
    clock.advance(2 * HOUR)
    report = store.sweep()  # archives the new one, rewrites the old object away, drops the tombstone
    assert report.archived == 1 and _stones(store) == []
    # as if the old object's delete and the tombstone's had been lost
    assert store.engine.cold.store.put_if_absent(old_key, old_bytes)
    assert store.engine.cold.store.put_if_absent(stone, stone_bytes)
    store.close()
    fresh, counts = _rebuilt(tmp_path, store, clock)
    assert counts["forgotten"] == 1 and counts["inserted"] == 1
    assert fresh.get("c", old_id).content == "new text"
    fresh.close()


def test_a_memory_the_policy_deletes_from_the_cold_tier_gets_a_tombstone(tmp_path, clock, rng, monkeypatch):
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    # an unknown source: confidence is the caller's 0.32 alone, just above the delete bar (0.3)
    ids = _archive(store, clock, rng, confidence=0.32, source="notes")
    store.feedback("c", ids[0], positive=False)  # below the bar; expired and light already
    monkeypatch.setattr(store.engine.migrator, "compact_archives", lambda *a, **k: 0)  # the rewrite has to wait
    report = store.sweep()
    assert report.deleted == 1 and store.get("c", ids[0]) is None
    assert _rows(store) == [("c", ids[0], "written")]  # kept: the object still holds the record
    store.close()
    fresh, counts = _rebuilt(tmp_path, store, clock)
    assert counts["forgotten"] == 1 and counts["inserted"] == 3
    fresh.close()


class FailingTombstones(LocalObjectStore):
    """A local store whose tombstone writes fail while ``failing`` is set."""

    def __init__(self, root):
        super().__init__(root)
        self.failing = False
        self.written: list[str] = []

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if key.startswith(TOMBSTONE_PREFIX + "/"):
            if self.failing:
                raise ObjectStoreError(f"injected failure writing {key}")
            self.written.append(key)
        return super().put_if_absent(key, data)


def test_a_tombstone_that_could_not_be_written_is_written_by_a_later_sweep(tmp_path, clock, rng):
    objects = FailingTombstones(tmp_path / "bucket")
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock, cold=objects)
    ids = _archive(store, clock, rng)
    objects.failing = True
    assert store.delete("c", ids[0])  # committed: the catalog forgot it; the tombstone waits
    assert store.get("c", ids[0]) is None
    assert _rows(store) == [("c", ids[0], "pending")] and _stones(store) == []
    report = store.sweep()
    assert any("injected failure" in e for e in report.errors)
    assert _rows(store) == [("c", ids[0], "pending")]  # a pending one is never dropped unwritten
    objects.failing = False
    report = store.sweep()
    assert not report.errors and len(objects.written) == 1
    assert _rows(store) == [] and _stones(store) == []  # written, then dropped: the object was rewritten
    store.close()


def test_damaged_tombstones_are_named(tmp_path, clock, rng):
    good = Tombstone("ns", "id-1", T0)
    assert decode(encode([good]), "t") == [good]
    data = encode([good])
    for bad in (
        b"",
        b"XXXXXXXX" + data[8:],
        data[:-1],
        data + b"\x00",
        data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:],
    ):
        with pytest.raises(CorruptDataError, match="tombstone t"):
            decode(bad, "tombstone t")
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = _archive(store, clock, rng)
    store.delete("c", ids[0])
    (stone,) = _stones(store)
    store.engine.cold.store.put(stone, data[:-1])
    store.close()
    fresh = TierStore.open(
        tmp_path / "rebuilt", dim=DIM, clock=ManualClock(T0), cold=store.path / "cold", take_over_cold=True
    )
    with pytest.raises(CorruptDataError, match=stone):
        fresh.rebuild_catalog()
    assert fresh.stats().total == 0  # nothing was inserted before the check
    fresh.close()


def test_verify_reports_a_missing_or_damaged_tombstone_and_repair_rewrites_it(store, clock, rng):
    ids = _archive(store, clock, rng)
    store.delete("c", ids[0])
    store.delete("c", ids[1])
    first, second = _stones(store)
    assert store.verify().ok and store.verify().checked["tombstones"] == 2
    store.engine.cold.store.delete(first)
    store.engine.cold.store.put(second, b"TSTOMB01 not a frame")
    report = store.verify()
    assert sorted(p.where for p in report.problems) == sorted([first, second])
    assert all(p.kind == "tombstone" and p.repairable for p in report.problems)
    fixed = store.repair()
    assert fixed.ok and len(fixed.repaired) == 2
    got = {t.id for k in (first, second) for t in decode(store.engine.cold.store.get(k), k)}
    assert got == {ids[0], ids[1]}


def test_the_queries_of_a_delete_read_one_namespace_of_batches(store):
    """stale_rids (every cold delete) and the tombstones' collection (every
    tombstone) look a namespace's batches up by index, not by reading every
    batch of the store: a year of nightly batches made each night's deletes
    cost O(deletes x batches) (docs/scale.md)."""
    conn = store.engine.catalog
    stale = conn.query("EXPLAIN QUERY PLAN " + tombstones._STALE_RIDS_SQL, ("u",))
    collect = conn.query("EXPLAIN QUERY PLAN " + tombstones._COLLECTABLE_SQL)
    for plan in (stale, collect):
        steps = [row[-1] for row in plan]
        assert any("USING" in s and "INDEX archives_ns" in s for s in steps), steps
        assert not any(s == "SCAN a" for s in steps), steps


def _said(namespaces, per):
    return {ns: [f"{ns} said {i}" for i in range(per)] for ns in namespaces}


def test_a_sweeps_deletes_share_one_tombstone_object_per_namespace(tmp_path, clock, rng, monkeypatch):
    """One object per namespace and delete transaction, naming each memory it
    deleted there (one object each cost a PUT and a DELETE apiece: a night of
    the platform year deletes thousands); a rebuild keeps every one of them
    forgotten, and the sweep that rewrote the archives drops the objects."""
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    # an unknown source: confidence is the caller's 0.32 alone, just above the delete bar (0.3)
    ids = _archive_in(store, clock, rng, _said(("a", "b"), 4), confidence=0.32, source="notes")
    gone = {"a": ids["a"][:3], "b": ids["b"][:2]}
    for ns, mids in gone.items():
        for mid in mids:
            store.feedback(ns, mid, positive=False)  # below the bar; expired and light already
    monkeypatch.setattr(store.engine.migrator, "compact_archives", lambda *a, **k: 0)  # the rewrite has to wait
    assert store.sweep().deleted == 5
    stones = _stones(store)
    assert len(stones) == 2
    named = {k: decode(store.engine.cold.store.get(k), k) for k in stones}
    by_ns = {ts[0].ns: sorted(t.id for t in ts) for ts in named.values()}
    assert by_ns == {ns: sorted(m) for ns, m in gone.items()}
    assert all(t.deleted_at == clock.now() for ts in named.values() for t in ts)
    assert sorted(_rows(store)) == sorted((ns, m, "written") for ns, ms in gone.items() for m in ms)
    assert store.verify().ok and store.verify().checked["tombstones"] == 2
    store.close()

    fresh, counts = _rebuilt(tmp_path, store, clock)
    assert counts["forgotten"] == 5 and counts["inserted"] == 3
    assert all(fresh.get(ns, m) is None for ns, ms in gone.items() for m in ms)
    assert all(fresh.get(ns, ids[ns][-1]) is not None for ns in gone)
    assert len(_rows(fresh)) == 5
    report = fresh.sweep()  # rewrites the two objects that held the records, then drops the tombstones
    assert not report.errors and _stones(fresh) == [] and _rows(fresh) == []
    fresh.close()


def test_a_tombstone_object_of_the_first_version_is_read(tmp_path, clock, rng):
    """Objects written by earlier code name one memory (version 1)."""
    from tierstore.tiers.archive import frame, pack

    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = _archive(store, clock, rng)
    store.close()
    old = {"format": tombstones.FORMAT, "version": 1, "ns": "c", "id": ids[0], "deleted_at": clock.now()}
    key = tombstones.new_key("c")
    store.engine.cold.store.put(key, tombstones.MAGIC + frame(pack(old)))
    assert decode(store.engine.cold.store.get(key), key) == [Tombstone("c", ids[0], clock.now())]
    fresh, counts = _rebuilt(tmp_path, store, clock)
    assert counts["forgotten"] == 1 and fresh.get("c", ids[0]) is None
    assert _rows(fresh) == [("c", ids[0], "written")]
    fresh.close()


def test_an_object_names_one_namespace_and_at_least_one_memory():
    with pytest.raises(ValueError, match="at least one"):
        encode([])
    with pytest.raises(ValueError, match="one namespace"):
        encode([Tombstone("a", "x", T0), Tombstone("b", "y", T0)])
    two = [Tombstone("a", "x", T0), Tombstone("a", "y", T0 + 1)]
    assert decode(encode(two), "t") == two


def test_repair_rewrites_an_object_naming_several_memories(tmp_path, clock, rng, monkeypatch):
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = _archive_in(store, clock, rng, _said(("a",), 4), confidence=0.32, source="notes")
    for mid in ids["a"][:3]:  # one stays: an object of deleted records only is dropped at once
        store.feedback("a", mid, positive=False)
    monkeypatch.setattr(store.engine.migrator, "compact_archives", lambda *a, **k: 0)
    assert store.sweep().deleted == 3
    (stone,) = _stones(store)
    store.engine.cold.store.delete(stone)
    report = store.verify()
    assert [p.where for p in report.problems] == [stone]
    assert store.repair().ok
    assert sorted(t.id for t in decode(store.engine.cold.store.get(stone), stone)) == sorted(ids["a"][:3])
    store.close()


def test_a_catalog_keyed_by_object_alone_is_upgraded_with_its_rows(tmp_path, clock, rng):
    """Earlier code keyed ``tombstones`` by the object key (one memory per
    object); the first writable open keys it by (object, id), rows kept."""
    import sqlite3

    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = _archive(store, clock, rng)
    store.delete("c", ids[0])
    (stone,) = _stones(store)
    store.close()
    db = sqlite3.connect(store.path / "catalog.sqlite")
    db.executescript(
        "DROP TABLE tombstones;"
        "CREATE TABLE tombstones (key TEXT PRIMARY KEY, ns TEXT NOT NULL, id TEXT NOT NULL,"
        " deleted_at REAL NOT NULL, state TEXT NOT NULL);"
    )
    db.execute("INSERT INTO tombstones VALUES (?, 'c', ?, ?, 'written')", (stone, ids[0], clock.now()))
    db.commit()
    db.close()
    again = TierStore.open(store.path, dim=DIM, clock=clock)
    pk = {r[1]: r[5] for r in again.engine.catalog.query("PRAGMA table_info(tombstones)")}
    assert pk["key"] and pk["id"]
    assert _rows(again) == [("c", ids[0], "written")]
    assert again.verify().ok
    again.sweep()  # the object that held the record is rewritten; the tombstone goes
    assert _rows(again) == [] and _stones(again) == []
    again.close()

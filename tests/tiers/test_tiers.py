"""Warm and cold tiers, the migrator, restore (issue 3)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from helpers import DIM, T0, unit

from tierstore import InvalidInputError, ManualClock, MemoryNotFoundError, TierStore
from tierstore.errors import CorruptDataError
from tierstore.rules.supersession import record_marks
from tierstore.storage.catalog import SCHEMA
from tierstore.tiers.warm import WarmSettings, WarmTier

DAY = 86400.0
HOUR = 3600.0


def tiers_of(store, ns, ids):
    return [store.get(ns, i).tier for i in ids]


def test_sixty_days_of_sweeps(tmp_path, rng):
    """Conversations end cold, used facts stay hot, pinned stay hot; restore by
    id, filter and keyword brings memories back bit-identical and searchable."""
    clock = ManualClock(T0)
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    pinned = store.add(
        "u",
        "emergency contact is Ana",
        unit(rng),
        memory_type="fact",
        pinned=True,
        confidence=0.99,
        source="user_confirmation",
    )
    used = store.add_batch(
        "u",
        [
            {"content": f"used fact {i}", "embedding": unit(rng), "memory_type": "fact", "tags": ["work"]}
            for i in range(5)
        ],
    )
    unused = store.add_batch(
        "u",
        [
            {
                "content": f"unused fact {i} about the passport office",
                "embedding": unit(rng),
                "memory_type": "fact",
                "tags": ["travel"],
            }
            for i in range(5)
        ],
    )
    chats: list[str] = []
    originals = {}
    for day in range(60):
        clock.set(T0 + day * DAY + 9 * HOUR)
        new = store.add_batch(
            "u",
            [
                {
                    "content": f"chat day {day} #{j} weather talk",
                    "embedding": unit(rng),
                    "memory_type": "conversation",
                    "tags": ["chat", f"d{day % 7}"],
                }
                for j in range(3)
            ],
        )
        for mid in new:
            originals[mid] = store.get("u", mid)
        chats += new
        if day % 2 == 0:
            store.touch("u", used)
        clock.set(T0 + day * DAY + 23 * HOUR)
        report = store.sweep()
        assert not report.errors
    assert set(tiers_of(store, "u", chats)) == {"cold"}
    assert set(tiers_of(store, "u", used)) == {"hot"}
    assert store.get("u", pinned).tier == "hot"
    assert set(tiers_of(store, "u", unused)) <= {"warm", "cold"}
    stats = store.stats()
    assert stats.by_type["conversation"]["cold"] == len(chats)
    # every transition is in the lifecycle log
    kinds = {k for (k,) in store.engine.catalog.query("SELECT DISTINCT kind FROM events")}
    assert {"create", "archive"} <= kinds

    # -- restore by id: bit-identical, searchable
    target = chats[10]
    assert (
        store.search("u", originals[target].embedding, k=3, record_access=False, include_cold=False)[0].id != target
    )  # hot and warm alone do not have it
    found = store.search("u", originals[target].embedding, k=3, record_access=False, explain=True)[0]
    assert found.id == target and found.memory.tier == "cold"  # "auto" reached the cold tier, and says why
    assert "answered weakly" in found.explain.reached_because
    assert store.get("u", target).tier == "cold"  # not used (no access recorded): still archived
    assert store.restore("u", ids=[target]) == [target]
    back = store.get("u", target)
    assert back.tier == "hot"
    assert back.content == originals[target].content
    assert back.embedding.tobytes() == originals[target].embedding.tobytes()
    assert back.tags == originals[target].tags and back.created_at == originals[target].created_at
    assert store.search("u", originals[target].embedding, k=1, record_access=False)[0].id == target

    # -- restore by filter: type and tags
    by_filter = store.restore("u", where={"memory_type": "conversation", "tags": ["d3"]})
    assert by_filter and all("d3" in store.get("u", i).tags for i in by_filter)
    expected = {m for m in chats if "d3" in originals[m].tags} - {target}
    assert set(by_filter) == expected
    for mid in by_filter:
        assert store.get("u", mid).embedding.tobytes() == originals[mid].embedding.tobytes()

    # -- restore by keyword (FTS5 over archived text)
    cold_unused = [m for m in unused if store.get("u", m).tier == "cold"]
    if cold_unused:
        by_text = store.restore("u", text="passport office")
        assert set(by_text) == set(cold_unused)
    by_text = store.restore("u", text="day 42 weather", limit=2)
    assert 1 <= len(by_text) <= 2 and all("day 42" in store.get("u", i).content for i in by_text)
    store.close()

    # everything survives a reopen
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as again:
        assert again.get("u", target).embedding.tobytes() == originals[target].embedding.tobytes()
        hits = again.search("u", originals[target].embedding, k=3, record_access=False, explain=True)
        assert hits[0].id == target


def test_warm_tier_search_merge_and_promotion(store, clock, rng):
    vecs = [unit(rng) for _ in range(6)]
    ids = [store.add("w", f"fact {i}", v, memory_type="fact") for i, v in enumerate(vecs)]
    clock.advance(20 * DAY)  # unused facts decay below the demote threshold before their TTL
    report = store.sweep()
    assert report.demoted == 6 and set(tiers_of(store, "w", ids)) == {"warm"}
    hot_one = store.add("w", "fresh", -vecs[2])  # fresh and hot, but unrelated to the query below
    hits = store.search("w", vecs[2], k=2, record_access=False, explain=True)
    assert hits[0].id == ids[2] and hits[0].memory.tier == "warm" and hits[0].explain.tier == "warm"
    assert {h.memory.tier for h in store.search("w", vecs[2], k=3, include_warm=False, record_access=False)} == {"hot"}
    assert store.get("w", ids[2]).tier == "warm"  # not used: stays warm
    # a used warm hit moves back to hot, with the access counted
    store.search("w", vecs[2], k=1, record_access=True)
    m = store.get("w", ids[2])
    assert m.tier == "hot" and m.access_count == 1
    # touch promotes too; a warm memory takes feedback and pins where it is
    store.touch("w", ids[3])
    assert store.get("w", ids[3]).tier == "hot"
    before = store.get("w", ids[4])
    after = store.feedback("w", ids[4], positive=False)
    assert after.tier == "warm" and after.confidence < before.confidence
    store.pin("w", ids[5])
    assert store.get("w", ids[5]).pinned and store.get("w", ids[5]).due_at is None
    assert store.delete("w", ids[4]) and store.get("w", ids[4]) is None
    assert ids[4] not in {h.id for h in store.search("w", vecs[4], k=5, record_access=False)}
    assert store.search("w", -vecs[2], k=1, record_access=False)[0].id == hot_one


def test_search_whose_warm_shards_go_away_mid_search_returns_the_hot_hits(store, clock, rng, monkeypatch):
    """The background migrator may archive or merge a namespace's last warm
    shards between the search's look at the warm tier and its warm pass; the
    search then returns what the hot tier found (it raised ValueError)."""
    vecs = [unit(rng) for _ in range(4)]
    store.add_batch("w", [{"content": f"fact {i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(vecs)])
    clock.advance(20 * DAY)
    assert store.sweep().demoted == 4
    hot = store.add("w", "fresh", vecs[0])
    listed = store.engine.warm.shards

    def vanishing(ns, calls=[]):  # noqa: B006 - counts the calls
        calls.append(ns)
        return listed(ns) if len(calls) == 1 else []

    monkeypatch.setattr(store.engine.warm, "shards", vanishing)
    hits = store.search("w", vecs[0], k=3, record_access=False)
    assert [h.id for h in hits] == [hot]


def test_warm_shard_is_rebuilt_when_mostly_tombstones(store, clock, rng):
    vecs = [unit(rng) for _ in range(40)]
    ids = store.add_batch(
        "w", [{"content": f"f{i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(vecs)]
    )
    clock.advance(20 * DAY)
    store.sweep()
    (shard,) = store.engine.warm.shards("w")
    store.touch("w", ids[:10])  # 10 of 40 leave the shard for hot ...
    for mid in ids[10:30]:  # ... and 20 are forgotten: 30 tombstones
        store.delete("w", mid)
    store.engine.migrator.compact_warm("w", clock.now())
    (rebuilt,) = store.engine.warm.shards("w")
    assert rebuilt.shard != shard.shard and rebuilt.count == 10
    assert not (store.path / "warm" / shard.name).exists()
    for i in range(30, 40):
        hits = store.search("w", vecs[i], k=11, record_access=False)
        assert [h for h in hits if h.memory.tier == "warm"][0].id == ids[i]


def test_damaged_shard_is_skipped_then_rebuilt_from_catalog(store, clock, rng):
    vecs = [unit(rng) for _ in range(10)]
    ids = store.add_batch(
        "w", [{"content": f"f{i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(vecs)]
    )
    clock.advance(20 * DAY)
    store.sweep()
    (info,) = store.engine.warm.shards("w")
    path = store.path / "warm" / info.name / "vectors.f32"
    data = bytearray(path.read_bytes())
    data[7] ^= 0x55
    path.write_bytes(bytes(data))
    store.engine.warm.forget(info.shard)
    store.add("w", "a hot one", unit(rng))
    hits = store.search("w", vecs[3], k=3, record_access=False)  # still serves the hot tier
    assert all(h.memory.tier == "hot" for h in hits)
    assert any("vectors.f32" in e for e in store.engine.warm.errors)
    with pytest.raises(CorruptDataError, match="vectors.f32"):
        store.engine.warm.load(info)
    store.engine.migrator.rebuild_shards("w", [info], clock.now())
    assert store.search("w", vecs[3], k=1, record_access=False)[0].id == ids[3]


def test_archive_objects_are_collected_when_empty(store, clock, rng):
    ids = store.add_batch(
        "c", [{"content": f"chat {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(4)]
    )
    clock.advance(2 * HOUR)
    store.sweep()
    keys = store.engine.cold.list_batches()
    assert len(keys) == 1
    store.delete("c", ids[0])
    store.restore("c", ids=ids[1:3])
    assert store.engine.cold.list_batches() == keys  # one record still cold there
    store.restore("c", ids=[ids[3]])
    assert store.engine.cold.list_batches() == []
    assert {store.get("c", i).tier for i in ids[1:]} == {"hot"}


def test_restore_validates_its_arguments(store, clock, rng):
    mid = store.add("c", "chat", unit(rng), memory_type="conversation")
    clock.advance(2 * HOUR)
    store.sweep()
    with pytest.raises(InvalidInputError):
        store.restore("c")
    with pytest.raises(MemoryNotFoundError):
        store.restore("c", ids=[mid, "nope"])
    with pytest.raises(InvalidInputError, match="unknown keys"):
        store.restore("c", where={"colour": "red"})
    with pytest.raises(InvalidInputError):
        store.restore("c", text="  ")
    assert store.get("c", mid).tier == "cold"
    with pytest.raises(InvalidInputError, match="has no words"):
        store.restore("c", text='" * ( )')
    assert store.restore("c", text='nothing" NOT chat') == [mid]  # words, never FTS syntax: any word matches


def test_sweep_is_bounded_and_reads_only_due(store, clock, rng):
    store.add_batch("b", [{"content": f"fact {i}", "embedding": unit(rng), "memory_type": "fact"} for i in range(500)])
    store.add_batch(
        "b", [{"content": f"chat {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(50)]
    )
    clock.advance(2 * HOUR)
    first = store.sweep(max_items=20)
    assert first.examined == 20 and first.archived == 20 and first.remaining_due == 30
    rest = store.sweep()
    assert rest.examined == 30 and rest.remaining_due == 0
    assert store.stats().by_tier == {"hot": 500, "warm": 0, "cold": 50}


def test_background_migrator(tmp_path, rng):
    import time

    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        store.add_batch(
            "bg", [{"content": f"chat {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(30)]
        )
        clock.advance(2 * HOUR)
        store.start_migrator(interval_s=0.02, max_items=7)
        deadline = time.time() + 20
        while time.time() < deadline and store.stats().by_tier["cold"] < 30:
            time.sleep(0.02)
        store.stop_migrator()
        assert store.stats().by_tier["cold"] == 30
        assert not store.engine.migrator.running


def test_lost_shard_files_are_rebuilt_by_the_next_sweep(store, clock, rng):
    import shutil

    vecs = [unit(rng) for _ in range(12)]
    ids = store.add_batch(
        "w", [{"content": f"f{i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(vecs)]
    )
    clock.advance(20 * DAY)
    store.sweep()
    (info,) = store.engine.warm.shards("w")
    shutil.rmtree(store.path / "warm" / info.name)  # e.g. a power cut before the files reached the disk
    store.engine.warm.forget(info.shard)
    assert store.search("w", vecs[4], k=1, record_access=False) == []  # skipped, not an error
    assert info.shard in store.engine.warm.damaged
    store.sweep()
    assert not store.engine.warm.damaged
    hit = store.search("w", vecs[4], k=1, record_access=False)[0]
    assert hit.id == ids[4] and hit.memory.tier == "warm"


def _archive_four(store, clock, rng, contents=("alpha secret", "bravo", "charlie", "delta")):
    ids = store.add_batch(
        "c", [{"content": c, "embedding": unit(rng), "memory_type": "conversation"} for c in contents]
    )
    vecs = {i: store.get("c", i).embedding.tobytes() for i in ids}
    clock.advance(2 * HOUR)
    assert store.sweep().archived == len(ids)
    (key,) = store.engine.cold.list_batches()
    return ids, vecs, key


def test_deleting_an_archived_memory_purges_its_record_at_the_next_sweep(store, clock, rng):
    """A delete leaves no text behind: the archive object holding the record is
    marked, the next sweep rewrites it without the record, and the others stay
    restorable bit-identical; a catalog rebuilt from the bucket does not bring
    the deleted memory back."""
    ids, vecs, key = _archive_four(store, clock, rng)
    assert b"alpha secret" in store.engine.cold.store.get(key)
    assert store.delete("c", ids[0])
    assert store.engine.catalog.query("SELECT state FROM archives WHERE key = ?", (key,)) == [("purge",)]
    assert b"alpha secret" in store.engine.cold.store.get(key)  # until the sweep
    report = store.sweep()
    assert report.compacted == 1 and not report.errors
    (new_key,) = store.engine.cold.list_batches()
    assert new_key != key
    data = store.engine.cold.store.get(new_key)
    assert b"alpha secret" not in data and b"bravo" in data and b"delta" in data
    assert store.engine.catalog.query("SELECT key, state, count FROM archives") == [(new_key, "done", 3)]
    assert store.sweep().compacted == 0  # nothing left to rewrite
    counts = store.rebuild_catalog()
    assert counts["inserted"] == 0 and store.get("c", ids[0]) is None
    assert sorted(store.restore("c", ids=ids[1:])) == sorted(ids[1:])
    for i in ids[1:]:
        assert store.get("c", i).embedding.tobytes() == vecs[i]


def test_every_stale_record_is_compacted_by_the_next_sweep(store, clock, rng):
    """A restore leaves a stale record too (deleted later from the hot tier,
    the memory's text would otherwise stay in the object): the object is
    marked and the next sweep rewrites it. compact_cold() also rewrites stale
    objects nobody marked (stores from before the marks)."""
    ids, vecs, key = _archive_four(store, clock, rng)

    def records(k):
        return sorted(e.id for e, _ in store.engine.cold.read_batch(k)[1])

    store.restore("c", ids=ids[:1])
    assert store.engine.catalog.query("SELECT state FROM archives") == [("purge",)]
    assert store.sweep().compacted == 1
    (key2,) = store.engine.cold.list_batches()
    assert key2 != key and records(key2) == sorted(ids[1:])
    assert store.delete("c", ids[0])  # from the hot tier: no archived copy left anywhere
    assert all(b"alpha secret" not in store.engine.cold.store.get(k) for k in store.engine.cold.list_batches())
    # an unmarked stale object (as an older version left them): only compact_cold rewrites it
    store.restore("c", ids=ids[1:2])
    store.engine.catalog.write(lambda conn: conn.execute("UPDATE archives SET state = 'done'"))
    assert store.sweep().compacted == 0 and store.engine.cold.list_batches() == [key2]
    assert store.compact_cold() == 1
    (key3,) = store.engine.cold.list_batches()
    assert records(key3) == sorted(ids[2:])
    assert store.compact_cold() == 0
    assert sorted(store.restore("c", ids=ids[2:])) == sorted(ids[2:])
    assert store.engine.cold.list_batches() == []
    for i in ids[1:]:
        assert store.get("c", i).embedding.tobytes() == vecs[i]


def test_cli_compact_cold_purges_a_deleted_memory(tmp_path, rng, capsys):
    import json

    from tierstore.tools.cli import main

    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        ids, _, key = _archive_four(store, clock, rng)
        store.restore("c", ids=[ids[1]])
        store.delete("c", ids[0])
    assert main(["compact-cold", str(tmp_path / "s")]) == 0
    assert json.loads(capsys.readouterr().out) == {"rewritten": 1}
    with TierStore.open(tmp_path / "s", clock=clock) as store:
        (new_key,) = store.engine.cold.list_batches()
        assert new_key != key
        assert sorted(e.id for e, _ in store.engine.cold.read_batch(new_key)[1]) == sorted(ids[2:])
        assert b"alpha secret" not in store.engine.cold.store.get(new_key)


def test_a_small_namespace_whose_memories_pass_through_keeps_small_hot_arrays(tmp_path):
    """A platform's namespace: a few memories a day come into the hot tier and
    leave it at night, a handful stay. Its arrays follow what it holds, not
    what it was ever told (dead slots are compacted away even in a small
    namespace), and what stays is still found."""
    rng = np.random.default_rng(3)
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        keep_vec = unit(rng)
        store.add("u", "pinned", keep_vec, id="keep", memory_type="fact", pinned=True)
        for day in range(60):
            store.add_batch(
                "u",
                [
                    {
                        "content": f"d{day}-{j}",
                        "embedding": unit(rng),
                        "id": f"d{day}-{j}",
                        "memory_type": "conversation",
                    }
                    for j in range(6)
                ],
            )
            clock.advance(86_400.0)
            store.sweep()
        space = store.engine.hot.get("u")
        assert space is not None and space.live <= 8
        assert space.cap <= 48, space.cap  # was ~300 (compacted only past 256 slots)
        assert store.get("u", "keep").tier == "hot"
        assert store.search("u", keep_vec, k=1)[0].id == "keep"


class _Recorder:
    """A catalog stand-in that records the SQL of each query it runs."""

    def __init__(self, catalog):
        self.catalog, self.sql = catalog, []

    def query(self, sql, params=()):
        self.sql.append((sql, tuple(params)))
        return self.catalog.query(sql, params)


def test_the_nights_lookups_read_one_namespace(store, clock, rng):
    """What a night's sweep looks up per namespace (the marks an archive
    record keeps; the warm shard list after a demote or a rebuild) reads that
    namespace by index: on a platform's store a read of every mark or every
    shard, once per namespace, made the night grow with the store."""
    first = {}
    for ns in ("a", "b"):
        first[ns] = store.add(ns, "v1", unit(rng), memory_type="fact", key="city")
        store.add(ns, "v2", unit(rng), memory_type="fact", key="city")
    clock.advance(20 * DAY)
    store.sweep()
    catalog = store.engine.catalog
    rec = _Recorder(catalog)
    marks = record_marks(rec, "a", catalog.select_rows("WHERE m.ns = 'a'"))
    warm = store.engine.warm
    real, warm.catalog = warm.catalog, rec
    try:
        warm.refresh(["a"])
    finally:
        warm.catalog = real
    assert len(rec.sql) == 3
    for sql, params in rec.sql:
        steps = [row[-1] for row in catalog.query("EXPLAIN QUERY PLAN " + sql, params)]
        assert not any(s.startswith("SCAN") for s in steps), (sql, steps)
    assert marks[first["a"]].superseded_by is not None  # the queries found the mark


def test_refreshing_one_namespaces_shards_keeps_the_others(tmp_path):
    """refresh(namespaces) re-reads those namespaces' shards only; a
    namespace whose shards are all gone leaves the list; refresh() reads all."""
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)

    class Rows:
        def query(self, sql, params=()):
            return db.execute(sql, params).fetchall()

    def shard(ns, name):
        db.execute("INSERT INTO shards (ns, name, kind, count, created_at) VALUES (?, ?, 'flat', 1, 0)", (ns, name))

    shard("a", "a1")
    shard("b", "b1")
    warm = WarmTier(tmp_path / "warm", DIM, WarmSettings(), Rows())
    assert [i.name for i in warm.shards("a")] == ["a1"] and [i.name for i in warm.shards("b")] == ["b1"]
    db.execute("DELETE FROM shards WHERE ns = 'a'")
    shard("b", "b2")
    shard("c", "c1")
    warm.refresh(["a", "c"])
    assert warm.shards("a") == [] and [i.name for i in warm.shards("c")] == ["c1"]
    assert [i.name for i in warm.shards("b")] == ["b1"]  # not asked for: as it was
    warm.refresh()
    assert [i.name for i in warm.shards("b")] == ["b1", "b2"]

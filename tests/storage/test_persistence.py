"""Close and reopen: same memories, fields, access counts; hot index checkpoints."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import DIM, T0, unit

from tierstore import HotSettings, ManualClock, Policy, Settings, StoreConfigError, TierStore, TypePolicy


def memories(store: TierStore, ns: str, ids):
    return {i: store.get(ns, i) for i in ids}


def comparable(m):
    d = {f: getattr(m, f) for f in m.__dataclass_fields__ if f != "embedding"}
    d["embedding"] = m.embedding.tobytes()
    return d


def test_reopen_restores_everything(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        ids = store.add_batch(
            "alice",
            [
                {
                    "content": f"memory {i}",
                    "embedding": unit(rng),
                    "memory_type": t,
                    "tags": [f"t{i % 3}"],
                    "confidence": 0.5 + i / 100,
                    "source": "ai_inference" if i % 2 else "user_declaration",
                    "ttl_seconds": 7200 if i == 3 else None,
                    "pinned": i == 4,
                }
                for i, t in enumerate(["fact", "conversation", "preference", "task", "opinion"] * 4)
            ],
        )
        clock.advance(600)
        store.touch("alice", ids[:5])
        store.touch("alice", ids[0])
        store.search("alice", unit(rng), k=3)  # records accesses too
        store.feedback("alice", ids[6], positive=True)
        store.set_context("alice", ["travel"])
        before = {i: comparable(m) for i, m in memories(store, "alice", ids).items()}
        counts = {i: m["access_count"] for i, m in before.items()}
    assert counts[ids[0]] >= 2
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        after = {i: comparable(m) for i, m in memories(store, "alice", ids).items()}
        assert store.get_context("alice") == ("travel",)
    assert after == before


def test_access_updates_flushed_within_a_second(tmp_path, rng):
    clock = ManualClock(T0)
    settings = Settings(flush_interval_s=0.05)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, settings=settings) as store:
        mid = store.add("a", "x", unit(rng))
        store.touch("a", mid)
        import time

        deadline = time.time() + 30  # the flusher runs every 0.05 s; a loaded machine may delay it
        while time.time() < deadline:
            row = store.engine.catalog.get_row("a", mid)
            if row.access_count == 1:
                break
            time.sleep(0.02)
        assert store.engine.catalog.get_row("a", mid).access_count == 1


def test_dimension_is_fixed_and_store_is_exclusive(tmp_path, clock):
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock):
        with pytest.raises(StoreConfigError, match="already open in this process"):
            TierStore.open(path, dim=DIM, clock=clock)
    with pytest.raises(StoreConfigError, match="dimension"):
        TierStore.open(path, dim=DIM + 1, clock=clock)


def test_policy_is_stored_and_a_new_one_recomputes_due_times(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        mid = store.add("a", "x", unit(rng), memory_type="fact")
        due_default = store.get("a", mid).due_at
    longer = Policy.from_dict({"types": {"fact": {"ttl": "365d", "half_life": "180d"}}})
    with TierStore.open(path, dim=DIM, clock=clock, policy=longer) as store:
        assert store.get("a", mid).due_at > due_default
    with TierStore.open(path, dim=DIM, clock=clock) as store:  # keeps the stored (longer) policy
        assert store.policy.types["fact"].ttl_seconds == 365 * 86400
    bad = Policy(types={"note": TypePolicy(86400.0, 86400.0)})  # no "fact" type
    with pytest.raises(StoreConfigError, match="fact"):
        TierStore.open(path, dim=DIM, clock=clock, policy=bad)


def small_hot(threshold=50):
    return Settings(hot=HotSettings(exact_threshold=threshold, hnsw_ef_search=64))


def test_memories_an_older_version_stored_as_never_due_get_a_due_time_at_open(tmp_path, rng):
    """Before due times version 2, negative feedback that pushed a memory past
    a threshold stored it as never due. Opening such a store gives those
    memories a due time once; pinned ones stay never due."""
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        assert store.engine.catalog.get_meta("due_times") == "2"
        stuck, pinned, fine = (store.add("u", c, unit(rng), memory_type="fact") for c in ("stuck", "pinned", "fine"))
        store.pin("u", pinned)
        for _ in range(4):
            store.feedback("u", stuck, positive=False)
        store.flush()
        fine_due = store.get("u", fine).due_at
        # as the older version left it
        store.engine.catalog.write(
            lambda conn: conn.execute("UPDATE memories SET due_at = NULL WHERE id = ?", (stuck,))
        )
        store.engine.catalog.write(lambda conn: conn.execute("DELETE FROM meta WHERE key = 'due_times'"))
    with TierStore.open(path, clock=clock) as store:
        due = dict(store.engine.catalog.query("SELECT id, due_at FROM memories"))
        assert due[stuck] is not None and due[stuck] <= clock.now()
        assert due[pinned] is None and due[fine] == fine_due
        assert store.engine.catalog.get_meta("due_times") == "2"
        clock.advance(1.0)
        assert store.sweep().archived == 1 and store.get("u", stuck).tier == "cold"


def test_namespace_grows_into_an_hnsw_index_and_reloads_from_checkpoint(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    vecs = rng.normal(size=(200, DIM)).astype(np.float32)
    with TierStore.open(path, dim=DIM, clock=clock, settings=small_hot()) as store:
        ids = store.add_batch(
            "big", [{"content": str(i), "embedding": v, "id": f"m{i}"} for i, v in enumerate(vecs[:40])]
        )
        assert store.stats().hot_loaded["big"] == "exact"
        ids += store.add_batch(
            "big", [{"content": str(i), "embedding": v, "id": f"m{i}"} for i, v in enumerate(vecs[40:150], 40)]
        )
        assert store.stats().hot_loaded["big"] == "hnsw"
        store.delete("big", "m7")
        hits_before = [h.id for h in store.search("big", vecs[3], k=5, record_access=False)]
    assert (path / "hot" / "big.hnsw").exists() and (path / "hot" / "big.json").exists()
    manifest = json.loads((path / "hot" / "big.json").read_text())
    assert manifest["slots"] >= 149
    with TierStore.open(path, dim=DIM, clock=clock, settings=small_hot()) as store:
        # more rows committed after the checkpoint are brought in from the catalog
        hot = store.engine.hot.ensure("big")
        assert hot.index is not None and hot.index.ef == 64  # ef is set again after load
        assert hot.live == 149
        assert [h.id for h in store.search("big", vecs[3], k=5, record_access=False)] == hits_before
        store.add_batch(
            "big", [{"content": str(i), "embedding": v, "id": f"m{i}"} for i, v in enumerate(vecs[150:], 150)]
        )
        store.engine.hot.checkpoint()  # saved now ...
        store.add("big", "late", vecs[0] + 0.001, id="late")  # ... and this one only in the catalog
    with TierStore.open(path, dim=DIM, clock=clock, settings=small_hot()) as store:
        assert store.engine.hot.ensure("big").live == 200
        assert store.search("big", vecs[0], k=2, record_access=False)[0].id in {"late", "m0"}
        assert store.get("big", "m7") is None


def test_corrupt_checkpoint_is_rebuilt_from_the_catalog(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    vecs = rng.normal(size=(120, DIM)).astype(np.float32)
    with TierStore.open(path, dim=DIM, clock=clock, settings=small_hot()) as store:
        store.add_batch("big", [{"content": str(i), "embedding": v, "id": f"m{i}"} for i, v in enumerate(vecs)])
    index_file = path / "hot" / "big.hnsw"
    data = bytearray(index_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    index_file.write_bytes(bytes(data))
    with TierStore.open(path, dim=DIM, clock=clock, settings=small_hot()) as store:
        hot = store.engine.hot.ensure("big")
        assert any("big.hnsw" in e for e in store.engine.hot.checkpoint_errors)
        assert hot.live == 120
        assert store.search("big", vecs[5], k=1, record_access=False)[0].id == "m5"


def test_preload_hot_loads_every_namespace_at_open(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        for ns in ("a", "b", "c"):
            store.add(ns, "x", unit(rng))
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as lazy:
        assert lazy.stats(lifecycle=False).hot_loaded == {}
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, settings=Settings(preload_hot=True)) as eager:
        assert set(eager.stats(lifecycle=False).hot_loaded) == {"a", "b", "c"}


def test_a_catalog_row_reads_back_every_column_in_place(tmp_path):
    # MemoryRow.from_sql is positional: its fields must stay in MEMORY_COLUMNS order
    from tierstore.storage.catalog import MEMORY_COLUMNS, MemoryRow

    assert list(MemoryRow.__dataclass_fields__) == list(MEMORY_COLUMNS)
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        store.add(
            "u",
            "pinned fact",
            unit(np.random.default_rng(1)),
            id="a",
            memory_type="fact",
            tags=["x", "y"],
            pinned=True,
            key="slot",
            metadata={"k": 1},
            ttl_seconds=99.0,
            source="user_declaration",
        )
        store.flush()
        row = store.engine.catalog.get_row("u", "a")
    assert (row.ns, row.id, row.content, row.memory_type, row.source) == (
        "u",
        "a",
        "pinned fact",
        "fact",
        "user_declaration",
    )
    assert row.tags == ("x", "y") and row.pinned is True and row.key == "slot" and json.loads(row.metadata) == {"k": 1}
    assert row.ttl_seconds == 99.0 and row.created_at == T0 and row.tier == 0 and row.cold_key is None
    assert row.due_at == float("inf")  # pinned: never due (NULL in SQL)
    assert len(row.embedding) == 4 * DIM

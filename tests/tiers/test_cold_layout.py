"""The cold tier laid out by meaning (issue 31): compact_cold rewrites a
namespace's archive so that similar memories share objects, and a query's
candidates sit in few objects. The records, the hits and every path that reads
the archive (search, restore, verify, a rebuilt catalog) are unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tierstore import ManualClock, TierStore
from tierstore.errors import CorruptDataError, InvalidInputError
from tierstore.tiers import cold_layout, cold_relayout
from tierstore.tiers.archive import decode_batch

DIM = 32
T0 = 1_700_000_000.0
HOUR = 3600.0


def clusters(rng: np.random.Generator, n_centres: int, per: int, spread: float = 0.2) -> np.ndarray:
    """``n_centres · per`` unit vectors around random centres, interleaved (centre i % n_centres)."""
    centres = rng.normal(size=(n_centres, DIM))
    X = centres[np.arange(n_centres * per) % n_centres] + spread * rng.normal(size=(n_centres * per, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def archived_store(path, X: np.ndarray, per_sweep: int) -> tuple[TierStore, ManualClock]:
    """``X`` added to ``u`` as conversations ``m<i>`` and archived ``per_sweep`` at a time (one object each)."""
    clock = ManualClock(T0)
    store = TierStore.open(path, dim=DIM, clock=clock)
    store.add_batch(
        "u",
        [
            {"content": f"note {i}", "embedding": v, "id": f"m{i}", "memory_type": "conversation"}
            for i, v in enumerate(X)
        ],
    )
    clock.advance(2 * HOUR)
    while store.sweep(max_items=per_sweep).archived:
        pass
    return store, clock


def objects_of(store: TierStore, ids: list[str]) -> set[str]:
    return {store.engine.catalog.get_row("u", i).cold_key for i in ids}


# -- the order ------------------------------------------------------------------------------


def test_layout_groups_partition_the_rows_and_keep_neighbours_together(rng):
    X = clusters(rng, 20, 30)  # centre of row i: i % 20
    groups = cold_layout.layout_groups(X, 100)
    rows = np.concatenate(groups)
    assert sorted(rows.tolist()) == list(range(len(X)))  # every row once
    assert all(0 < len(g) <= 100 for g in groups)
    group_of = np.empty(len(X), np.int64)
    for i, g in enumerate(groups):
        group_of[g] = i
    # a cluster of 30 mostly sits in one object (in the rows' own order, in all 6 or more)
    spans = [len(set(group_of[np.arange(c, len(X), 20)].tolist())) for c in range(20)]
    assert max(spans) <= 3 and np.mean(spans) < 1.5
    # row order within each group: a cluster's rows are mostly next to each other
    order = np.concatenate(groups)
    runs = 1 + int(np.count_nonzero(np.diff(order % 20)))
    assert runs < 40  # 20 clusters; in the rows' own order there are 600 runs
    # the same vectors give the same layout
    assert all(np.array_equal(a, b) for a, b in zip(groups, cold_layout.layout_groups(X, 100)))


def test_order_rows_and_degenerate_input(rng):
    X = clusters(rng, 4, 10)
    assert sorted(cold_layout.order_rows(X).tolist()) == list(range(40))
    same = np.tile(X[:1], (50, 1))  # identical vectors: any order, every row once
    assert sorted(np.concatenate(cold_layout.layout_groups(same, 7)).tolist()) == list(range(50))
    assert cold_layout.layout_groups(np.zeros((0, DIM), np.float32)) == []
    with pytest.raises(InvalidInputError):
        cold_layout.layout_groups(np.full((3, DIM), np.nan, np.float32))
    with pytest.raises(InvalidInputError):
        cold_layout.layout_groups(X, 0)


# -- compaction -----------------------------------------------------------------------------


def test_compact_cold_lays_the_archive_out_and_searches_alike(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 60)
    X = clusters(rng, 12, 40)  # 480 memories; batches of 60 follow the ids, each holds every cluster
    store, clock = archived_store(tmp_path / "s", X, 60)
    with store:
        assert len(store.engine.cold.list_batches()) == 8
        Q = X[::37] + 0.05 * rng.normal(size=(13, DIM)).astype(np.float32)
        before = [store.search("u", q, k=10, include_cold=True, record_access=False) for q in Q]
        cluster_ids = [[f"m{i}" for i in range(c, len(X), 12)] for c in range(12)]
        assert max(len(objects_of(store, ids)) for ids in cluster_ids) == 8  # each cluster in every object
        old_keys = set(store.engine.cold.list_batches())

        written = store.compact_cold()
        keys = set(store.engine.cold.list_batches())
        assert written == len(keys) >= 8 and not keys & old_keys  # the old objects collected
        assert np.mean([len(objects_of(store, ids)) for ids in cluster_ids]) <= 1.5
        for key in keys:  # self-describing, in layout order, every record checked
            header, items = decode_batch(store.engine.cold.store.get(key), key)
            assert header["layout"] == "code" and 0 < len(items) <= 60
        assert cold_relayout.layout_keys(store.engine.catalog, "u") == keys
        after = [store.search("u", q, k=10, include_cold=True, record_access=False) for q in Q]
        assert [[(h.id, round(h.score, 6)) for h in a] for a in after] == [
            [(h.id, round(h.score, 6)) for h in b] for b in before
        ]
        assert store.compact_cold() == 0  # laid out: nothing to do
        report = store.verify()
        assert report.ok and report.checked["archive_objects"] == len(keys), report
        back = store.restore("u", ids=["m0", "m100"])
        assert sorted(back) == ["m0", "m100"]
        for i in (0, 100):
            assert np.allclose(store.get("u", f"m{i}").embedding, X[i], atol=1e-6)


def test_a_namespace_in_one_object_or_mostly_laid_out_is_left(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 60)
    store, clock = archived_store(tmp_path / "s", clusters(rng, 4, 30), 200)
    with store:
        assert len(store.engine.cold.list_batches()) == 1
        assert store.compact_cold() == 0  # one object: nothing to gather
        more = clusters(rng, 4, 30)
        store.add_batch(
            "u",
            [
                {"content": f"more {i}", "embedding": v, "id": f"n{i}", "memory_type": "conversation"}
                for i, v in enumerate(more)
            ],
        )
        clock.advance(2 * HOUR)
        store.sweep()
        assert store.compact_cold() >= 4  # half of it outside a layout: laid out
        store.add("u", "one more", more[0], id="late", memory_type="conversation")
        clock.advance(2 * HOUR)
        store.sweep()  # 1 of 241 outside the layout: below the slack
        assert cold_relayout.namespaces_to_lay_out(store.engine.catalog) == []
        assert store.compact_cold() == 0


def test_a_delete_after_the_layout_is_purged_and_the_layout_kept(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 50)
    store, clock = archived_store(tmp_path / "s", clusters(rng, 5, 40), 50)
    with store:
        store.compact_cold()
        keys = cold_relayout.layout_keys(store.engine.catalog, "u")
        key = store.engine.catalog.get_row("u", "m7").cold_key
        assert store.delete("u", "m7")
        assert store.compact_cold() == 1  # the purge rewrite; no new layout
        now = cold_relayout.layout_keys(store.engine.catalog, "u")
        assert key not in now and len(now) == len(keys)  # the rewrite took its place in the layout
        assert set(store.engine.cold.list_batches()) == now
        assert all(b"note 7\xa3" not in store.engine.cold.store.get(k) for k in now)  # msgpack: str then the next key
        assert store.verify().ok


def test_a_memory_that_leaves_during_the_layout_stays_out(tmp_path, rng, monkeypatch):
    """Restored (or deleted) between the layout's read and its commit: the
    memory keeps its new place, the new object that holds its stale record is
    marked for a rewrite, and the next sweep drops the record."""
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 40)
    store, clock = archived_store(tmp_path / "s", clusters(rng, 4, 30), 40)
    with store:
        write_frames = store.engine.cold.write_frames
        done = []

        def restore_first(key, ns, frames, now, layout=None):
            if not done:
                done.append(frames[0][0])
                store.engine.catalog.execute(  # as a concurrent restore's commit would
                    "UPDATE memories SET tier = 0, cold_key = NULL WHERE ns = 'u' AND id = ?", (frames[0][0],)
                )
            return write_frames(key, ns, frames, now, layout)

        monkeypatch.setattr(store.engine.cold, "write_frames", restore_first)
        store.compact_cold()
        (mid,) = done
        assert store.engine.catalog.get_row("u", mid).cold_key is None
        states = dict(store.engine.catalog.query("SELECT state, count(*) FROM archives GROUP BY state"))
        assert states.get("purge") == 1
        assert not store.sweep().errors
        assert dict(store.engine.catalog.query("SELECT state, count(*) FROM archives GROUP BY state")) == {
            "done": len(store.engine.cold.list_batches())
        }


def test_a_catalog_rebuilt_from_a_laid_out_bucket(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 50)
    X = clusters(rng, 5, 40)
    store, clock = archived_store(tmp_path / "s", X, 50)
    with store:
        store.compact_cold()
        keys = cold_relayout.layout_keys(store.engine.catalog, "u")
        counts = store.rebuild_catalog()
        assert counts["objects"] == len(keys) and counts["records"] == len(X)
        assert store.verify().ok
        assert cold_relayout.namespaces_to_lay_out(store.engine.catalog) == []  # the same objects: still laid out
        hits = store.search("u", X[3], k=1, include_cold=True, record_access=False)
        assert hits[0].id == "m3"


def test_verify_reports_a_layout_listing_gone_objects_and_repair_drops_them(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 50)
    store, clock = archived_store(tmp_path / "s", clusters(rng, 5, 40), 50)
    with store:
        store.compact_cold()
        keys = cold_relayout.layout_keys(store.engine.catalog, "u")
        report = store.verify()
        assert report.ok and not report.in_flight and report.checked["cold_layout_objects"] == len(keys)
        gone = "archive/u/000000000999-00000000.tsa"  # as a crash, or a rebuilt catalog, can leave it
        store.engine.catalog.set_meta({cold_relayout.LAYOUT_META + "u": json.dumps(sorted(keys | {gone}))})
        report = store.verify()
        assert report.ok  # not damage
        (flight,) = report.in_flight
        assert flight.kind == "cold_layout" and flight.where == "u" and gone in flight.message
        fixed = store.repair()
        assert fixed.ok and not fixed.in_flight and any("layout" in r for r in fixed.repaired)
        assert cold_relayout.layout_keys(store.engine.catalog, "u") == keys
        assert store.compact_cold() == 0  # the layout still covers every cold memory


def test_objects_emptied_by_restores_leave_the_layout(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 50)
    store, clock = archived_store(tmp_path / "s", clusters(rng, 5, 40), 50)
    with store:
        store.compact_cold()
        keys = cold_relayout.layout_keys(store.engine.catalog, "u")
        key = store.engine.catalog.get_row("u", "m0").cold_key
        ids = [mid for (mid,) in store.engine.catalog.query("SELECT id FROM memories WHERE cold_key = ?", (key,))]
        assert sorted(store.restore("u", ids=ids)) == sorted(ids)  # the object is emptied and collected
        assert cold_relayout.layout_keys(store.engine.catalog, "u") == keys - {key}
        report = store.verify()
        assert report.ok and not report.in_flight, report


def test_a_missing_object_stops_its_namespace_only(tmp_path, rng, monkeypatch):
    monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 50)
    store, clock = archived_store(tmp_path / "s", clusters(rng, 5, 40), 50)
    with store:
        store.add_batch(
            "v",
            [
                {"content": f"v {i}", "embedding": v, "memory_type": "conversation"}
                for i, v in enumerate(clusters(rng, 2, 30))
            ],
        )
        clock.advance(2 * HOUR)
        while store.sweep(max_items=20).archived:
            pass
        lost = store.engine.catalog.get_row("u", "m0").cold_key
        store.engine.cold.store.delete(lost)
        with pytest.raises(CorruptDataError, match="namespace 'u' not laid out"):
            store.compact_cold()
        assert cold_relayout.layout_keys(store.engine.catalog, "v")  # the other namespace was laid out
        assert not cold_relayout.layout_keys(store.engine.catalog, "u")
        assert store.engine.catalog.get_row("u", "m0").cold_key == lost  # nothing of u moved

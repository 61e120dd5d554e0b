"""The sweep merges a namespace's small archive objects (issue 32): a sweep
writes one object per namespace it archives into, so a namespace archived a
little every night ends up in hundreds of objects and a query's candidates
in most of them. Once a namespace holds MERGE_FANIN objects of one size
class outside its layout, the sweep rewrites them in the order of meaning.
Searches, restores, verify and deletes see the same memories."""

from __future__ import annotations

import numpy as np
import pytest

from tierstore import ManualClock, TierStore
from tierstore.tiers import cold_relayout
from tierstore.tiers.archive import decode_batch

DIM = 32
T0 = 1_700_000_000.0
DAY = 86400.0


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    X = rng.normal(size=(n, DIM))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def nightly(path, X: np.ndarray, per_night: int) -> tuple[TierStore, ManualClock, list[str]]:
    """``X`` told ``per_night`` a day as conversations, a sweep every night:
    each night's sweep archives the day before's (one small object a night)."""
    clock = ManualClock(T0)
    store = TierStore.open(path, dim=DIM, clock=clock)
    ids = []
    for start in range(0, len(X), per_night):
        items = [
            {"content": f"turn {i}", "embedding": X[i], "id": f"m{i}", "memory_type": "conversation"}
            for i in range(start, min(start + per_night, len(X)))
        ]
        ids += store.add_batch("u", items)
        clock.advance(DAY)
        store.sweep()
    return store, clock, ids


def classes(store: TierStore) -> list[int]:
    rows = store.engine.catalog.query("SELECT count FROM archives WHERE ns = 'u' AND state = 'done'")
    return [cold_relayout.size_class(int(n)) for (n,) in rows]


def test_size_classes():
    assert [cold_relayout.size_class(n) for n in (0, 1, 7, 8, 63, 64, 511, 512)] == [0, 0, 0, 1, 1, 2, 2, 3]


def test_nightly_objects_are_merged_and_searched_alike(tmp_path, rng, monkeypatch):
    X = unit_rows(rng, 5 * 70)  # 70 nights of 5
    store, clock, ids = nightly(tmp_path / "merged", X, 5)
    monkeypatch.setattr(cold_relayout, "MERGE_FANIN", 10**9)  # the same nights, never merged
    plain, _, _ = nightly(tmp_path / "plain", X, 5)
    monkeypatch.undo()
    with store, plain:
        assert len(plain.engine.cold.list_batches()) == 70
        keys = store.engine.cold.list_batches()
        assert len(keys) < 20
        cs = classes(store)
        assert all(cs.count(c) < cold_relayout.MERGE_FANIN for c in set(cs))  # nothing left to merge
        assert cold_relayout.objects_to_merge(store.engine.catalog, "u") == []
        assert sorted(r[0] for r in store.engine.catalog.query("SELECT id FROM memories WHERE tier = 2")) == sorted(ids)
        merged = [k for k in keys if decode_batch(store.engine.cold.store.get(k), k)[0].get("layout") == "code"]
        assert merged and cold_relayout.layout_keys(store.engine.catalog, "u") == set()  # outside any layout
        Q = X[::23] + 0.1 * unit_rows(rng, len(X[::23]))
        for q in Q:
            a = store.search("u", q, k=10, include_cold=True, record_access=False)
            b = plain.search("u", q, k=10, include_cold=True, record_access=False)
            assert [(h.id, round(h.score, 6)) for h in a] == [(h.id, round(h.score, 6)) for h in b]

        # one query's candidates sit in far fewer objects
        def objects_read(st: TierStore, q: np.ndarray) -> int:
            rids = [int(r) for r in st.engine.cold_index.candidates("u", q, 100)[0]]
            marks = ",".join("?" * len(rids))
            return len(st.engine.catalog.query(f"SELECT DISTINCT cold_key FROM memories WHERE rid IN ({marks})", rids))

        assert objects_read(store, Q[0]) <= len(keys) and objects_read(plain, Q[0]) > 3 * len(keys)
        report = store.verify()
        assert report.ok and report.checked["archive_objects"] == len(keys), report
        assert sorted(store.restore("u", ids=["m0", "m200"])) == ["m0", "m200"]
        for i in (0, 200):
            assert np.allclose(store.get("u", f"m{i}").embedding, X[i], atol=1e-6)


def test_a_delete_in_a_merged_object_is_purged(tmp_path, rng):
    X = unit_rows(rng, 4 * 12)
    store, clock, ids = nightly(tmp_path / "s", X, 4)
    with store:
        key = store.engine.catalog.get_row("u", "m1").cold_key
        header, items = decode_batch(store.engine.cold.store.get(key), key)
        assert header.get("layout") == "code" and len(items) >= 32  # m1 was merged
        assert store.delete("u", "m1")
        store.sweep()
        assert all(b"turn 1\xa3" not in store.engine.cold.store.get(k) for k in store.engine.cold.list_batches())
        assert store.get("u", "m1") is None and store.verify().ok


def test_a_missing_object_stops_the_merge_of_its_namespace_only(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        for night in range(8):  # u and v: four a night; the eighth night's objects make eight
            for ns in ("u", "v"):
                store.add_batch(
                    ns,
                    [
                        {"content": f"{ns} {night} {i}", "embedding": y, "memory_type": "conversation"}
                        for i, y in enumerate(unit_rows(rng, 4))
                    ],
                )
            clock.advance(DAY)
            if night == 7:
                victim = store.engine.catalog.query_one("SELECT key FROM archives WHERE ns = 'u' ORDER BY batch")[0]
                store.engine.cold.store.delete(victim)
            report = store.sweep()
        assert any("namespace 'u' not merged" in e for e in report.errors), report.errors
        per_ns = dict(store.engine.catalog.query("SELECT ns, count(*) FROM archives GROUP BY ns"))
        assert per_ns == {"u": 8, "v": 1}  # v merged; u as it was
        assert not store.verify().ok  # the missing object is named
        store.add("u", "one more", unit_rows(rng, 1)[0], memory_type="conversation")
        clock.advance(DAY)
        report = store.sweep()  # u archived into again: its merge is not tried by every sweep
        assert report.archived == 1 and not any("not merged" in e for e in report.errors)
        assert store.engine.catalog.query_one("SELECT count(*) FROM archives WHERE ns = 'u'")[0] == 9


@pytest.mark.parametrize("fanin", [2, 3])
def test_a_smaller_fanin_still_leaves_fewer_than_fanin_per_class(tmp_path, rng, monkeypatch, fanin):
    monkeypatch.setattr(cold_relayout, "MERGE_FANIN", fanin)
    store, _, ids = nightly(tmp_path / "s", unit_rows(rng, 3 * 40), 3)
    with store:
        cs = classes(store)
        assert all(cs.count(c) < fanin for c in set(cs)), cs
        assert store.engine.catalog.query_one("SELECT count(*) FROM memories WHERE tier = 2")[0] == len(ids)
        assert store.verify().ok

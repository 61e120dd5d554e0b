"""SIGKILL a process between the steps of a move; reopen; nothing is lost or
duplicated (issue 3 must-show: between the object write and the catalog commit)."""

from __future__ import annotations

import signal
from collections import Counter

import numpy as np
import pytest
from crash_store import run_child, seed_store
from helpers import DIM, T0

from tierstore import ManualClock, TierStore

HOUR = 3600.0
DAY = 86400.0


def check_exactly_once(store, ids, embeddings):
    rows = store.engine.catalog.query("SELECT id, tier FROM memories WHERE ns = 'crash'")
    counts = Counter(mid for mid, _ in rows)
    assert all(counts[i] == 1 for i in ids), "a memory is missing or duplicated in the catalog"
    # the hot index agrees with the catalog: each hot memory once, no stale slot
    hot = store.engine.hot.ensure("crash")
    hot_rows = {mid for mid, tier in rows if tier == 0}
    assert set(hot.slot_of) == hot_rows
    assert hot.live == len(hot_rows)
    # every archived memory is in exactly one object, referenced once
    cold = [store.engine.catalog.get_row("crash", mid) for mid, tier in rows if tier == 2]
    assert len({(r.cold_key, r.cold_offset) for r in cold}) == len(cold)
    # and restorable, bit-identical
    back = store.restore("crash", ids=[r.id for r in cold])
    assert sorted(back) == sorted(r.id for r in cold)
    for mid in ids:
        assert store.get("crash", mid).embedding.tobytes() == embeddings[mid]


@pytest.mark.parametrize("crash_at", ["archive.after_put", "archive.after_intent", "archive.after_commit"])
def test_sigkill_during_archive(tmp_path, rng, crash_at):
    path = tmp_path / "s"
    chats, facts, embeddings = seed_store(path, rng)
    proc = run_child(path, "sweep", T0 + 2 * HOUR, crash_at)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 2 * HOUR)) as store:
        report = store.sweep()
        assert not report.errors
        assert {store.get("crash", c).tier for c in chats} == {"cold"}
        assert {store.get("crash", f).tier for f in facts} == {"hot"}
        # the interrupted batch was finished, not written twice
        keys = store.engine.cold.list_batches()
        assert len(keys) == 1
        assert store.engine.catalog.query("SELECT state FROM archives") == [("done",)]
        check_exactly_once(store, chats + facts, embeddings)


@pytest.mark.parametrize("crash_at", ["compact.after_intent", "compact.after_put", "compact.after_commit"])
def test_sigkill_while_an_archive_is_rewritten(tmp_path, rng, crash_at):
    """Killed while rewriting an archive object without a deleted memory: the
    next sweep leaves exactly one object, without the deleted record, and
    every other archived memory restorable bit-identical."""
    path = tmp_path / "s"
    chats, facts, embeddings = seed_store(path, rng)
    with TierStore.open(path, clock=ManualClock(T0 + 2 * HOUR)) as store:
        assert store.sweep().archived == len(chats)
        (old_key,) = store.engine.cold.list_batches()
        assert store.delete("crash", chats[0])
    proc = run_child(path, "compact-cold", T0 + 2 * HOUR, crash_at)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 2 * HOUR)) as store:
        report = store.sweep()
        assert not report.errors
        (key,) = store.engine.cold.list_batches()
        assert key != old_key
        assert b"chat 0" not in store.engine.cold.store.get(key)  # the deleted memory's text ("chat 1".."chat 29" stay)
        assert sorted(e.id for e, _ in store.engine.cold.read_batch(key)[1]) == sorted(chats[1:])
        assert store.engine.catalog.query("SELECT state FROM archives") == [("done",)]
        assert store.get("crash", chats[0]) is None
        check_exactly_once(store, chats[1:] + facts, embeddings)


def test_sigkill_after_demote_shard_written(tmp_path, rng):
    path = tmp_path / "s"
    chats, facts, embeddings = seed_store(path, rng, n_chat=0)
    proc = run_child(path, "sweep", T0 + 20 * DAY, "demote.after_shard")
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    orphans = list((path / "warm" / "crash").iterdir())
    assert len(orphans) == 1  # a shard the catalog never heard of
    with TierStore.open(path, clock=ManualClock(T0 + 20 * DAY)) as store:
        assert not (path / "warm" / "crash" / orphans[0].name).exists()  # removed at open
        store.sweep()
        assert {store.get("crash", f).tier for f in facts} == {"warm"}
        check_exactly_once(store, facts, embeddings)


def test_sigkill_after_restore_commit(tmp_path, rng):
    path = tmp_path / "s"
    chats, facts, embeddings = seed_store(path, rng)
    with TierStore.open(path, clock=ManualClock(T0 + 2 * HOUR)) as store:
        store.sweep()
    proc = run_child(path, "restore-all", T0 + 3 * HOUR, "restore.after_commit")
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 3 * HOUR)) as store:
        assert {store.get("crash", c).tier for c in chats} == {"hot"}
        check_exactly_once(store, chats + facts, embeddings)
        store.sweep()
        assert store.engine.cold.list_batches() == []  # the emptied batch is collected by the next sweep


def test_sigkill_after_add_commit_keeps_the_acknowledged_add(tmp_path, rng):
    path = tmp_path / "s"
    chats, facts, embeddings = seed_store(path, rng)
    proc = run_child(path, "add", T0 + 60, "add.after_commit")
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 60)) as store:
        assert store.get("crash", "late").content == "added just before the crash"
        q = np.ones(DIM) / np.sqrt(DIM)
        assert store.search("crash", q, k=1, record_access=False)[0].id == "late"
        embeddings["late"] = store.get("crash", "late").embedding.tobytes()
        check_exactly_once(store, chats + facts + ["late"], embeddings)


def _archive_in_batches(path, rng, n_chat=30, per_batch=10):
    """The seeded store with its chats archived by sweeps of ``per_batch``: several objects."""
    chats, facts, embeddings = seed_store(path, rng, n_chat=n_chat)
    with TierStore.open(path, clock=ManualClock(T0 + 2 * HOUR)) as store:
        while store.sweep(max_items=per_batch).archived:
            pass
        assert len(store.engine.cold.list_batches()) == n_chat // per_batch
    return chats, facts, embeddings


@pytest.mark.parametrize("crash_at", ["layout.after_intent", "layout.after_put", "layout.after_commit"])
@pytest.mark.parametrize("after", [0, 2])
def test_sigkill_while_an_archive_is_laid_out(tmp_path, rng, monkeypatch, crash_at, after):
    """Killed while compact_cold lays a namespace's archive out by meaning
    (at the first new object, or the third): the store opens and verifies
    clean, every archived memory is found by a cold search of its own vector
    and restores bit-identical, exactly once; the next sweep leaves no object
    the catalog does not use, and compact_cold then finishes the layout."""
    path = tmp_path / "s"
    chats, facts, embeddings = _archive_in_batches(path, rng)
    monkeypatch.setenv("TIERSTORE_CRASH_AFTER", str(after))
    proc = run_child(path, "compact-cold-layout", T0 + 2 * HOUR, crash_at)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 2 * HOUR)) as store:
        report = store.verify()
        assert report.ok, report
        for c in chats:  # each one found where the catalog now points
            q = np.frombuffer(embeddings[c], np.float32)
            assert store.search("crash", q, k=1, include_cold=True, record_access=False)[0].id == c
        assert not store.sweep().errors
        used = {k for (k,) in store.engine.catalog.query("SELECT DISTINCT cold_key FROM memories WHERE tier = 2")}
        assert set(store.engine.cold.list_batches()) == used  # partly moved objects rewritten, the rest collected
        from tierstore.tiers import cold_layout

        monkeypatch.setattr(cold_layout, "OBJECT_RECORDS", 8)
        assert store.compact_cold() >= 4  # 30 records in objects of at most 8
        assert store.compact_cold() == 0  # laid out: nothing left to do
        assert store.verify().ok
        keys = store.engine.cold.list_batches()
        assert all(store.engine.cold.read_batch(k)[0].get("layout") == "code" for k in keys)
        assert store.engine.catalog.query("SELECT DISTINCT state FROM archives") == [("done",)]
        check_exactly_once(store, chats + facts, embeddings)

"""What an OS crash (not only a process crash) can take from a store.

``tests/support/wal_tail.py`` models the crash: the WAL keeps what was synced (by
SQLite's checkpoints or by tierstore's barriers) and loses any suffix of the
commits after that. A store must never be left pointing at an object it
deleted: the commit that stopped referencing an object is synced before the
object goes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import wal_tail

from tierstore import ManualClock, TierStore
from tierstore.rules.validation import check_vector

DIM = 8
T0 = 1_700_000_000.0
DAY = 86400.0
REPO = Path(__file__).resolve().parents[2]


def _vec(i: int) -> np.ndarray:
    return np.random.default_rng(i).normal(size=DIM).astype(np.float32)


def _run_child(code: str, sync_log: Path) -> None:
    """Run ``code`` in a fresh interpreter that ends like a SIGKILL (no close,
    no checkpoint), with tierstore's sync barriers recorded in ``sync_log``."""
    env = dict(os.environ, TIERSTORE_SYNC_LOG=str(sync_log))
    script = textwrap.dedent(code) + "\nimport os; os._exit(0)\n"
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_a_restore_survives_an_os_crash_that_drops_the_unsynced_wal(tmp_path):
    """The issue's repro: archive, restore (the emptied object is deleted),
    crash, lose the WAL's unsynced tail. Without a barrier before the delete
    the restore's commit is lost and the catalog points at a deleted object."""
    path = tmp_path / "s"
    ids = [f"m{i}" for i in range(3)]
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)) as store:
        for i, mid in enumerate(ids):
            store.add("ns", f"fact {i}", _vec(i), id=mid)
    with TierStore.open(path, clock=ManualClock(T0 + 60 * DAY)) as store:
        assert store.sweep().archived == 3
    sync_log = tmp_path / "syncs"
    _run_child(
        f"""
        from tierstore import ManualClock, TierStore
        store = TierStore.open({str(path)!r}, clock=ManualClock({T0 + 60 * DAY + 60}))
        assert sorted(store.restore("ns", ids={ids!r})) == {sorted(ids)!r}
        assert store.engine.cold.list_batches() == []   # the emptied archive object is gone
    """,
        sync_log,
    )
    durable, kept, valid = wal_tail.lose_unsynced_tail(path / "catalog.sqlite", sync_log, lambda c: 0)
    assert valid > 0 and kept == durable  # the crash kept only what was synced
    with TierStore.open(path, clock=ManualClock(T0 + 61 * DAY)) as store:
        for i, mid in enumerate(ids):
            m = store.get("ns", mid)
            assert m is not None and m.tier == "hot", mid
            np.testing.assert_array_equal(m.embedding, check_vector(_vec(i), DIM))
        assert store.verify().ok


def test_a_sync_barrier_precedes_every_object_delete(tmp_path):
    """Every path that deletes an archive object or a tombstone syncs the
    catalog first (counted), and a store with synchronous=FULL needs none."""
    path = tmp_path / "s"
    clock = ManualClock(T0)
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        for i in range(4):
            store.add("ns", f"fact {i}", _vec(i), id=f"m{i}")
        clock.advance(60 * DAY)
        assert store.sweep().archived == 4
        deletes: list[int] = []
        cold = store.engine.cold.store
        real_delete = cold.delete

        def counting_delete(key: str) -> bool:
            deletes.append(store.engine.catalog.syncs)
            return real_delete(key)

        cold.delete = counting_delete  # type: ignore[method-assign]
        before = store.engine.catalog.syncs
        assert store.delete("ns", "m0")  # marks the object, writes a tombstone
        store.restore("ns", ids=["m1", "m2", "m3"])  # empties the object: deleted
        store.sweep()  # drops the tombstone
        assert len(deletes) >= 2
        assert all(n > before for n in deletes)  # a barrier came before each delete
        assert store.engine.catalog.syncs > before


@pytest.mark.parametrize("sync_mode", ["NORMAL", "FULL"])
def test_catalog_sync_is_harmless_when_there_is_no_wal(tmp_path, sync_mode):
    from tierstore.storage.catalog import Catalog

    cat = Catalog(tmp_path / "c.sqlite", synchronous=sync_mode)
    cat.sync()
    cat.set_meta({"k": "v"})
    cat.sync()
    assert cat.get_meta("k") == "v"
    cat.close()
    assert not (tmp_path / "c.sqlite-wal").exists() or (tmp_path / "c.sqlite-wal").stat().st_size == 0


def test_the_wal_model_keeps_exactly_the_commits_it_says(tmp_path):
    """wal_tail's parser against SQLite itself: cutting at the k-th commit
    leaves exactly the first k transactions."""
    import shutil
    import sqlite3

    db = tmp_path / "x.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (x BLOB)")
    for _ in range(6):
        conn.execute("INSERT INTO t VALUES (?)", (os.urandom(3000),))
    state = wal_tail.read_wal(Path(str(db) + "-wal"))
    assert state is not None and len(state.commits) == 7  # the CREATE and six inserts
    for k in range(len(state.commits)):
        copy = tmp_path / f"c{k}"
        copy.mkdir()
        for suffix in ("", "-wal"):
            shutil.copy(str(db) + suffix, str(copy / "x.sqlite") + suffix)
        durable, kept, valid = wal_tail.lose_unsynced_tail(
            copy / "x.sqlite", None, lambda c, k=k: c.index(state.commits[k])
        )
        assert (durable, kept, valid) == (0, state.commits[k], state.commits[-1])
        c2 = sqlite3.connect(copy / "x.sqlite")
        assert c2.execute("SELECT count(*) FROM t").fetchone()[0] == k  # the CREATE was commit 0
        c2.close()
    conn.close()


@pytest.mark.slow
def test_a_new_store_crashed_after_claiming_its_prefix_opens_again(tmp_path):
    """The object store's prefix is claimed in the store's id: the id is synced
    to the catalog first, so an OS crash that drops the WAL's unsynced tail
    right after the claim leaves a catalog that still knows the id and a
    prefix that still accepts it."""
    path = tmp_path / "s"
    sync_log = tmp_path / "syncs"
    _run_child(
        f"""
        from tierstore import ManualClock, TierStore
        store = TierStore.open({str(path)!r}, dim={DIM}, clock=ManualClock({T0}))
        store.add("ns", "fact", {_vec(0).tolist()!r})
    """,
        sync_log,
    )
    durable, kept, valid = wal_tail.lose_unsynced_tail(path / "catalog.sqlite", sync_log, lambda c: 0)
    assert kept == durable  # the crash kept only what was synced
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0 + 60)) as store:  # not refused its own prefix
        assert store.verify().ok
        store.add("ns", "another fact", _vec(1))

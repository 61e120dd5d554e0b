"""The crash harness (tests/support/crash_harness.py) under pytest: a few trials of
SIGKILLed ingest / sweep / restore, and a check that its oracle does catch a
lost, a duplicated and a resurrected memory (so that "lost 0, duplicated 0"
means something). The full run is ``python tests/support/crash_harness.py --trials 60``
(docs/operations.md has its result)."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import crash_harness as H
import pytest
from helpers import SUPPORT

from tierstore import ManualClock, TierStore

HARNESS = SUPPORT / "crash_harness.py"


@pytest.mark.slow
def test_crash_harness_script_runs_trials_without_loss_or_duplication(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "--trials", "4", "--seed", "1000", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.strip().endswith("trials 4, lost 0, duplicated 0"), out
    summary = out.strip().splitlines()[-2]
    m = re.match(
        r"rounds (\d+): killed at a crash point (\d+), killed after a random delay (\d+), ran to the end "
        r"(\d+); acknowledged adds (\d+)",
        summary,
    )
    assert m, summary
    rounds, at_point, by_timer, _, acked = map(int, m.groups())
    assert acked > 0
    assert rounds >= 4 and at_point + by_timer == rounds, summary  # every round was killed
    assert at_point >= 1 and by_timer >= 1, summary


def _small_store(path: Path) -> H.Log:
    log = H.Log()
    with TierStore.open(path, dim=H.DIM, clock=ManualClock(H.T0), settings=H.store_settings(16)) as store:
        for i in range(6):
            mid = f"r0-{i}"
            log.feed(f"TRY alpha {mid}")
            store.add(
                "alpha",
                H.content_for("alpha", mid),
                H.embedding_for("alpha", mid),
                id=mid,
                memory_type="conversation" if i % 2 else "fact",
                confidence=0.9,
            )
            log.feed(f"ACK alpha {mid}")
        store.clock.advance(2 * 3600)
        assert store.sweep().archived == 3
    log.t_max = H.T0 + 2 * 3600
    return log


def test_the_oracle_catches_a_lost_memory(tmp_path):
    path = tmp_path / "s"
    log = _small_store(path)
    ok = H.TrialResult()
    H.verify(path, log, 16, ok)
    assert ok.problems == [] and ok.lost == 0 and ok.duplicated == 0 and ok.restored == 3
    with sqlite3.connect(path / "catalog.sqlite") as conn:
        conn.execute("DELETE FROM memories WHERE id = 'r0-2'")
    bad = H.TrialResult()
    H.verify(path, log, 16, bad)
    assert bad.lost == 1 and any("lost" in p and "r0-2" in p for p in bad.problems)


def test_the_oracle_catches_duplicates_and_resurrections(tmp_path):
    path = tmp_path / "s"
    log = _small_store(path)
    log.feed("TRYDEL alpha r0-0")
    log.feed("DEL alpha r0-0")  # acknowledged as deleted, yet still there
    with sqlite3.connect(path / "catalog.sqlite") as conn:
        ((key, off),) = conn.execute("SELECT cold_key, cold_offset FROM memories WHERE id = 'r0-1'").fetchall()
        conn.execute("UPDATE memories SET cold_key = ?, cold_offset = ? WHERE id = 'r0-3'", (key, off))
    bad = H.TrialResult()
    H.verify(path, log, 16, bad)
    assert bad.duplicated >= 1 and any("shared cold locations" in p for p in bad.problems)
    assert any("deleted memories are back" in p for p in bad.problems)


@pytest.mark.slow
def test_crash_harness_with_os_crashes_loses_nothing_that_was_synced(tmp_path):
    """Killed rounds that also lose the WAL's unsynced tail (tests/support/wal_tail.py):
    acknowledged adds after the last synced point may go, but nothing the
    surviving catalog points at may be gone."""
    proc = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            "--trials",
            "3",
            "--seed",
            "2000",
            "--os-crash-rate",
            "1",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.strip().endswith("trials 3, lost 0, duplicated 0"), out
    m = re.search(r"OS crashes (\d+):", out)
    assert m and int(m.group(1)) >= 1, out


def test_the_oracle_counts_a_memory_whose_archive_object_is_gone_as_lost(tmp_path):
    path = tmp_path / "s"
    log = _small_store(path)
    (key,) = {
        k
        for (k,) in sqlite3.connect(path / "catalog.sqlite").execute(
            "SELECT DISTINCT cold_key FROM memories WHERE cold_key IS NOT NULL"
        )
    }
    (path / "cold" / key).unlink()
    bad = H.TrialResult()
    H.verify(path, log, 16, bad)
    assert bad.lost == 3 and any("unreadable" in p for p in bad.problems)

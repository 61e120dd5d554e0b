"""Store time: a clock set back never shortens a memory's life, and a clock
that disagrees with the store's own record of time does not sweep.

See tierstore/core/store_clock.py. A clock set back (a VM restored from a snapshot,
a device before NTP) and a store kept by another clock (a simulation's,
opened with the machine's) are the two ways a sweep could archive or delete
by the wrong time.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import time

import numpy as np
import pytest

from tierstore import ClockSkewError, ManualClock, SystemClock, TierStore
from tierstore.core.store_clock import TOLERANCE_S, ClockRecord, check_clock, parse_time
from tierstore.errors import StoreConfigError
from tierstore.tools.demo import next_steps, prepare_demo_dir, run_demo

DIM = 8
DAY = 86400.0
YEAR = 365 * DAY
CLI = [sys.executable, "-m", "tierstore.tools.cli"]


class SkewedSystemClock(SystemClock):
    """The machine's clock, set off by ``skew`` seconds (as a wrong system clock is)."""

    def __init__(self, skew: float) -> None:
        self.skew = skew

    def now(self) -> float:
        return time.time() + self.skew


def _vec(i: int) -> np.ndarray:
    return np.random.default_rng(i).normal(size=DIM).astype(np.float32)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=180)


def test_a_clock_set_back_does_not_shorten_a_confirmed_memory(tmp_path):
    """The issue's repro: a store used at the right time, then opened a year in
    the past, where a fact is confirmed and used; back at the right time, the
    next sweep must keep it (before: its weight and confidence were dated a
    year back, so the sweep archived or deleted it)."""
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM) as store:
        mid = store.add("u", "allergic to peanuts", _vec(0), confidence=0.9)
    with TierStore.open(path, clock=SkewedSystemClock(-YEAR)) as store:
        assert not store.clock_check.ok and store.clock_check.behind_s > YEAR - DAY
        assert store.now() >= time.time() - 60  # store time stays at the latest time it saw
        store.feedback("u", mid, positive=True)
        store.touch("u", [mid])
        m = store.get("u", mid)
        assert m.last_accessed_at >= time.time() - 60
        with pytest.raises(ClockSkewError, match="set back"):
            store.sweep()
    with TierStore.open(path) as store:
        report = store.sweep()
        assert report.archived == 0 and report.deleted == 0
        m = store.get("u", mid)
        assert m is not None and m.tier == "hot" and m.access_count == 1
        assert m.weight > 1.0 and m.confidence > 0.9  # the boost and the confirmation, at the right time


def test_a_told_clock_behind_the_store_is_clamped_not_refused(tmp_path):
    path = tmp_path / "s"
    t0 = 1_700_000_000.0
    with TierStore.open(path, dim=DIM, clock=ManualClock(t0 + 10 * DAY)) as store:
        mid = store.add("u", "x", _vec(0))
    with TierStore.open(path, clock=ManualClock(t0)) as store:
        assert store.clock_check.ok and store.clock_check.told
        assert store.now() == t0 + 10 * DAY
        store.touch("u", [mid])
        assert store.get("u", mid).last_accessed_at == t0 + 10 * DAY
        store.sweep()  # told: allowed, at the store's time


def test_a_system_clock_behind_the_store_refuses_destructive_work_unless_allowed(tmp_path):
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM) as store:
        store.add("u", "x", _vec(0))
    with TierStore.open(path, clock=SkewedSystemClock(-2 * DAY)) as store:
        msg = store.clock_check.reason()
        assert "set back" in msg and "--allow-clock-jump" in msg and "\n" not in msg
        with pytest.raises(ClockSkewError):
            store.sweep()
        with pytest.raises(ClockSkewError):
            store.start_migrator(interval_s=60)
        preview = store.sweep(dry_run=True)
        assert preview.dry_run and preview.examined == 0
    with TierStore.open(path, clock=SkewedSystemClock(-2 * DAY), allow_clock_jump=True) as store:
        assert store.sweep().errors == []
    # small differences are ordinary
    with TierStore.open(path, clock=SkewedSystemClock(-TOLERANCE_S / 2)) as store:
        assert store.clock_check.ok
        store.sweep()


def _simulated_store(path, start: float, days: int = 60) -> int:
    """A store kept by a ManualClock from ``start`` for ``days`` days, as the
    demo made them before: conversations and facts, swept nightly."""
    clock = ManualClock(start)
    n = 0
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        for d in range(days):
            for j in range(3):
                store.add(
                    "u",
                    f"day {d} note {j}",
                    _vec(n),
                    memory_type="fact" if j == 0 else "conversation",
                    confidence=0.5 if j == 2 else 0.9,
                )
                n += 1
            clock.advance(DAY)
            store.sweep()
    return n


def test_a_store_kept_by_another_clock_is_not_swept_by_the_machines(tmp_path):
    """The newcomer's data loss: a store whose time ran on a 2023 simulation
    clock, swept with the machine's clock, lost every unpinned memory."""
    path = tmp_path / "s"
    _simulated_store(path, 1_700_000_000.0)
    with TierStore.open(path) as store:
        before = store.stats(lifecycle=False)
        check = store.clock_check
        assert not check.ok and check.jump_s > 2 * YEAR and check.behind_s == 0
        assert "another clock" in check.reason()
        with pytest.raises(ClockSkewError, match="older"):
            store.sweep()
        preview = store.sweep(dry_run=True)
        assert preview.dry_run and preview.deleted + preview.archived > 0  # what a sweep would do: the danger
        after = store.stats(lifecycle=False)
        assert after.by_tier == before.by_tier and after.total == before.total  # nothing changed
    # its record was not overwritten by the refused clock: the next open refuses again
    with TierStore.open(path) as store:
        assert not store.clock_check.ok
    with TierStore.open(path, allow_clock_jump=True) as store:
        assert store.sweep().examined > 0
    with TierStore.open(path) as store:  # the jump was allowed once; the store now keeps the machine's time
        assert store.clock_check.ok


def test_the_clock_record_follows_the_store(tmp_path):
    path = tmp_path / "s"
    clock = ManualClock(1_700_000_000.0)
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        store.add("u", "x", _vec(0))
        clock.advance(3 * DAY)
        store.search("u", _vec(1))
    with TierStore.open(path, clock=ManualClock(1_700_000_000.0)) as store:
        rec = store.clock_check.record
        assert rec is not None and rec.high_water == 1_700_000_000.0 + 3 * DAY
        assert rec.offset < -2 * YEAR and rec.own_time() == rec.high_water
    sys_rec = ClockRecord(high_water=time.time() - 100, offset=0.0)
    assert abs(sys_rec.own_time() - time.time()) < 5  # a system-clock store's own time is now


def test_check_clock_arithmetic():
    rec = ClockRecord(high_water=1000.0, offset=-500.0)
    c = check_clock(ManualClock(900.0), rec, wall=1200.0)
    assert c.told and c.ok and c.behind_s == 100.0 and c.jump_s == (900.0 - 1200.0) - (-500.0)
    c = check_clock(SkewedSystemClock(0.0), ClockRecord(high_water=time.time() - 10, offset=0.0))
    assert c.ok and not c.told
    assert check_clock(SystemClock(), None).ok


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-12-03", 1796256000.0),
        ("2026-12-03T14:05Z", 1796256000.0 + 14 * 3600 + 300),
        ("2026-12-03T15:05+01:00", 1796256000.0 + 14 * 3600 + 300),
        ("2026-12-03 14:05:00", 1796256000.0 + 14 * 3600 + 300),
        ("1700000000.5", 1700000000.5),
    ],
)
def test_parse_time(text, expected):
    assert parse_time(text) == expected


def test_parse_time_rejects_what_is_not_a_time():
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_time("yesterday")


# -- the command line ------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_sweep_refuses_a_foreign_clock_in_one_line_and_previews(tmp_path):
    path = tmp_path / "s"
    n = _simulated_store(path, 1_700_000_000.0, days=10)
    refused = cli("sweep", str(path))
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tierstore sweep: ") and "--now" in lines[0]
    dry = cli("sweep", "--dry-run", "--json", str(path))
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["dry_run"] and report["deleted"] + report["archived"] > 0
    assert "note:" in dry.stderr
    stats = json.loads(cli("stats", "--json", str(path)).stdout)
    assert stats["total"] == n  # the refused sweep and the dry run deleted nothing
    at = cli("sweep", "--now", "2023-11-25T00:00Z", str(path))  # the time given: the store's own days
    assert at.returncode == 0, at.stderr


@pytest.mark.slow
def test_cli_stats_reads_a_store_at_its_own_time(tmp_path):
    """Events dated after the machine's clock (a store run ahead of it) are
    counted: stats reads at the store's time."""
    path = tmp_path / "s"
    clock = ManualClock(time.time() + 30 * DAY)
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        for i in range(5):
            store.add("u", f"note {i}", _vec(i), memory_type="conversation")
        clock.advance(2 * DAY)
        assert store.sweep().archived == 5
    out = cli("stats", "--json", str(path))
    assert out.returncode == 0, out.stderr
    life = json.loads(out.stdout)["lifecycle"]
    assert json.loads(out.stdout)["by_tier"]["cold"] == 5
    assert life["events"]["by_kind"]["create"] == 5 and life["events"]["by_kind"]["archive"] == 5


@pytest.mark.slow
def test_cli_restore_accepts_iso_dates(tmp_path):
    path = tmp_path / "s"
    clock = ManualClock(parse_time("2026-01-10T12:00Z"))
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        a = store.add("u", "january note", _vec(0), memory_type="conversation")
        clock.set(parse_time("2026-02-10T12:00Z"))
        b = store.add("u", "february note", _vec(1), memory_type="conversation")
        clock.advance(DAY)
        assert store.sweep().archived == 2
    out = cli("restore", str(path), "--ns", "u", "--since", "2026-02-01", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [b]
    assert a not in out.stdout
    bad = cli("restore", str(path), "--ns", "u", "--since", "yesterday")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr


@pytest.mark.slow
def test_cli_version_and_a_closed_pipe(tmp_path):
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("tierstore ")
    path = tmp_path / "s"
    _simulated_store(path, time.time() - 3 * DAY, days=2)
    proc = subprocess.Popen([*CLI, "stats", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written (`| head` that exited)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err


# -- the demo --------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_keeps_its_store_at_the_present_and_its_next_steps_run(tmp_path):
    root = tmp_path / "demo"
    out = io.StringIO()
    command = f"{shlex.quote(sys.executable)} -m tierstore.tools.cli"
    assert run_demo(path=str(root), days=8, out=out, progress=False, command=command) == 0
    text = out.getvalue()
    assert f"The store is kept in {root}" in text
    steps = next_steps(root, command)
    assert len(steps) == 3 and all(step in text for step in steps)
    assert (root / "catalog.sqlite").exists()
    with TierStore.open(root) as store:  # the machine's clock agrees with the demo's store
        assert store.clock_check.ok
    for step in steps:
        proc = subprocess.run(shlex.split(step), capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, (step, proc.stderr)
    swept = cli("sweep", str(root))  # and a real sweep is safe
    assert swept.returncode == 0 and "deleted 0" in swept.stdout, swept.stdout + swept.stderr
    # a second run replaces the demo's own store ...
    assert run_demo(path=str(root), days=2, out=io.StringIO(), progress=False, command=command) == 0


def test_the_demo_never_replaces_a_directory_it_did_not_make(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    with pytest.raises(StoreConfigError, match="not made by tierstore demo"):
        prepare_demo_dir(mine)
    assert (mine / "notes.txt").read_text() == "precious"


@pytest.mark.slow
def test_cli_restore_lists_what_came_back_and_says_why_nothing_did(tmp_path):
    path = tmp_path / "s"
    clock = ManualClock(time.time() - 3 * DAY)
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        ids = store.add_batch(
            "u",
            [{"content": f"passport step {i}", "embedding": _vec(i), "memory_type": "conversation"} for i in range(3)],
        )
        clock.advance(2 * 3600)
        assert store.sweep().archived == 3
    out = cli("restore", str(path), "--ns", "u", "--text", "passport", "--limit", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "restored 2 memories to the hot tier:" and len(lines) == 3
    assert all(any(i in line for i in ids) and "passport step" in line for line in lines[1:])
    one = cli("restore", str(path), "--ns", "u", "--text", "passport")
    assert one.stdout.startswith("restored 1 memory to the hot tier:")
    none = cli("restore", str(path), "--ns", "u", "--text", "passport")
    assert "no archived memory of namespace 'u' matched" in none.stdout
    unknown = cli("restore", str(path), "--ns", "nobody", "--text", "passport")
    assert "there is no namespace 'nobody'" in unknown.stdout

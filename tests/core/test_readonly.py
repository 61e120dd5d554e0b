"""Read-only opens (issue 14): readers beside the writer, that never create or
change anything; the read commands of the CLI use them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tierstore import ManualClock, Policy, ReadOnlyStoreError, StoreConfigError, TierStore

DIM = 8
T0 = 1_700_000_000.0
HOUR = 3600.0
CLI = [sys.executable, "-m", "tierstore.tools.cli"]


def _vec(i: int) -> np.ndarray:
    return np.random.default_rng(i).normal(size=DIM).astype(np.float32)


def _tree(path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.name.startswith("catalog.sqlite-")
    }


def test_a_missing_store_is_an_error_and_nothing_is_created(tmp_path):
    with pytest.raises(StoreConfigError, match=f"no tierstore store at {tmp_path / 'typo'}"):
        TierStore.open(tmp_path / "typo", readonly=True)
    assert not (tmp_path / "typo").exists()
    out = subprocess.run([*CLI, "stats", str(tmp_path / "typo")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and str(tmp_path / "typo") in out.stderr
    assert not (tmp_path / "typo").exists()


def test_a_reader_beside_the_writer_reads_and_changes_nothing(tmp_path):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as writer:
        ids = writer.add_batch(
            "u", [{"content": f"note {i}", "embedding": _vec(i), "memory_type": "conversation"} for i in range(6)]
        )
        clock.advance(2 * HOUR)
        assert writer.sweep().archived == 6
        fact = writer.add("u", "a fact", _vec(10), memory_type="fact")
        writer.flush()
        before = _tree(path)
        with TierStore.open(path, readonly=True, clock=ManualClock(T0 + 2 * HOUR)) as reader:
            assert reader.readonly and reader.get("u", fact).content == "a fact"
            hits = reader.search("u", _vec(3), k=2, explain=True)  # reaches the cold tier, records nothing
            assert hits[0].id == ids[3] and hits[0].memory.tier == "cold"
            assert reader.stats().total == 7
            assert reader.verify().ok
            with pytest.raises(ReadOnlyStoreError):
                reader.search("u", _vec(3), record_access=True)
            for call in (
                lambda: reader.add("u", "x", _vec(1)),
                lambda: reader.touch("u", [fact]),
                lambda: reader.feedback("u", fact, positive=True),
                lambda: reader.pin("u", fact),
                lambda: reader.delete("u", fact),
                lambda: reader.set_context("u", ["t"]),
                lambda: reader.sweep(),
                lambda: reader.restore("u", ids=[ids[0]]),
                lambda: reader.compact_cold(),
                lambda: reader.repair(),
                lambda: reader.checkpoint(),
                lambda: reader.rebuild_catalog(),
                lambda: reader.start_migrator(),
            ):
                with pytest.raises(ReadOnlyStoreError):
                    call()
            assert reader.sweep(dry_run=True).dry_run  # a preview changes nothing: allowed
            later = writer.add("u", "added while the reader is open", _vec(11))
            assert reader.get("u", later) is not None  # a reader sees every commit
        assert _tree(path) == before  # nothing the reader did touched a file
        assert writer.get("u", ids[3]).tier == "cold" and writer.get("u", fact).access_count == 0


def test_a_reader_creates_no_cold_directory_and_applies_no_policy(tmp_path):
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)) as store:
        store.add("u", "x", _vec(0))
    (path / "cold" / "owner.json").unlink()
    (path / "cold").rmdir()
    with TierStore.open(path, readonly=True) as reader:
        assert reader.search("u", _vec(0), k=1)[0].memory.content == "x"
    assert not (path / "cold").exists()
    with pytest.raises(StoreConfigError, match="cannot apply a different policy"):
        TierStore.open(path, readonly=True, policy=Policy.from_dict({"thresholds": {"demote": 0.5}}))


@pytest.mark.slow
def test_cli_read_commands_run_while_another_process_holds_the_store(tmp_path):
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=ManualClock(time.time())) as store:
        store.add_batch("u", [{"content": f"note {i}", "embedding": _vec(i)} for i in range(3)])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from tierstore import TierStore
        store = TierStore.open({str(path)!r})
        print("open", flush=True)
        sys.stdin.read()
        store.close()
    """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        locked = subprocess.run([*CLI, "sweep", str(path)], capture_output=True, text=True, timeout=120)
        assert locked.returncode == 2 and f"open in process {holder.pid}" in locked.stderr
        for cmd in (["stats", str(path)], ["verify", str(path)], ["report", str(path), "--out", str(tmp_path / "r")]):
            out = subprocess.run([*CLI, *cmd], capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, (cmd, out.stderr)
        assert (
            "memories: 3 in 1 namespace"
            in subprocess.run([*CLI, "stats", str(path)], capture_output=True, text=True, timeout=120).stdout
        )
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert os.path.exists(tmp_path / "r" / "index.html")

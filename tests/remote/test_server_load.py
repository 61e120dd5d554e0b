"""The server under load and faults: 16 client processes for a few seconds
(no errors, every acknowledged add readable, access counts exact), SIGKILL
mid-load (no acknowledged write lost), SIGTERM (in-flight work finishes,
accesses flushed, the store released)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SUPPORT
from server_process import TOKEN, ServerProcess, child_env

from tierstore import TierStore
from tierstore.errors import RemoteError
from tierstore.remote.client import RemoteStore

WORKER = str(SUPPORT / "server_worker.py")
DIM = 16


def run_workers(
    tmp_path: Path, url: str, n: int, seconds: float, mode: str, during: Any = None
) -> list[list[dict[str, Any]]]:
    """Start ``n`` worker processes, let them all go at once, wait; their logs."""
    go = tmp_path / "go"
    outs = [tmp_path / f"worker-{i}.jsonl" for i in range(n)]
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, url, TOKEN, str(i), str(seconds), str(outs[i]), str(go), mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            cwd=tmp_path,
        )
        for i in range(n)
    ]
    try:
        for p in procs:  # each has connected (imports done): the load window starts together
            line = p.stdout.readline()  # type: ignore[union-attr]
            assert line.strip() == "ready", p.stderr.read()  # type: ignore[union-attr]
        go.write_text("")
        if during is not None:
            during()
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [[json.loads(line) for line in out.read_text().splitlines()] for out in outs]


@pytest.mark.slow
def test_sixteen_clients_no_errors_no_lost_adds_exact_access_counts(tmp_path):
    path = tmp_path / "store"
    TierStore.open(path, dim=DIM).close()
    with ServerProcess(path, "--migrator-interval", "0.5", cwd=tmp_path) as server:
        logs = run_workers(tmp_path, server.url, 16, 4.0, "mix")
        records = [r for log in logs for r in log]
        errors = [r["error"] for r in records if "error" in r]
        assert errors == []
        done = [r["done"] for r in records if "done" in r]
        assert len(done) == 16
        totals = Counter()
        for d in done:
            totals.update(d)
        assert all(totals[op] > 0 for op in ("add", "search", "touch", "feedback", "restore")), totals
        adds = {(ns, mid): content for ns, mid, content in (r["add"] for r in records if "add" in r)}
        expected = Counter(tuple(r["touch"]) for r in records if "touch" in r)
        remote = RemoteStore(server.url, token=TOKEN)
        assert remote.migrator_running  # serve runs background sweeps unless --no-migrator
        stats = remote.stats(lifecycle=False)
        assert stats.total == len(adds)  # nothing lost, nothing duplicated
        for (ns, mid), content in adds.items():
            m = remote.get(ns, mid)
            assert m is not None and m.content == content
            assert m.access_count == expected[(ns, mid)], (ns, mid, m.tier)
        assert totals["restored"] > 0  # memories were archived and came back under load
        assert server.terminate() == 0
    with TierStore.open(path) as store:  # after a graceful shutdown: every access was flushed
        for ns, mid in adds:
            assert store.get(ns, mid).access_count == expected[(ns, mid)]


@pytest.mark.slow
def test_sigkill_mid_load_loses_no_acknowledged_write(tmp_path):
    path = tmp_path / "store"
    TierStore.open(path, dim=DIM).close()
    server = ServerProcess(path, "--no-migrator", cwd=tmp_path)

    def kill_mid_load() -> None:
        # once more than 50 adds are acknowledged (not after a fixed time: a loaded machine may be slower)
        logs = [tmp_path / f"worker-{i}.jsonl" for i in range(8)]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if sum(f.read_text().count('"add"') for f in logs if f.exists()) > 50:
                break
            time.sleep(0.05)
        server.kill()

    try:
        logs = run_workers(tmp_path, server.url, 8, 300.0, "adds", during=kill_mid_load)
    finally:
        server.kill()
    acked = [r["add"] for log in logs for r in log if "add" in r]
    assert len(acked) > 50  # the kill came mid-load
    with ServerProcess(path, "--no-migrator", cwd=tmp_path) as again:
        remote = RemoteStore(again.url, token=TOKEN)
        assert not remote.migrator_running
        missing = [
            (ns, mid) for ns, mid, content in acked if (m := remote.get(ns, mid)) is None or m.content != content
        ]
        assert missing == []
        assert remote.stats(lifecycle=False).total >= len(acked)  # plus adds whose answer the kill cut off


@pytest.mark.slow
def test_sigterm_finishes_in_flight_work_and_flushes(tmp_path):
    """Touches are counted in memory and flushed within a second; a SIGTERM
    while clients are touching lets the requests under way finish, then
    closes the store: every acknowledged touch is in the catalog, and the
    store is released (it opens again at once)."""
    path = tmp_path / "store"
    with TierStore.open(path, dim=DIM) as store:
        ids = store.add_batch(
            "n", [{"content": f"m{i}", "embedding": np.eye(DIM, dtype=np.float32)[i % DIM]} for i in range(8)]
        )
    server = ServerProcess(path, "--no-migrator", cwd=tmp_path)
    acked: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def toucher(i: int) -> None:
        remote = RemoteStore(server.url, token=TOKEN, timeout=30)
        while not stop.is_set():
            try:
                remote.touch("n", [ids[i]])
            except RemoteError:
                return  # the server stopped listening
            with lock:
                acked[ids[i]] += 1

    threads = [threading.Thread(target=toucher, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while sum(acked.values()) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.terminate() == 0
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        server.kill()
    with TierStore.open(path) as store:
        counts = {mid: store.get("n", mid).access_count for mid in ids}
    assert counts == {mid: acked[mid] for mid in ids}

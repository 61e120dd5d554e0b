#!/usr/bin/env python
"""Crash harness: SIGKILL a busy store at random points, reopen, check nothing
was lost or duplicated.

Each trial creates a fresh store and runs one to three *rounds*. A round is a
child process (this file with ``--child``) that opens the store and runs a
random mix of add / add_batch / search / touch / feedback / delete / sweep /
restore / checkpoint / compact_cold (purge rewrites and layouts by code) / clock
advances, sometimes with the background migrator running, until the parent
SIGKILLs it: either after a random wall-clock delay, or at a crash point of
the move protocol (``TIERSTORE_CRASH_AT`` with ``TIERSTORE_CRASH_AFTER=n``, see ``tierstore/storage/faults.py``).

The child reports on stdout, one flushed line at a time:

    READY                 the store is open
    TRY <ns> <id>         about to add this memory
    ACK <ns> <id>         add()/add_batch() returned: the memory is acknowledged
    TRYDEL <ns> <id>      about to delete
    DEL <ns> <id>         delete() returned True
    T <time>              the clock is about to be advanced to <time>

With ``--os-crash-rate P`` a killed round is, with probability P, also an
**OS crash**: the WAL loses whatever was written after its last synced point
(``tests/support/wal_tail.py``: cut at a random commit boundary at or after what
SQLite's checkpoints and tierstore's sync barriers made durable). Acknowledged
writes after that point may go (``synchronous=NORMAL`` promises only process
crashes); the log then keeps only what the surviving catalog holds, and every
check below still applies to it: nothing the surviving catalog points at may
be gone (an archive object deleted before the commit that stopped using it
was on disk would fail the restore check).

After the last round the parent reopens the store and checks:

* a catalog rebuilt from the bucket alone, as the crash left it, holds no
  memory whose delete was acknowledged (the delete's tombstone);
* every acknowledged memory (not deleted by an acknowledged delete, or by the
  policy, which is logged in the ``events`` table) is in the catalog exactly
  once, in exactly one tier; nothing is in the catalog that was never tried;
* the hot index agrees with the catalog (same ids, one live slot each);
* every cold row points at a distinct (object, offset) that exists; warm rows
  point at shards that load;
* the next sweep finishes any interrupted archive batch without errors, and no
  archive object or warm shard is left that the catalog does not reference;
* every cold memory restores, and every memory's content and embedding are
  bit-identical to what was added.

Run as a script: ``python tests/support/crash_harness.py --trials 60`` prints
``trials N, lost 0, duplicated 0`` and exits non-zero on any loss,
duplication or other inconsistency. ``tests/core/test_crash_harness.py`` runs a few
trials under pytest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
DIM = 64  # random unit vectors unrelated, as with real embeddings (automatic supersession pairs close ones)
T0 = 1_700_000_000.0
NAMESPACES = ("alpha", "beta", "gamma")
TYPES = ("conversation", "conversation", "fact", "task")
# Simulated time stays within this many seconds of T0, so that confidences
# (0.7..1, decaying with a 180-day half-life) stay above the policy's delete bar
# of 0.3 and the policy itself does not delete memories. Deletes by the policy
# are still accounted for (from the events table), but should not happen.
MAX_ELAPSED = 60 * 86400.0
ADVANCES = (300.0, 1800.0, 3600.0, 3 * 3600.0, 2 * 86400.0, 8 * 86400.0)
CRASH_POINTS = (
    "archive.after_intent",
    "archive.after_put",
    "archive.after_commit",
    "demote.after_shard",
    "restore.after_commit",
    "add.after_commit",
    "delete.after_commit",
    "compact.after_intent",
    "compact.after_put",
    "compact.after_commit",
    "layout.after_intent",
    "layout.after_put",
    "layout.after_commit",
)
LAYOUT_RECORDS = 16  # records per object a layout by code writes in the child (cold_layout.OBJECT_RECORDS)
COMPACT_RATE = 0.02  # chance that a step of the child also runs compact_cold
CHILD_STEPS = 100_000  # the child runs until it is killed (or finishes, rarely)
ROUND_TIMEOUT_S = 60.0  # a child alive this long is hung: a failure


# -- the memories: deterministic from (namespace, id) ------------------------------------


def embedding_for(ns: str, mid: str) -> np.ndarray:
    seed = zlib.crc32(f"{ns}/{mid}".encode())
    return np.random.default_rng(seed).normal(size=DIM).astype(np.float32)


def expected_bytes(ns: str, mid: str) -> bytes:
    """The stored (L2-normalised float32) embedding, computed as the store does."""
    from tierstore.rules.validation import check_vector

    return check_vector(embedding_for(ns, mid), DIM).astype("<f4").tobytes()


def content_for(ns: str, mid: str) -> str:
    return f"memory {mid} of {ns}: note {zlib.crc32(mid.encode()) % 997} about the trip"


def store_settings(exact_threshold: int) -> Any:
    from tierstore import HotSettings, Settings

    # A small exact threshold puts hnswlib indexes and their checkpoints in play.
    return Settings(hot=HotSettings(exact_threshold=exact_threshold), flush_interval_s=0.2)


# -- child -------------------------------------------------------------------------------


def child_main(path: str, seed: int, round_no: int, t_start: float, exact_threshold: int, background: bool) -> None:
    from tierstore import ManualClock, MemoryNotFoundError, TierStore

    rng = np.random.default_rng(seed)

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    from tierstore.tiers import cold_layout

    cold_layout.OBJECT_RECORDS = LAYOUT_RECORDS  # small objects: a layout writes several
    clock = ManualClock(t_start)
    store = TierStore.open(path, dim=DIM, clock=clock, settings=store_settings(exact_threshold))
    if background:
        store.start_migrator(interval_s=0.05, max_items=200, time_budget_s=0.5)
    out("READY")
    known: dict[str, list[str]] = {ns: [] for ns in NAMESPACES}
    for ns, mid in store.engine.catalog.query("SELECT ns, id FROM memories"):
        known.setdefault(ns, []).append(mid)
    counter = 0

    def new_item(ns: str) -> dict[str, Any]:
        nonlocal counter
        mid = f"r{round_no}-{counter}"
        counter += 1
        return {
            "id": mid,
            "content": content_for(ns, mid),
            "embedding": embedding_for(ns, mid),
            "memory_type": TYPES[int(rng.integers(len(TYPES)))],
            "confidence": float(rng.uniform(0.7, 1.0)),
            "tags": [f"t{int(rng.integers(4))}"],
        }

    ops = ("add", "add_batch", "search", "touch", "feedback", "delete", "advance", "sweep", "restore", "checkpoint")
    weights = np.array([24, 10, 14, 10, 5, 3, 10, 14, 7, 3], float)
    # compact_cold (purge rewrites, and layouts by code in objects of LAYOUT_RECORDS) is drawn from a
    # generator of its own, so that the other operations of a seed are the ones they were before it
    compact_rng = np.random.default_rng([seed, 31])
    weights /= weights.sum()
    for _ in range(CHILD_STEPS):
        op = ops[int(rng.choice(len(ops), p=weights))]
        ns = NAMESPACES[int(rng.integers(len(NAMESPACES)))]
        ids = known[ns]
        try:
            if op == "add":
                item = new_item(ns)
                out(f"TRY {ns} {item['id']}")
                store.add(ns, **item)
                out(f"ACK {ns} {item['id']}")
                ids.append(item["id"])
            elif op == "add_batch":
                items = [new_item(ns) for _ in range(int(rng.integers(2, 12)))]
                for item in items:
                    out(f"TRY {ns} {item['id']}")
                store.add_batch(ns, items)
                for item in items:
                    out(f"ACK {ns} {item['id']}")
                ids.extend(item["id"] for item in items)
            elif op == "search":
                store.search(ns, rng.normal(size=DIM), k=int(rng.integers(1, 10)), record_access=bool(rng.integers(2)))
            elif op == "touch" and ids:
                store.touch(ns, [ids[int(i)] for i in rng.integers(len(ids), size=int(rng.integers(1, 4)))])
            elif op == "feedback" and ids:
                store.feedback(ns, ids[int(rng.integers(len(ids)))], positive=bool(rng.integers(2)))
            elif op == "delete" and ids:
                mid = ids.pop(int(rng.integers(len(ids))))
                out(f"TRYDEL {ns} {mid}")
                if store.delete(ns, mid):
                    out(f"DEL {ns} {mid}")
            elif op == "advance":
                dt = ADVANCES[int(rng.integers(len(ADVANCES)))]
                if clock.now() + dt - T0 <= MAX_ELAPSED:
                    out(f"T {clock.now() + dt!r}")
                    clock.advance(dt)
            elif op == "sweep":
                store.sweep(max_items=int(rng.choice([10, 50, 1000])))
            elif op == "restore":
                if rng.integers(2) and ids:
                    cold = [
                        r[0]
                        for r in store.engine.catalog.query(
                            "SELECT id FROM memories WHERE ns = ? AND tier = 2 LIMIT 20", (ns,)
                        )
                    ]
                    if cold:
                        store.restore(ns, ids=cold[: int(rng.integers(1, len(cold) + 1))])
                else:
                    store.restore(
                        ns, where={"memory_type": TYPES[int(rng.integers(len(TYPES)))]}, limit=int(rng.integers(1, 30))
                    )
            elif op == "checkpoint":
                store.checkpoint()
            if compact_rng.random() < COMPACT_RATE:
                store.compact_cold()
        except MemoryNotFoundError:
            pass  # a memory the policy deleted meanwhile (not expected within MAX_ELAPSED)
    store.close()
    out("CLOSED")


# -- parent ------------------------------------------------------------------------------


@dataclass
class Log:
    """What the children acknowledged, over all rounds of a trial."""

    tried: set[tuple[str, str]] = field(default_factory=set)
    acked: set[tuple[str, str]] = field(default_factory=set)
    try_deleted: set[tuple[str, str]] = field(default_factory=set)
    deleted: set[tuple[str, str]] = field(default_factory=set)
    t_max: float = T0
    ready: bool = False

    def feed(self, line: str) -> None:
        parts = line.split()
        if not parts:
            return
        kind = parts[0]
        if kind == "READY":
            self.ready = True
        elif kind == "T":
            self.t_max = max(self.t_max, float(parts[1]))
        elif kind in ("TRY", "ACK", "TRYDEL", "DEL") and len(parts) == 3:
            key = (parts[1], parts[2])
            {"TRY": self.tried, "ACK": self.acked, "TRYDEL": self.try_deleted, "DEL": self.deleted}[kind].add(key)


@dataclass
class TrialResult:
    lost: int = 0
    duplicated: int = 0
    problems: list[str] = field(default_factory=list)
    rounds: int = 0
    killed_at_point: int = 0
    killed_by_timer: int = 0
    clean_exits: int = 0
    acked: int = 0
    policy_deleted: int = 0
    restored: int = 0
    os_crashes: int = 0  # rounds whose unsynced WAL tail was dropped
    os_crash_dropped: int = 0  # acknowledged adds an OS crash took (they were never synced)
    points: Counter = field(default_factory=Counter)  # crash points that killed a round


def run_round(
    path: Path,
    log: Log,
    rng: np.random.Generator,
    round_no: int,
    exact_threshold: int,
    result: TrialResult,
    os_crash_rate: float = 0.0,
) -> None:
    env = dict(os.environ)
    env["TIERSTORE_SYNC_LOG"] = str(_sync_log(path))
    env.pop("TIERSTORE_CRASH_AT", None)
    env.pop("TIERSTORE_CRASH_AFTER", None)
    use_point = bool(rng.integers(2))
    if use_point:
        env["TIERSTORE_CRASH_AT"] = CRASH_POINTS[int(rng.integers(len(CRASH_POINTS)))]
        env["TIERSTORE_CRASH_AFTER"] = str(int(rng.integers(0, 6)))
        delay = 6.0  # fallback if the point is not reached in time
    else:
        delay = float(rng.uniform(0.02, 2.5))
    background = bool(rng.random() < 0.3)
    cmd = [
        sys.executable,
        str(HERE),
        "--child",
        str(path),
        str(int(rng.integers(2**31))),
        str(round_no),
        repr(log.t_max),
        str(exact_threshold),
        str(int(background)),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, bufsize=1)
    lines: list[str] = []
    ready = threading.Event()
    err: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.endswith("\n"):  # a line cut by the kill was never acknowledged
                lines.append(line)
                if line.startswith("READY"):
                    ready.set()

    def pump_err() -> None:
        assert proc.stderr is not None
        err.append(proc.stderr.read())

    reader = threading.Thread(target=pump, daemon=True)
    err_reader = threading.Thread(target=pump_err, daemon=True)
    reader.start()
    err_reader.start()
    started = time.monotonic()
    sent_kill = False
    if ready.wait(ROUND_TIMEOUT_S):
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            sent_kill = True
    try:
        proc.wait(timeout=max(1.0, ROUND_TIMEOUT_S - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        result.problems.append(f"round {round_no}: the child hung")
    reader.join(10)
    err_reader.join(10)
    for line in lines:
        log.feed(line)
    result.rounds += 1
    code = proc.returncode
    if code == -signal.SIGKILL:
        if sent_kill:
            result.killed_by_timer += 1
        else:
            result.killed_at_point += 1  # the child killed itself at its crash point
            result.points[env["TIERSTORE_CRASH_AT"]] += 1
        if os_crash_rate and rng.random() < os_crash_rate and (path / "catalog.sqlite").exists():
            os_crash(path, log, rng, result)
    elif code == 0:
        result.clean_exits += 1
    else:
        tail = "".join(err)[-2000:]
        result.problems.append(f"round {round_no}: child exited with {code}: {tail}")


def _sync_log(path: Path) -> Path:
    return path.parent / (path.name + ".syncs")


def os_crash(path: Path, log: Log, rng: np.random.Generator, result: TrialResult) -> None:
    """Drop the WAL's unsynced tail, then make the log agree with what survived:
    acknowledged adds and deletes after the durable point may be undone."""
    import shutil
    import sqlite3

    import wal_tail

    wal_tail.lose_unsynced_tail(
        path / "catalog.sqlite", _sync_log(path), lambda candidates: int(rng.integers(len(candidates)))
    )
    _sync_log(path).unlink(missing_ok=True)  # salts of a new WAL generation never match the old lines
    result.os_crashes += 1
    with tempfile.TemporaryDirectory() as d:  # read a copy: closing the last connection would checkpoint
        for suffix in ("", "-wal"):
            if Path(str(path / "catalog.sqlite") + suffix).exists():
                shutil.copy(str(path / "catalog.sqlite") + suffix, str(Path(d) / "c.sqlite") + suffix)
        conn = sqlite3.connect(Path(d) / "c.sqlite")
        try:
            present = set(conn.execute("SELECT ns, id FROM memories").fetchall())
        except sqlite3.OperationalError:  # the crash came before the schema was synced
            present = set()
        conn.close()
    dropped = {m for m in log.acked if m not in present and m not in log.try_deleted}
    result.os_crash_dropped += len(dropped)
    log.acked -= dropped
    log.deleted -= present  # a delete the crash undid: the memory is legitimately back


def verify(path: Path, log: Log, exact_threshold: int, result: TrialResult) -> None:
    from tierstore import ManualClock, TierStore

    problems = result.problems
    # Were the catalog lost right at the crash, a catalog rebuilt from the
    # bucket alone must not bring back a memory whose delete was acknowledged.
    with tempfile.TemporaryDirectory() as d:
        # on a copy of the bucket: the scratch store must not take the prefix over from the store
        shutil.copytree(path / "cold", Path(d) / "cold")
        rebuilt = TierStore.open(
            Path(d) / "rebuilt", dim=DIM, clock=ManualClock(log.t_max), cold=Path(d) / "cold", take_over_cold=True
        )
        try:
            rebuilt.rebuild_catalog()
            back = log.deleted & _present(rebuilt)
        finally:
            rebuilt.close()
        if back:
            problems.append(f"a catalog rebuilt from the bucket brings back deleted memories {sorted(back)[:5]}")
    store = TierStore.open(path, clock=ManualClock(log.t_max), settings=store_settings(exact_threshold))
    try:
        _check_structure(store, log, result, "at open")
        report = store.sweep()
        if report.errors:
            problems.append(f"recovery sweep errors: {report.errors}")
        _check_structure(store, log, result, "after the recovery sweep")
        pending = store.engine.catalog.query("SELECT key FROM archives WHERE state = 'pending'")
        if pending:
            problems.append(f"pending archive batches after the recovery sweep: {pending}")
        referenced = {
            k
            for (k,) in store.engine.catalog.query("SELECT DISTINCT cold_key FROM memories WHERE cold_key IS NOT NULL")
        }
        objects = set(store.engine.cold.list_batches())
        if objects != referenced:
            problems.append(
                f"archive objects {sorted(objects - referenced)} are not referenced; "
                f"{sorted(referenced - objects)} are referenced but missing"
            )
        # A deleted memory leaves no record behind once the sweep has compacted.
        present_now = _present(store)
        for key in sorted(objects & referenced):
            header, records = store.engine.cold.read_batch(key)
            gone = [e.id for e, _ in records if (header["namespace"], e.id) not in present_now]
            if gone:
                problems.append(f"archive object {key} still holds deleted memories {gone[:5]}")
        shard_dirs = {f"{d.parent.name}/{d.name}" for d in (path / "warm").glob("*/*")}
        shard_rows = {n for (n,) in store.engine.catalog.query("SELECT name FROM shards")}
        if shard_dirs != shard_rows:
            problems.append(f"warm shard directories {sorted(shard_dirs ^ shard_rows)} disagree with the catalog")
        # Every cold memory comes back, bit-identical.
        present = _present(store)
        for ns in sorted({ns for ns, _ in present}):
            cold = [
                mid for (mid,) in store.engine.catalog.query("SELECT id FROM memories WHERE ns = ? AND tier = 2", (ns,))
            ]
            if cold:
                try:
                    back = store.restore(ns, ids=cold)
                except Exception as exc:  # noqa: BLE001 - a failed restore is a problem, reported
                    problems.append(f"restore of {ns} failed: {type(exc).__name__}: {exc}")
                    back = []
                    for mid in cold:  # one at a time: what can still come back, and what is lost
                        try:
                            back += store.restore(ns, ids=[mid])
                        except Exception:  # noqa: BLE001 - counted as lost below
                            pass
                result.restored += len(back)
                if sorted(back) != sorted(cold):
                    problems.append(f"restore of {ns} brought back {len(back)} of {len(cold)}")
        unreadable = 0
        for ns, mid in sorted(present):
            m = store.get(ns, mid)
            if m is None or m.embedding is None:
                problems.append(f"{ns}/{mid}: unreadable after restore")
                unreadable += 1
                continue
            if (ns, mid) in log.tried:
                if m.embedding.tobytes() != expected_bytes(ns, mid):
                    problems.append(f"{ns}/{mid}: embedding differs from what was added")
                if m.content != content_for(ns, mid):
                    problems.append(f"{ns}/{mid}: content differs from what was added")
        result.lost = max(result.lost, unreadable)  # a row whose embedding is gone is a lost memory
        for ns in NAMESPACES:
            store.search(ns, embedding_for(ns, "probe"), k=5, record_access=False)
    finally:
        store.close()
    # And once more from a clean close (checkpoints written after the restores).
    with TierStore.open(path, clock=ManualClock(log.t_max), settings=store_settings(exact_threshold)) as store:
        _check_structure(store, log, result, "after a clean reopen", count=False)


def _present(store: Any) -> set[tuple[str, str]]:
    return {(ns, mid) for ns, mid in store.engine.catalog.query("SELECT ns, id FROM memories")}


def _check_structure(store: Any, log: Log, result: TrialResult, when: str, count: bool = True) -> None:
    from tierstore.kernels import columns as C

    problems = result.problems
    rows = store.engine.catalog.query("SELECT ns, id, tier, cold_key, cold_offset, shard FROM memories")
    counts = Counter((ns, mid) for ns, mid, *_ in rows)
    dup = {k for k, n in counts.items() if n > 1}
    present = set(counts)
    policy_deleted = {
        (ns, mid)
        for ns, mid in store.engine.catalog.query(
            "SELECT ns, id FROM events WHERE kind = 'delete' AND reason != 'explicit'"
        )
    }
    expected = log.acked - log.try_deleted - policy_deleted
    lost = expected - present
    resurrected = log.deleted & present
    phantom = present - log.tried
    # The hot index must agree with the catalog: every hot row once, nothing else.
    hot_dup: set[tuple[str, str]] = set()
    for ns in sorted({ns for ns, *_ in rows} | set(NAMESPACES)):
        hot = store.engine.hot.ensure(ns)
        with hot.lock.read():
            alive = [hot.ids[s] for s in range(hot.n) if hot.I[C.I_ALIVE, s]]
            index_ids = Counter(alive)
            cat_hot = {mid for rns, mid, tier, *_ in rows if rns == ns and tier == 0}
            for mid, n in index_ids.items():
                if n > 1 or mid not in cat_hot:
                    hot_dup.add((ns, mid))
            missing_hot = cat_hot - set(index_ids)
            if missing_hot:
                problems.append(f"{when}: {len(missing_hot)} hot rows of {ns} are not in the hot index")
            if set(hot.slot_of) != set(index_ids) or hot.live != len(alive):
                problems.append(f"{when}: hot index bookkeeping of {ns} is inconsistent")
    cold_locs = Counter((key, off) for _, _, tier, key, off, _ in rows if tier == 2)
    shared = {loc for loc, n in cold_locs.items() if n > 1}
    for _, _, tier, key, off, _ in rows:
        if tier == 2 and (key is None or off is None):
            problems.append(f"{when}: a cold row has no location")
    for ns, mid, tier, _key, _off, shard in rows:
        if tier == 1 and shard is None:
            problems.append(f"{when}: warm memory {ns}/{mid} has no shard")
    for info_ns in NAMESPACES:
        for info in store.engine.warm.shards(info_ns):
            try:
                store.engine.warm.load(info)
            except Exception as exc:  # noqa: BLE001 - reported as a problem
                problems.append(f"{when}: warm shard {info.name} does not load: {exc}")
    if resurrected:
        problems.append(f"{when}: deleted memories are back: {sorted(resurrected)[:5]}")
    if phantom:
        problems.append(f"{when}: memories nobody added: {sorted(phantom)[:5]}")
    if lost:
        problems.append(f"{when}: lost {sorted(lost)[:5]}")
    if dup or hot_dup or shared:
        problems.append(f"{when}: duplicated {sorted(dup | hot_dup)[:5]}, shared cold locations {sorted(shared)[:3]}")
    if count:
        result.lost = max(result.lost, len(lost))
        result.duplicated = max(result.duplicated, len(dup) + len(hot_dup) + sum(cold_locs[loc] - 1 for loc in shared))
        result.acked = len(log.acked)
        result.policy_deleted = len(policy_deleted & log.acked)


def run_trial(workdir: Path, seed: int, os_crash_rate: float = 0.0) -> TrialResult:
    rng = np.random.default_rng(seed)
    path = workdir / f"trial-{seed}"
    exact_threshold = int(rng.choice([16, 64, 2048]))
    log = Log()
    result = TrialResult()
    for round_no in range(int(rng.integers(1, 4))):
        run_round(path, log, rng, round_no, exact_threshold, result, os_crash_rate)
    if not (path / "catalog.sqlite").exists():
        return result  # killed before the store was created: nothing acknowledged
    try:
        verify(path, log, exact_threshold, result)
    except Exception as exc:  # noqa: BLE001 - a failed check is a failed trial
        import traceback

        result.problems.append(f"verification raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    return result


def run_trials(
    n: int, workdir: Path, seed: int = 0, verbose: bool = False, os_crash_rate: float = 0.0
) -> dict[str, Any]:
    totals = Counter()
    points: Counter = Counter()
    problems: list[str] = []
    for i in range(n):
        r = run_trial(workdir, seed + i, os_crash_rate)
        points.update(r.points)
        totals.update(
            lost=r.lost,
            duplicated=r.duplicated,
            rounds=r.rounds,
            killed_at_point=r.killed_at_point,
            killed_by_timer=r.killed_by_timer,
            clean_exits=r.clean_exits,
            acked=r.acked,
            policy_deleted=r.policy_deleted,
            restored=r.restored,
            failed=int(bool(r.problems)),
            os_crashes=r.os_crashes,
            os_crash_dropped=r.os_crash_dropped,
        )
        for p in r.problems:
            problems.append(f"trial {seed + i}: {p}")
        if verbose:
            print(
                f"trial {seed + i}: rounds {r.rounds} (crash point {r.killed_at_point}, timer "
                f"{r.killed_by_timer}, clean {r.clean_exits}), acked {r.acked}, restored {r.restored}, "
                f"lost {r.lost}, duplicated {r.duplicated}" + (f", PROBLEMS {r.problems}" if r.problems else ""),
                flush=True,
            )
    return {"trials": n, **{k: int(v) for k, v in totals.items()}, "problems": problems, "points": dict(points)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        path, seed, round_no, t_start, thr, bg = argv[1:7]
        child_main(path, int(seed), int(round_no), float(t_start), int(thr), bool(int(bg)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", type=Path, default=None, help="keep the stores here (default: a temp dir)")
    ap.add_argument(
        "--os-crash-rate",
        type=float,
        default=0.0,
        help="chance that a killed round also loses the WAL's unsynced tail (an OS crash)",
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    import tempfile

    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        out = run_trials(args.trials, args.workdir, args.seed, args.verbose, args.os_crash_rate)
    else:
        with tempfile.TemporaryDirectory(prefix="tierstore-crash-") as tmp:
            out = run_trials(args.trials, Path(tmp), args.seed, args.verbose, args.os_crash_rate)
    for p in out["problems"]:
        print(p)
    print("crash points hit: " + (", ".join(f"{k} {v}" for k, v in sorted(out["points"].items())) or "none"))
    print(
        f"rounds {out.get('rounds', 0)}: killed at a crash point {out.get('killed_at_point', 0)}, "
        f"killed after a random delay {out.get('killed_by_timer', 0)}, ran to the end {out.get('clean_exits', 0)}; "
        f"acknowledged adds {out.get('acked', 0)}, restored at verification {out.get('restored', 0)}, "
        f"deleted by policy {out.get('policy_deleted', 0)}"
    )
    if args.os_crash_rate:
        print(
            f"OS crashes {out.get('os_crashes', 0)}: acknowledged adds never synced and dropped "
            f"{out.get('os_crash_dropped', 0)}"
        )
    print(f"trials {out['trials']}, lost {out.get('lost', 0)}, duplicated {out.get('duplicated', 0)}")
    ok = not out["problems"] and out.get("lost", 0) == 0 and out.get("duplicated", 0) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

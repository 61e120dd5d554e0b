"""A shard: the process (a Ray actor, one per node) that owns some slots,
each as a :class:`SlotStore` on its local disk.

Taking a slot: take its lease (epoch + 1), open an empty local store, replay
the slot's log from the bucket, then write the fence record at the next
sequence number (after replaying any append that raced it). Only then is the
slot served. Releasing: refuse new writes, finish the group commit under way,
mark the lease released, drop the local copy. The class is plain Python; the
router wraps it with ``ray.remote`` (threaded: concurrent calls on one slot
share a group commit).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tierstore.cluster.bucket import BucketConfig
from tierstore.cluster.errors import FencedError, NotOwnerError
from tierstore.cluster.lease import release_lease, take_lease
from tierstore.cluster.records import unpack
from tierstore.cluster.slotlog import LogConflictError, SlotLog
from tierstore.cluster.slotstore import DEFAULT_LEASE_CHECK_S, READ_OPS, WRITE_OPS, SlotClock, SlotStore, monotonic_now
from tierstore.cluster.snapshot import materialize, snapshots_newest_first
from tierstore.cluster.stats import sum_stats
from tierstore.errors import CorruptDataError, InvalidInputError
from tierstore.policy import Policy
from tierstore.store import TierStore

__all__ = ["Shard", "check_lease_check"]

_FENCE_ATTEMPTS = 16


def check_lease_check(seconds: object) -> float:
    """A read-fencing bound: a finite number of seconds > 0."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
        raise InvalidInputError(f"lease_check_s must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


class Shard:
    """Owns slots; serves reads and writes of the namespaces in them.

    name: unique in the cluster (it is the lease's owner). root: a local
    directory for the slots' stores (a cache: deleted and rebuilt at will).
    lease_check_s: a slot's reads are admitted only while its lease was
    confirmed within this many seconds (see :meth:`SlotStore.ensure_current`).
    keep_history: keep every log record, snapshot and blob (no garbage
    collection after snapshots; see :mod:`.gc`).
    """

    def __init__(
        self,
        name: str,
        bucket: BucketConfig,
        *,
        dim: int,
        num_slots: int,
        root: str,
        policy: Policy | None = None,
        acquire_threads: int = 4,
        snapshot_every: int = 100,
        lease_check_s: float = DEFAULT_LEASE_CHECK_S,
        keep_history: bool = False,
    ) -> None:
        self.name = name
        self.dim = dim
        self.num_slots = num_slots
        self.policy = policy
        # every incarnation its own directory: a restarted process never reads a predecessor's files
        self.root = Path(root) / f"{name}-{os.getpid()}-{int(time.time() * 1000)}"
        self.root.mkdir(parents=True, exist_ok=True)
        self.bucket = bucket.open()
        self._slots: dict[int, SlotStore] = {}
        self._lock = threading.Lock()
        self._acquire_threads = acquire_threads
        self._take_gate = threading.BoundedSemaphore(acquire_threads)  # slots being taken at once
        self._taking: dict[int, threading.Lock] = {}  # per slot: one take at a time
        self.snapshot_every = snapshot_every  # log records between a slot's snapshots (0: only at release)
        self.lost: list[int] = []  # slots given up after a fence or a failed append
        self.lease_check_s = check_lease_check(lease_check_s)
        self.keep_history = bool(keep_history)  # True: no garbage collection of the slots' history

    # ------------------------------------------------------------------ introspection

    def pid(self) -> int:
        return os.getpid()

    def ping(self) -> str:
        return self.name

    def owned(self) -> list[int]:
        with self._lock:
            return sorted(s for s, st in self._slots.items() if st.live)

    def counters(self) -> dict[str, Any]:
        """Acknowledged writes, their log objects, replayed writes, the bucket's request counts."""
        with self._lock:
            slots = list(self._slots.values())
        return {
            "name": self.name,
            "owned": len(slots),
            "acked": sum(s.acked for s in slots),
            "commits": sum(s.commits for s in slots),
            "replayed": sum(s.replayed for s in slots),
            "snapshots": sum(s.snapshots for s in slots),
            "lease_checks": sum(s.lease_checks for s in slots),
            "collected": {k: sum(getattr(s.collected, k) for s in slots) for k in ("log", "snapshots", "blobs")},
            "snapshot_errors": [e for s in slots for e in s.snapshot_errors],
            "lost": list(self.lost),
            **self.bucket.counters(),
        }

    def set_put_delay(self, seconds: float) -> None:
        """Add ``seconds`` before each PUT (benchmarks: a remote store's latency on loopback)."""
        self.bucket.put_delay_s = float(seconds)

    def set_get_delay(self, seconds: float) -> None:
        """Add ``seconds`` before each GET (benchmarks: a remote store's latency on loopback)."""
        self.bucket.get_delay_s = float(seconds)

    def epochs(self) -> dict[int, int]:
        with self._lock:
            return {s: st.lease.epoch for s, st in self._slots.items() if st.live}

    # ------------------------------------------------------------------ ownership

    def acquire(self, slots: list[int]) -> dict[int, int]:
        """Take these slots (replaying each); returns slot -> epoch. Slots
        already owned are kept as they are. Concurrent calls (the router sends
        one per slot, to route each as soon as it is taken) take at most
        ``acquire_threads`` slots at a time between them, and one slot once."""
        todo = [s for s in slots if s not in self.owned()]
        if len(todo) <= 1:
            for s in todo:
                self._take_once(s)
        else:
            with ThreadPoolExecutor(min(self._acquire_threads, len(todo))) as pool:
                list(pool.map(self._take_once, todo))
        return {s: e for s, e in self.epochs().items() if s in set(slots)}

    def _take_once(self, slot: int) -> None:
        """:meth:`_take` unless a concurrent take of the slot got it first; within the shard's take gate."""
        with self._lock:
            guard = self._taking.setdefault(slot, threading.Lock())
        with guard:
            if slot in self.owned():
                return
            with self._take_gate:
                self._take(slot)

    def _take(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} outside [0, {self.num_slots})")
        with self._lock:
            old = self._slots.pop(slot, None)
        if old is not None:
            self._discard(old)
        lease = take_lease(self.bucket, slot, self.name)
        log = SlotLog(self.bucket, slot)
        # a directory per tenure: a dropped predecessor's files are removed in the
        # background and must never be this one's
        path = self.root / f"slot-{slot:05d}-e{lease.epoch}"
        shutil.rmtree(path, ignore_errors=True)
        # the newest snapshot that can be laid out (its blobs present and sound); none: the whole log.
        # Garbage collection keeps the two newest and the log from the older one on
        snap = None
        for candidate in snapshots_newest_first(self.bucket, slot):
            try:
                materialize(self.bucket, candidate, path)
            except CorruptDataError:  # a blob it names is gone or damaged: an older one, or the whole log
                shutil.rmtree(path, ignore_errors=True)
                continue
            snap = candidate
            break
        records = log.replay_from(0 if snap is None else snap.seq)
        try:
            first = next(records, None)
        except BaseException:  # collected history and no snapshot to start above it: refuse the slot
            shutil.rmtree(path, ignore_errors=True)
            raise
        # the store opens at the time its first replayed write (or the snapshot) was made
        clock = SlotClock(snap.t if snap is not None else first.t if first is not None else time.time())

        def reopen() -> TierStore:
            return TierStore.open(path, dim=self.dim, policy=self.policy, clock=clock)

        store = reopen()
        state = SlotStore(
            slot,
            store,
            clock,
            log,
            lease,
            self.name,
            self._lost,
            path=path,
            reopen=reopen,
            snapshot_every=self.snapshot_every,
            lease_check_s=self.lease_check_s,
            keep_history=self.keep_history,
        )
        if snap is not None:
            state.next_seq = state.snap_seq = snap.seq
            state.snap_refs = dict(snap.refs)
            state.fences = None if snap.fences is None else set(snap.fences)
            state.load_answers(snap.answers)
            state.uploaded.update(snap.refs.values())
        try:
            if first is not None:
                state.replay(first)
                for record in records:
                    state.replay(record)
            for _ in range(_FENCE_ATTEMPTS):
                try:
                    fence_sent = monotonic_now()
                    log.append(state.next_seq, kind="fence", epoch=lease.epoch, owner=self.name, t=clock.now(), ops=[])
                    if state.fences is not None:
                        state.fences.add(state.next_seq)
                    state.next_seq += 1
                    state.mark_confirmed(fence_sent)  # the fence landed: the slot is ours as of then
                    break
                except LogConflictError as conflict:
                    # the old owner's last append won the race: it was acknowledged, so it counts
                    state.replay(conflict.record)
            else:
                raise NotOwnerError(slot, f"slot {slot}: could not fence the log in {_FENCE_ATTEMPTS} tries")
        except FencedError as exc:
            store.close()
            shutil.rmtree(path, ignore_errors=True)
            raise NotOwnerError(slot, f"slot {slot} was taken by a newer owner while {self.name} replayed it") from exc
        except BaseException:
            store.close()
            shutil.rmtree(path, ignore_errors=True)
            raise
        clock.unpin()
        with self._lock:
            self._slots[slot] = state

    def release(self, slots: list[int]) -> None:
        """Hand these slots back: finish pending writes, release the leases, drop the local copies."""
        for slot in slots:
            with self._lock:
                state = self._slots.pop(slot, None)
            if state is None:
                continue
            state.quiesce()
            try:
                if state.snapshot(reopen=False):  # the next owner replays little
                    state.collect_garbage()  # before the release: the lease is still ours to confirm
            except Exception as exc:  # noqa: BLE001 - it replays more instead (or collects later)
                state.snapshot_errors.append(f"{type(exc).__name__}: {exc}")
            release_lease(self.bucket, state.lease)  # False: someone took it already; nothing to undo
            self._discard(state)

    def _discard(self, state: SlotStore) -> None:
        state.quiesce()
        state.store.close()
        shutil.rmtree(state.path, ignore_errors=True)

    def _lost(self, slot: int, state: SlotStore) -> None:
        """A slot's log refused our write (fenced) or could not be written: stop
        serving it. Closing waits for the group commit to finish, so in a thread."""
        with self._lock:
            if self._slots.get(slot) is state:
                del self._slots[slot]
            self.lost.append(slot)
        threading.Thread(target=self._discard, args=(state,), daemon=True).start()

    # ------------------------------------------------------------------ calls

    def _state(self, slot: int) -> SlotStore:
        with self._lock:
            state = self._slots.get(slot)
        if state is None or not state.live:
            raise NotOwnerError(slot, f"{self.name} does not own slot {slot}")
        return state

    def write(self, slot: int, rid: str, op: str, ns: str | None, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """A write on the slot's store, acknowledged once durable in the bucket."""
        if op not in WRITE_OPS:
            raise ValueError(f"not a write: {op!r}")
        return self._state(slot).write(rid, op, ns, list(args), dict(kwargs))

    def read(self, slot: int, op: str, ns: str | None, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if op not in READ_OPS:
            raise ValueError(f"not a read: {op!r}")
        return self._state(slot).read(op, ns, list(args), dict(kwargs))

    def call(self, packed: bytes) -> Any:
        """A read or write packed by the router as one msgpack argument
        (``[kind, slot, rid, op, ns, args, kwargs]``): Ray serialises one
        bytes argument in a fraction of the time of five Python objects."""
        kind, slot, rid, op, ns, args, kwargs = unpack(packed, "routed call")
        if kind == "write":
            return self.write(slot, rid, op, ns, args, kwargs)
        return self.read(slot, op, ns, args, kwargs)

    def _current(self) -> list[SlotStore]:
        """The slots this shard serves, each with its lease confirmed within
        the bound (a slot whose lease moved is dropped, as a read would)."""
        with self._lock:
            states = [s for s in self._slots.values() if s.live]
        out = []
        for state in states:
            try:
                state.ensure_current()
            except FencedError:  # moved: another shard counts it (an unreachable bucket is an error)
                continue
            out.append(state)
        return out

    def namespaces(self) -> list[str]:
        names: set[str] = set()
        for state in self._current():
            try:
                names.update(state.read("namespaces", None, [], {}))
            except (NotOwnerError, FencedError):  # moved meanwhile: another shard's to list
                continue
        return sorted(names)

    def stats(self) -> dict[str, Any]:
        """The counts of the slots this shard serves, summed (``Stats.as_dict``, no lifecycle)."""
        parts = []
        for state in self._current():
            try:
                # a read, so that a slot closed for a moment by its snapshot is waited for, not skipped
                parts.append(state.read("stats", None, [], {"lifecycle": False}).as_dict())
            except (NotOwnerError, FencedError):  # moved meanwhile: its new owner counts it
                continue
        return sum_stats(parts).as_dict()

    def close(self) -> None:
        """Release every slot (a clean shutdown)."""
        self.release(self.owned())
        shutil.rmtree(self.root, ignore_errors=True)

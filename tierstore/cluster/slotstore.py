"""One owned slot: a local :class:`TierStore` that is a cache of the slot's
log in the bucket, and the group commit that makes a write durable there
before it is acknowledged.

Determinism is what makes the local store a cache: a write is applied at a
store time ``t`` pinned for its whole group commit (the :class:`SlotClock`),
with its memory ids chosen before it is applied, and the log record carries
``t``, the ids and the call's arguments. A new owner replays the records at
the same times, in the same order, and gets the same memories, weights and
due times: the same top-k. Writes that fail (bad input changes nothing) are
not logged. Each write carries a request id; its answer is kept, so a retried
write (Ray calls are at-least-once) returns the original answer instead of
applying twice, also on a new owner after a failover (the replay recomputes
the answers).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tierstore.cluster.errors import FencedError, LeaseUnconfirmedError, NotOwnerError, SlotLostError
from tierstore.cluster.gc import Collected, blob_keys, collect
from tierstore.cluster.lease import Lease, lease_key
from tierstore.cluster.records import unpack
from tierstore.cluster.slotlog import LogRecord, SlotLog
from tierstore.cluster.snapshot import Snapshot, decode_answer, encode_answer, read_files, snapshot_key, split_sealed
from tierstore.errors import InvalidInputError, ObjectStoreError, StoreClosedError
from tierstore.storage.lru import LRU
from tierstore.store import TierStore

__all__ = ["DEFAULT_LEASE_CHECK_S", "WRITE_OPS", "READ_OPS", "SlotClock", "SlotStore", "monotonic_now"]

#: Calls that change a slot: logged, group-committed, idempotent by request id.
#: ``repair`` and ``compact_cold`` rewrite derived files and archive objects
#: (and the catalog rows that point at them), so they are logged too: a replay
#: does the same at the same store time, and they wait for a snapshot as writes do.
WRITE_OPS = frozenset(
    {
        "add",
        "add_batch",
        "touch",
        "feedback",
        "pin",
        "delete",
        "set_context",
        "restore",
        "sweep",
        "repair",
        "compact_cold",
    }
)
#: Calls that only read (served by the owner's local store). ``sweep_preview``
#: is ``sweep(dry_run=True)``: it counts what is due and changes nothing.
READ_OPS = frozenset(
    {
        "search",
        "get",
        "get_by_key",
        "memories",
        "memories_page",
        "get_context",
        "check_batch",
        "verify",
        "sweep_preview",
    }
)
# Answers kept per slot for retried requests; older ones are forgotten (a retry
# that late would apply again: documented in docs/cluster.md). A snapshot keeps
# the newest _SNAPSHOT_ANSWERS of them.
_MAX_ANSWERS = 100_000
_SNAPSHOT_ANSWERS = 10_000
# A read that meets the store closed for a snapshot tries again this often.
_READ_RETRIES = 50
#: Default bound (seconds) on how old a slot owner's last confirmation of its
#: lease may be when it admits a read (see SlotStore.ensure_current).
DEFAULT_LEASE_CHECK_S = 2.0
# The shard's own monotonic clock: confirmations and read admissions are
# compared on it alone, so no two machines' clocks need to agree. A module
# global so tests can drive it.
_monotonic = time.monotonic


def monotonic_now() -> float:
    """The shard's monotonic clock, seconds (what lease confirmations are timed on)."""
    return _monotonic()


class SlotClock:
    """Store time for one slot: the wall clock, except while pinned.

    Pinned while a group commit applies (or a record replays), so every part of
    a write sees the one time the log records. Never runs backwards: a pin for a
    live commit is at or after every time already read, so no memory is dated
    before its own past (thread-safe)."""

    def __init__(self, start: float) -> None:
        self._lock = threading.Lock()
        self._last = float(start)
        self._pinned: float | None = float(start)

    def now(self) -> float:
        pinned = self._pinned
        if pinned is not None:
            return pinned
        with self._lock:
            self._last = max(time.time(), self._last)
            return self._last

    def pin_now(self) -> float:
        """Pin at the current time (never before any time read); returns it."""
        with self._lock:
            self._last = max(time.time(), self._last)
            self._pinned = self._last
            return self._last

    def pin(self, t: float) -> None:
        """Pin at ``t`` (a replayed record's time)."""
        with self._lock:
            self._last = max(self._last, t)
            self._pinned = t

    def unpin(self) -> None:
        self._pinned = None

    @property
    def last(self) -> float:
        """The latest time this clock has told."""
        with self._lock:
            return max(self._last, self._pinned or self._last)


def _prepare(op: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call as it is logged: memory ids chosen now (so a replay makes the
    same ids), nothing that depends on wall time or a terminal."""
    if op == "add" and kwargs.get("id") is None:
        kwargs = {**kwargs, "id": uuid.uuid4().hex}
    elif op == "add_batch":
        items = args[0]
        if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
            raise InvalidInputError("add_batch items must be a list of dicts")
        prepared = []
        for item in items:
            if not isinstance(item, Mapping):
                raise InvalidInputError(f"add_batch items must be dicts, got {type(item).__name__}")
            item = dict(item)
            if item.get("id") is None:
                item["id"] = uuid.uuid4().hex
            prepared.append(item)
        args = [prepared]
    elif op == "compact_cold":
        kwargs = {**kwargs, "progress": False}
    elif op in ("sweep", "restore"):
        if kwargs.get("time_budget_s") is not None:
            # a time budget stops at a point that depends on the machine: a replay would differ
            raise InvalidInputError("in a cluster, sweep takes max_items, not time_budget_s")
        if kwargs.get("dry_run"):
            raise InvalidInputError("a dry-run sweep is a read: the cluster routes it as one")
        kwargs = {**kwargs, "progress": False}
    return args, kwargs


def apply(store: TierStore, op: str, ns: str | None, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call ``op`` on the store (``ns`` first unless it is ``None``)."""
    if op == "sweep_preview":
        return store.sweep(dry_run=True, **kwargs)
    fn = getattr(store, op)
    return fn(*args, **kwargs) if ns is None else fn(ns, *args, **kwargs)


class _Entry:
    """One write waiting for its group commit."""

    __slots__ = ("rid", "op", "ns", "args", "kwargs", "done", "result", "error")

    def __init__(self, rid: str, op: str, ns: str | None, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.rid, self.op, self.ns, self.args, self.kwargs = rid, op, ns, args, kwargs
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True

    def record(self) -> dict[str, Any]:
        return {"rid": self.rid, "op": self.op, "ns": self.ns, "args": self.args, "kwargs": self.kwargs}


class SlotStore:
    """A slot this shard owns (under ``lease``): its store, log and group commit."""

    def __init__(
        self,
        slot: int,
        store: TierStore,
        clock: SlotClock,
        log: SlotLog,
        lease: Lease,
        owner: str,
        on_lost: Any,
        *,
        path: Path,
        reopen: Callable[[], TierStore],
        snapshot_every: int = 0,
        lease_check_s: float = DEFAULT_LEASE_CHECK_S,
        keep_history: bool = False,
    ) -> None:
        self.slot = slot
        self.store = store
        self.path = path
        self._reopen = reopen
        self.snapshot_every = snapshot_every  # log records between snapshots (0: only at release)
        self.snap_seq = 0  # the newest snapshot covers the records before this one
        self.snap_refs: dict[str, str] | None = None  # its blobs (None: no snapshot known)
        self.prev_seq: int | None = None  # the snapshot before it (None: not known), and its blobs
        self.prev_refs: dict[str, str] = {}
        # seqs of every fence record in the log (kept by garbage collection); None: not known, collect nothing
        self.fences: set[int] | None = set()
        self.keep_history = keep_history  # True: never delete old log records, snapshots or blobs
        self.collected = Collected()
        self._gc_lock = threading.Lock()
        self.clock = clock
        self.log = log
        self.lease = lease
        self.owner = owner
        self.next_seq = 0
        self.live = True  # False once released, fenced, or its log could not be written
        self._on_lost = on_lost
        # answers by request id, oldest first out: never made recent by a read (a FIFO use of the LRU)
        self._answers: LRU[str, Any] = LRU(_MAX_ANSWERS)
        self._cv = threading.Condition()
        self._queue: list[_Entry] = []
        self._inflight: dict[str, _Entry] = {}
        self._leading = False
        self.acked = 0  # writes acknowledged
        self.commits = 0  # log objects of writes (each one PUT, bar retries)
        self.replayed = 0  # writes replayed when the slot was taken
        self.snapshots = 0  # snapshots written
        self.uploaded: set[str] = set()  # SHA-256 of the sealed warm files known to be in the bucket
        self.snapshot_errors: list[str] = []
        # read fencing: when (on _monotonic) the lease was last known to be ours
        self.lease_check_s = float(lease_check_s)
        self._confirmed = float("-inf")
        self._confirm_lock = threading.Lock()
        self._renewing = False
        self.lease_checks = 0  # conditional GETs of the lease made to admit reads

    # ------------------------------------------------------------------ replay

    def replay(self, record: LogRecord) -> None:
        """Apply a log record at its own time (a fence only advances the sequence)."""
        if record.kind == "fence" and self.fences is not None:
            self.fences.add(record.seq)
        if record.kind == "ops":
            self.clock.pin(record.t)
            try:
                for op in record.ops:
                    result = apply(self.store, op["op"], op["ns"], list(op["args"]), dict(op["kwargs"]))
                    self._remember(op["rid"], result)
                    self.replayed += 1
            finally:
                self.clock.unpin()
        self.next_seq = record.seq + 1

    def _remember(self, rid: str, result: Any) -> None:
        self._answers.put(rid, result, touch=False)

    # ------------------------------------------------------------------ writes

    def write(self, rid: str, op: str, ns: str | None, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Apply a write, make it durable in the log (group commit) and return
        its answer; the answer it had if ``rid`` was already applied."""
        with self._cv:
            if rid in self._answers:
                return self._answers.peek(rid)
            entry = self._inflight.get(rid)
            if entry is None:
                if not self.live:
                    raise NotOwnerError(self.slot)
                args, kwargs = _prepare(op, args, kwargs)
                entry = _Entry(rid, op, ns, args, kwargs)
                self._queue.append(entry)
                self._inflight[rid] = entry
            while not entry.done:
                if not self._leading and self._queue:
                    batch, self._queue = self._queue, []
                    self._leading = True
                    self._cv.release()
                    try:
                        self._commit(batch)
                    except BaseException as exc:  # noqa: BLE001 - every waiter must be told
                        for e in batch:
                            if not e.done:
                                e.finish(error=exc)
                    finally:
                        self._cv.acquire()
                        for e in batch:
                            self._inflight.pop(e.rid, None)
                        if self._snapshot_due():
                            # still leading: the slot's writes wait for the snapshot, its waiters need not
                            threading.Thread(target=self._snapshot_then_lead_no_more, daemon=True).start()
                        else:
                            self._leading = False
                        self._cv.notify_all()
                else:
                    self._cv.wait(1.0)
        if entry.error is not None:
            raise entry.error
        return entry.result

    def _commit(self, batch: list[_Entry]) -> None:
        """Lead one group commit: apply the batch in order at one pinned time,
        append one log object, then acknowledge."""
        if not self.live:
            for e in batch:
                e.finish(error=NotOwnerError(self.slot))
            return
        applied: list[_Entry] = []
        started = _monotonic()  # a landed append proves the slot ours as of its start (see ensure_current)
        t = self.clock.pin_now()
        try:
            for e in batch:
                try:
                    result = apply(self.store, e.op, e.ns, e.args, e.kwargs)
                except StoreClosedError:
                    e.finish(error=NotOwnerError(self.slot))
                except Exception as exc:  # noqa: BLE001 - bad input: the store changed nothing, nothing logged
                    e.finish(error=exc)
                else:
                    e.result = result
                    applied.append(e)
        finally:
            self.clock.unpin()
        if not applied:
            return
        try:
            self.log.append(
                self.next_seq,
                kind="ops",
                epoch=self.lease.epoch,
                owner=self.owner,
                t=t,
                ops=[e.record() for e in applied],
            )
        except FencedError as exc:
            # a newer owner fenced the log: these writes never happened for anyone
            self._lose(exc, applied)
            return
        except Exception as exc:  # noqa: BLE001
            # the local store is ahead of the log (the put may or may not have
            # landed): drop the slot; the router has it taken and replayed afresh
            err = SlotLostError(self.slot, f"slot {self.slot}: the write could not be made durable: {exc}")
            self._lose(err, applied)
            return
        self.next_seq += 1
        self.commits += 1
        self.mark_confirmed(started)
        with self._cv:
            for e in applied:
                self._remember(e.rid, e.result)
        self.acked += len(applied)
        for e in applied:
            e.finish(result=e.result)

    def _snapshot_due(self) -> bool:
        return bool(self.live and self.snapshot_every and self.next_seq - self.snap_seq >= self.snapshot_every)

    def _snapshot_then_lead_no_more(self) -> None:
        written = False
        try:
            written = self.snapshot(reopen=True)
        except Exception as exc:  # noqa: BLE001 - a missed snapshot only makes the next replay longer
            self.snapshot_errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with self._cv:
                self._leading = False
                self._cv.notify_all()
        if written:  # after the writes resumed: collection touches only the bucket
            try:
                self.collect_garbage()
            except Exception as exc:  # noqa: BLE001 - what was not deleted is deleted next time
                self.snapshot_errors.append(f"gc: {type(exc).__name__}: {exc}")

    def snapshot(self, *, reopen: bool) -> bool:
        """Write a snapshot of the slot as of ``next_seq`` (no commit may be in
        flight: the caller leads the group commit or quiesced the slot).
        ``reopen``: serve on afterwards (else the store stays closed).
        Returns False if there was nothing new to snapshot."""
        if self.next_seq <= self.snap_seq:
            return False
        with self._gc_lock:  # never beside a collection: it must not delete a blob this snapshot names
            return self._snapshot(reopen)

    def _snapshot(self, reopen: bool) -> bool:
        seq = self.next_seq
        self.store.close()  # a consistent copy: no open transaction, indexes checkpointed
        try:
            files = read_files(self.path)
        finally:
            if reopen:
                try:
                    self.store = self._reopen()
                except Exception as exc:  # noqa: BLE001 - the slot cannot serve: hand it back
                    self._lose(exc, [])
                    raise
        with self._cv:
            answers = [
                (rid, enc)
                for rid, a in self._answers.items()[-_SNAPSHOT_ANSWERS:]
                if (enc := encode_answer(a)) is not None
            ]
        refs = split_sealed(self.log.bucket, self.slot, files, self.uploaded)
        fences = None if self.fences is None else sorted(f for f in self.fences if f < seq)
        snap = Snapshot(self.slot, seq, self.lease.epoch, self.owner, self.clock.last, files, answers, refs, fences)
        key = snapshot_key(self.slot, seq)
        if self.log.bucket.put_new(key, snap.encode()) is None:
            # that prefix was saved already (by a stale owner racing us): what it names is what must be kept
            got = self.log.bucket.get(key)
            refs = {} if got is None else Snapshot.decode(got[0], key).refs
        if self.snap_refs is not None:
            self.prev_seq, self.prev_refs = self.snap_seq, self.snap_refs
        self.snap_seq, self.snap_refs = seq, refs
        self.snapshots += 1
        return True

    def collect_garbage(self) -> Collected | None:
        """After a snapshot: delete the slot's history no replay can need (see
        :mod:`.gc`): keep the two newest snapshots, the log from the older on,
        every fence, and the blobs they name. Only after confirming the lease
        is still ours (a conditional GET): a slot that moved collects nothing.
        Returns what was deleted, or None if nothing was collected (history
        kept by setting, fences unknown, no older snapshot yet, lease moved,
        or a collection already running)."""
        if self.keep_history or self.fences is None or self.prev_seq is None or self.snap_refs is None:
            return None
        if not self._gc_lock.acquire(blocking=False):
            return None
        try:
            keep_from, fences = self.prev_seq, set(self.fences)
            keep_blobs = set(self.snap_refs.values()) | set(self.prev_refs.values())
            blobs = blob_keys(self.log.bucket, self.slot)  # before the check: no new owner's upload is among them
            sent = _monotonic()
            changed, _ = self.log.bucket.get_if_changed(lease_key(self.slot), self.lease.etag)
            if changed:
                return None  # not ours any more: the new owner collects
            self.mark_confirmed(sent)
            done = collect(
                self.log.bucket, self.slot, keep_from=keep_from, fences=fences, keep_blobs=keep_blobs, blobs=blobs
            )
            self.uploaded &= keep_blobs  # a deleted blob is uploaded again if a later snapshot needs it
            self.collected.add(done)
            return done
        finally:
            self._gc_lock.release()

    def load_answers(self, answers: list[tuple[str, Any]]) -> None:
        for rid, doc in answers:
            self._remember(rid, decode_answer(doc))

    def _lose(self, exc: BaseException, applied: list[_Entry]) -> None:
        self.live = False
        for e in applied:
            e.finish(error=exc)
        self._on_lost(self.slot, self)

    # ------------------------------------------------------------------ release

    def quiesce(self) -> None:
        """Refuse new writes and wait until the group commit under way is done."""
        with self._cv:
            self.live = False
            while self._leading:
                self._cv.wait(1.0)
            for e in self._queue:
                e.finish(error=NotOwnerError(self.slot))
            self._queue = []
            self._cv.notify_all()

    def read(self, op: str, ns: str | None, args: list[Any], kwargs: dict[str, Any]) -> Any:
        for _ in range(_READ_RETRIES):
            if not self.live:
                raise NotOwnerError(self.slot)
            self.ensure_current()
            try:
                return apply(self.store, op, ns, args, kwargs)
            except StoreClosedError:
                time.sleep(0.01)  # closed for a snapshot: reopened in a moment
        raise NotOwnerError(self.slot)

    # ------------------------------------------------------------------ read fencing

    def mark_confirmed(self, started: float) -> None:
        """The slot was known to be ours at ``started`` (``_monotonic`` seconds):
        a lease check that found the lease unchanged, or a log append (the
        fence included) that landed, each counted from when it was *sent*."""
        self._confirmed = max(self._confirmed, started)

    def ensure_current(self) -> None:
        """Admit a read only if the lease was confirmed ours within the last
        ``lease_check_s`` seconds; otherwise confirm it now with a conditional
        GET (``If-None-Match`` on its ETag: 304, no body, when unchanged).

        Why that suffices: a new owner takes the lease (CAS) before it serves
        anything, so while the lease is ours nobody else has acknowledged a
        write of the slot, and ours are all applied here. A read admitted at
        ``r`` therefore answers from a state that was the slot's current state
        at some instant no earlier than ``r - lease_check_s``. When the lease
        has moved, the slot is dropped and FencedError raised; when the bucket
        does not answer, LeaseUnconfirmedError (the slot is kept). Past half
        the bound, a read is admitted at once and the lease is re-confirmed in
        the background, so a busy slot never waits for the GET."""
        age = _monotonic() - self._confirmed
        if age < self.lease_check_s / 2:
            return
        if age < self.lease_check_s:
            self._renew_in_background()
            return
        self.confirm(self.lease_check_s)

    def confirm(self, max_age: float = 0.0) -> None:
        """Check the lease in the bucket now, unless it was confirmed within
        ``max_age`` seconds (e.g. by another thread while this one waited)."""
        with self._confirm_lock:
            if _monotonic() - self._confirmed < max_age:
                return
            started = _monotonic()
            self.lease_checks += 1
            try:
                changed, got = self.log.bucket.get_if_changed(lease_key(self.slot), self.lease.etag)
            except ObjectStoreError as exc:
                raise LeaseUnconfirmedError(
                    self.slot, f"slot {self.slot}: its lease could not be confirmed, so a read is refused: {exc}"
                ) from None
            if not changed:
                self.mark_confirmed(started)
                return
            holder = "nobody (the lease object is gone)"
            if got is not None:
                try:
                    doc = unpack(got[0], lease_key(self.slot))
                    holder = f"{doc.get('owner')!r} at epoch {doc.get('epoch')}"
                except Exception:  # noqa: BLE001 - unreadable: moved all the same
                    holder = "an unreadable lease"
            err = FencedError(
                self.slot,
                f"slot {self.slot}: the lease is now held by {holder}; "
                f"{self.owner!r} (epoch {self.lease.epoch}) serves it no more",
            )
            if self.live:
                self._lose(err, [])
            raise err

    def _renew_in_background(self) -> None:
        with self._cv:
            if self._renewing:
                return
            self._renewing = True

        def renew() -> None:
            try:
                self.confirm(self.lease_check_s / 2)
            except Exception:  # noqa: BLE001 - a moved lease dropped the slot; an unreachable bucket: the next read
                pass
            finally:
                with self._cv:
                    self._renewing = False

        threading.Thread(target=renew, daemon=True, name=f"lease-check-{self.slot}").start()

"""A slot's write-ahead log in the bucket: ``slots/<slot>/log/<seq>``, one
object per group commit, appended with create-only puts at the next sequence
number.

Every object is stamped with its writer's epoch (and owner, and a random
nonce that tells a writer its own object after a lost response). Two kinds:

* ``ops``: the writes of one group commit, at store time ``t`` (seconds),
  each with its request id, in the order they were applied.
* ``fence``: written by a new owner right after it replayed the log to its
  end. A stale owner's next append lands at a sequence number at or below
  the fence's, gets 412, reads what is there, sees a newer epoch and knows it
  was fenced: the write is not acknowledged and it stops serving the slot.
  If a stale owner's append wins the race against the fence, that write was
  acknowledged legitimately: the new owner replays it and fences after it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tierstore.cluster.bucket import Bucket
from tierstore.cluster.errors import FencedError
from tierstore.cluster.records import pack, unpack
from tierstore.errors import CorruptDataError, ObjectStoreError

__all__ = ["LogConflictError", "LogRecord", "SlotLog"]

_SEQ_DIGITS = 12
_APPEND_ATTEMPTS = 4
_APPEND_BACKOFF_S = 0.05


@dataclass(frozen=True)
class LogRecord:
    seq: int
    kind: str  # "ops" or "fence"
    epoch: int
    owner: str
    nonce: str
    t: float  # store time of the group commit, POSIX seconds
    ops: list[dict[str, Any]]  # {"rid", "op", "ns", "args"}

    @classmethod
    def decode(cls, seq: int, body: bytes, what: str) -> LogRecord:
        doc = unpack(body, what)
        try:
            return cls(
                seq,
                str(doc["kind"]),
                int(doc["epoch"]),
                str(doc["owner"]),
                str(doc["nonce"]),
                float(doc["t"]),
                list(doc.get("ops") or []),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptDataError(f"{what}: not a log record ({exc})") from None


class LogConflictError(ObjectStoreError):
    """The sequence number holds a record of an older (or the same) epoch that
    is not ours: a new owner's fence lost the race to the old owner's last
    append, which it must replay before fencing after it."""

    def __init__(self, record: LogRecord, message: str) -> None:
        super().__init__(message)
        self.record = record


class SlotLog:
    """The log of one slot, read and appended by its owner (``epoch``)."""

    def __init__(self, bucket: Bucket, slot: int) -> None:
        self.bucket = bucket
        self.slot = slot
        self._dir = f"slots/{slot:05d}/log/"

    def key(self, seq: int) -> str:
        return f"{self._dir}{seq:0{_SEQ_DIGITS}d}"

    def read(self, seq: int) -> LogRecord | None:
        got = self.bucket.get(self.key(seq))
        return None if got is None else LogRecord.decode(seq, got[0], self.key(seq))

    def replay_from(self, first: int) -> Iterator[LogRecord]:
        """The records from ``first`` on, in order, up to the first missing
        number (a listing finds them; a final probe catches an append that
        landed after the listing).

        Appends are contiguous, so a missing number followed by later records
        is history that was collected (see :mod:`.gc`: records below the
        older kept snapshot go, fence records stay): CorruptDataError, since
        replaying past it would lose writes and fencing at it would reuse a
        number a stale owner may still append at."""
        start_after = self.key(first - 1) if first > 0 else ""
        seq = first
        run: list[int] = []  # the listed numbers from ``first`` on without a gap
        gap: int | None = None  # the first listed number past a missing one
        for key in self.bucket.list(self._dir, start_after):
            try:
                listed = int(key[len(self._dir) :])
            except ValueError:
                continue
            if listed != seq:
                gap = listed
                break
            run.append(seq)
            seq += 1
        # the run's records read ahead of the replay (a take replays up to a snapshot's worth)
        for n, got in zip(run, self.bucket.get_many([self.key(n) for n in run])):
            if got is None:  # listed, then gone: collected while we read
                raise CorruptDataError(f"slot {self.slot}: log record {n} was deleted during the replay")
            yield LogRecord.decode(n, got[0], self.key(n))
        if gap is not None:
            raise CorruptDataError(
                f"slot {self.slot}: log record {seq} is missing but {gap} is there "
                f"(collected history: replay from a newer snapshot)"
            )
        while True:
            record = self.read(seq)
            if record is None:
                return
            yield record
            seq += 1

    def append(self, seq: int, *, kind: str, epoch: int, owner: str, t: float, ops: list[dict[str, Any]]) -> LogRecord:
        """Write the record at ``seq``, create-only. Returns it once durable.

        Raises FencedError if the number holds a newer epoch's record (this
        writer lost the slot), ObjectStoreError if it holds anything else not
        ours (LogConflictError: an older owner's append won a race) or the
        store keeps failing. A
        retried put whose first attempt landed finds its own nonce: success."""
        nonce = uuid.uuid4().hex
        body = pack({"kind": kind, "epoch": epoch, "owner": owner, "nonce": nonce, "t": t, "ops": ops})
        record = LogRecord(seq, kind, epoch, owner, nonce, t, ops)
        last: Exception | None = None
        for attempt in range(_APPEND_ATTEMPTS):
            try:
                if self.bucket.put_new(self.key(seq), body) is not None:
                    return record
            except ObjectStoreError as exc:  # the put may have landed: look before trying again
                last = exc
                time.sleep(_APPEND_BACKOFF_S * (attempt + 1))
            there = self.read(seq)
            if there is None:
                continue
            if there.nonce == nonce:
                return record
            if there.epoch > epoch:
                raise FencedError(
                    self.slot,
                    f"slot {self.slot}: log seq {seq} holds epoch {there.epoch} "
                    f"({there.kind} by {there.owner!r}); this writer's epoch is {epoch}",
                )
            raise LogConflictError(
                there,
                f"slot {self.slot}: log seq {seq} already holds a record of epoch "
                f"{there.epoch} by {there.owner!r} (this writer: epoch {epoch}, {owner!r})",
            )
        raise ObjectStoreError(f"slot {self.slot}: append at seq {seq} failed {_APPEND_ATTEMPTS} times: {last}")

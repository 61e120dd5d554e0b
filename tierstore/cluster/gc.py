"""Garbage collection of a slot's history in the bucket: old log records,
old snapshots, and blobs no kept snapshot names.

After the slot's owner makes a new snapshot durable, it keeps the two newest
snapshots (the new one, and the one before it, in case the new one turns out
unreadable), the log from the older of the two on, and every **fence**
record, and deletes the rest of the slot's history:

* log records below the older kept snapshot, except fences. A fence sits at
  the number a stale owner appends at next, and its create-only 412 is what
  refuses that append: deleted, the number would be free again and a zombie
  write could land there, acknowledged and never replayed. Fences are one
  small object per takeover; each snapshot lists their numbers.
* snapshots older than the older kept one;
* blobs (sealed warm shard files) that neither kept snapshot names.

It is safe against a takeover because it runs only after the owner confirmed
its lease still unchanged *after* the new snapshot became durable: a new owner
takes the lease before it lists the snapshots, so it finds that snapshot (or
a newer one) and replays only records at or above it, all kept. A takeover
after the check changes nothing of that; a takeover before it makes the check
fail and nothing is deleted. A replay that would need a deleted record (every
kept snapshot unreadable) fails with CorruptDataError instead of serving a
slot with writes missing (see :meth:`.slotlog.SlotLog.replay_from`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tierstore.cluster.bucket import Bucket

__all__ = ["Collected", "blob_keys", "collect"]


@dataclass
class Collected:
    """Objects deleted by one collection (or summed over many)."""

    log: int = 0
    snapshots: int = 0
    blobs: int = 0

    def add(self, other: Collected) -> None:
        self.log += other.log
        self.snapshots += other.snapshots
        self.blobs += other.blobs


def _numbered(keys: list[str], prefix: str) -> list[tuple[int, str]]:
    out = []
    for key in keys:
        tail = key[len(prefix) :]
        if tail.isdigit():
            out.append((int(tail), key))
    return out


def blob_keys(bucket: Bucket, slot: int) -> list[str]:
    """The slot's blob keys as they stand now (listed *before* the lease check: see :func:`collect`)."""
    return bucket.list(f"slots/{slot:05d}/blobs/")


def collect(
    bucket: Bucket, slot: int, *, keep_from: int, fences: set[int], keep_blobs: set[str], blobs: list[str]
) -> Collected:
    """Delete the slot's snapshots and non-fence log records numbered below
    ``keep_from``, and those of ``blobs`` (keys from :func:`blob_keys`) whose
    SHA-256 is not in ``keep_blobs``.

    The caller must hold the slot and have confirmed its lease after the
    snapshot at or above ``keep_from`` that it keeps became durable (see the
    module docstring). Numbered objects above ``keep_from`` are never touched,
    so a new owner's are safe even from a collector paused after its check;
    blobs are not numbered, so only those listed before the check are
    candidates (a new owner uploads after its lease CAS, after that check).
    Snapshots go first, so an interrupted collection never leaves a snapshot
    whose log tail is gone without saying so (the replay refuses a gap)."""
    base = f"slots/{slot:05d}/"
    snaps = [key for seq, key in _numbered(bucket.list(base + "snap/"), base + "snap/") if seq < keep_from]
    done = Collected(snapshots=bucket.delete_many(snaps) if snaps else 0)
    logs = [
        key
        for seq, key in _numbered(bucket.list(base + "log/"), base + "log/")
        if seq < keep_from and seq not in fences
    ]
    done.log = bucket.delete_many(logs) if logs else 0
    blob_dir = base + "blobs/"
    gone = [key for key in blobs if key[len(blob_dir) :] not in keep_blobs]
    done.blobs = bucket.delete_many(gone) if gone else 0
    return done

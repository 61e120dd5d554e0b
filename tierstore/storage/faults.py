"""Crash points for the crash tests.

A test starts a subprocess with ``TIERSTORE_CRASH_AT=<name>``; when the code
reaches ``crash_point(<name>)`` the process kills itself with SIGKILL, exactly
between two steps of a move (no cleanup, no flush, like a power cut for the
process). Unset (always, in production) this costs one comparison.
"""

from __future__ import annotations

import os
import signal
import struct

_CRASH_AT = os.environ.get("TIERSTORE_CRASH_AT", "")
_CRASH_AFTER = int(os.environ.get("TIERSTORE_CRASH_AFTER", "0") or 0)
_seen = 0

POINTS = (
    "archive.after_intent",  # the batch is recorded in the catalog, no object yet
    "archive.after_put",  # the object is written, the catalog does not point at it yet
    "archive.after_commit",  # the catalog points at the object, the hot index still holds the rows
    "demote.after_shard",  # the shard files exist, the catalog does not know them
    "restore.after_commit",  # the catalog says hot, the hot index does not hold the rows yet
    "add.after_commit",  # the add is durable, the hot index does not hold it yet
    "demote.after_commit",  # migrator._demote: rows are warm in the catalog, still in the hot index
    "delete.after_commit",  # store.delete: the row is gone, the hot slot and the archive object remain
    "replace.after_commit",  # upsert_batch: the new versions are committed, the hot index holds the old ones
    "compact.after_intent",  # migrator.compact_archives: the new batch is recorded, no object yet
    "compact.after_put",  # the new object is written, the catalog still points at the old one
    "compact.after_commit",  # the catalog points at the new object, the old one remains
    "layout.after_intent",  # cold_relayout.lay_out: a new batch is recorded, no object yet
    "layout.after_put",  # its object is written, the catalog still points at the old ones
    "layout.after_commit",  # the catalog points at it, the old objects are marked purge, not yet collected
    "collect.after_object_delete",  # migrator.collect_archives: object deleted, its archives row not yet
    "rebuild.after_commit",  # migrator.rebuild_shards: the new shard is committed, the old files remain
    "checkpoint.after_index",  # hot.save_checkpoint: index and slots replaced, the manifest is the old one
)


def crash_point(name: str) -> None:
    global _seen
    if _CRASH_AT and name == _CRASH_AT:
        _seen += 1
        if _seen > _CRASH_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)


# -- synced WAL prefixes, for the OS-crash model of tests/support/crash_harness.py ------------------

_SYNC_LOG = os.environ.get("TIERSTORE_SYNC_LOG", "")


def wal_position(db_path: str) -> tuple[bytes, int] | None:
    """``(salt, mxFrame)`` of the WAL as SQLite's shared index describes it
    (its header copy is read twice and must agree), or None. Test support:
    the WAL index layout is SQLite's (``wal.c``: ``WalIndexHdr``)."""
    try:
        with open(db_path + "-shm", "rb") as f:
            hdr = f.read(96)
    except OSError:
        return None
    if len(hdr) < 96 or hdr[:48] != hdr[48:96]:
        return None  # torn read: a writer was updating it
    (mx_frame,) = struct.unpack_from("=I", hdr, 16)
    return hdr[32:40], mx_frame


def synced(db_path: str, before: tuple[bytes, int] | None) -> None:
    """Record that the WAL was fsynced at least up to ``before`` (read before
    the fsync), when ``TIERSTORE_SYNC_LOG`` names a file. Unset (always, in
    production) this costs one comparison."""
    if _SYNC_LOG and before is not None:
        with open(_SYNC_LOG, "a") as f:
            f.write(f"{before[0].hex()} {before[1]}\n")

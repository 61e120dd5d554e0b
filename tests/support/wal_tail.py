"""An OS crash, for SQLite's WAL: lose what was written but never synced.

A process crash (SIGKILL) loses nothing a commit wrote: the bytes are in the
kernel's page cache. An OS crash or power cut loses whatever was not fsynced.
With ``synchronous=NORMAL`` SQLite syncs the WAL only at checkpoints; tierstore
syncs it before deleting anything a commit stopped referencing
(``Catalog.sync``). This module models the crash on a store a SIGKILL left
behind:

* the *durable* prefix of the WAL is the larger of what SQLite's own
  checkpoints synced (``nBackfill`` / ``nBackfillAttempted`` in the WAL index:
  a checkpoint syncs the WAL before it copies frames back) and what tierstore's
  barriers recorded (``TIERSTORE_SYNC_LOG``, see ``tierstore/storage/faults.py``);
* everything after it may be lost: the WAL is cut at a commit boundary at or
  after the durable prefix (recovery stops at the first frame whose salts or
  checksum do not match, so losing a suffix of commits is what a crash does to
  a WAL), and the WAL index (``-shm``) is dropped, as a reboot would.

Object-store files are left as they are: archive objects are fsynced before the
catalog points at them, and a delete that an OS crash undid would only leave an
unreferenced object (the pessimistic choice is to keep every delete).

Layouts are SQLite's (https://www.sqlite.org/fileformat2.html#walformat and
``wal.c``): a 32-byte WAL header, then frames of a 24-byte header and a page.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

WAL_HEADER = 32
FRAME_HEADER = 24


@dataclass(frozen=True)
class WalState:
    salt: bytes  # the WAL header's salts (8 bytes): frames of this generation carry them
    page_size: int
    commits: list[int]  # frame counts at which a transaction commits, in order


def _checksum(data: bytes, s1: int, s2: int, big_endian: bool) -> tuple[int, int]:
    words = struct.unpack((">" if big_endian else "<") + f"{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s1 = (s1 + words[i] + s2) & 0xFFFFFFFF
        s2 = (s2 + words[i + 1] + s1) & 0xFFFFFFFF
    return s1, s2


def read_wal(wal: Path) -> WalState | None:
    """The valid frames of ``wal``, as SQLite's recovery would read them."""
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < WAL_HEADER:
        return None
    magic, _version, page_size, _seq = struct.unpack_from(">IIII", data, 0)
    if magic not in (0x377F0682, 0x377F0683):
        return None
    big = bool(magic & 1)
    salt = data[16:24]
    s1, s2 = _checksum(data[:24], 0, 0, big)
    if (s1, s2) != struct.unpack_from(">II", data, 24):
        return None
    commits: list[int] = []
    frame = FRAME_HEADER + page_size
    off, n = WAL_HEADER, 0
    while off + frame <= len(data):
        head = data[off : off + FRAME_HEADER]
        if head[8:16] != salt:
            break
        s1, s2 = _checksum(head[:8] + data[off + FRAME_HEADER : off + frame], s1, s2, big)
        if (s1, s2) != struct.unpack_from(">II", head, 16):
            break
        n += 1
        if struct.unpack_from(">I", head, 4)[0] != 0:  # database size after commit: a commit frame
            commits.append(n)
        off += frame
    return WalState(salt, page_size, commits)


def durable_frames(db: Path, state: WalState, sync_log: Path | None) -> int:
    """How many frames of the WAL's current generation are known to be on disk."""
    durable = 0
    try:
        shm = (Path(str(db) + "-shm")).read_bytes()[:136]
    except FileNotFoundError:
        shm = b""
    if len(shm) >= 136 and shm[32:40] == state.salt:
        (n_backfill,) = struct.unpack_from("=I", shm, 96)
        (attempted,) = struct.unpack_from("=I", shm, 128)
        durable = max(n_backfill, attempted)
    if sync_log is not None and sync_log.exists():
        for line in sync_log.read_text().splitlines():
            salt_hex, frames = line.split()
            if bytes.fromhex(salt_hex) == state.salt:
                durable = max(durable, int(frames))
    return durable


def lose_unsynced_tail(db: Path, sync_log: Path | None, pick: callable) -> tuple[int, int, int]:
    """Cut the WAL of ``db`` at a commit boundary at or after its durable
    prefix, chosen by ``pick(candidates) -> index``, and drop the WAL index.
    Returns ``(durable frames, kept frames, valid frames)``."""
    wal = Path(str(db) + "-wal")
    state = read_wal(wal)
    shm = Path(str(db) + "-shm")
    if state is None:
        if shm.exists():
            shm.unlink()
        return 0, 0, 0
    durable = durable_frames(db, state, sync_log)
    valid = state.commits[-1] if state.commits else 0
    candidates = sorted(
        {c for c in state.commits if c >= durable} | ({durable} if durable in state.commits or durable == 0 else set())
    )
    keep = candidates[pick(candidates)] if candidates else valid
    with open(wal, "r+b") as f:
        f.truncate(WAL_HEADER + keep * (FRAME_HEADER + state.page_size))
    if shm.exists():
        shm.unlink()
    return durable, keep, valid

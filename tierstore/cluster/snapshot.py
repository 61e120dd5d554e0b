"""Slot snapshots: ``slots/<slot>/snap/<seq>``, the slot's local store as it
stood after the log records before ``seq``, so that a new owner replays only
the tail.

A snapshot is taken while the slot's group commit is idle, from a closed
store (a consistent copy of its catalog, indexes and archive directory, no
half-written SQLite page): the files, zlib-compressed, and the answers kept
for retried requests, in one msgpack object. It is a function of the log
prefix alone, so a stale owner's snapshot is as good as anyone's: it is
written create-only (a second one for the same prefix is not needed) and
stamped with the writer's epoch for the record. It also lists the sequence
numbers of every fence record in the log before it (``fences``), which
garbage collection keeps (see :mod:`.gc`).

Sealed warm shards (``warm/<ns>/<name>/<file>``: written once, renamed into
place, never changed) are not inlined: each file is uploaded once, by its
SHA-256, as ``slots/<slot>/blobs/<sha256>``, and a snapshot names it. A new
owner downloads them (checked against their hash) instead of rebuilding the
shards, and later snapshots of the same shards upload nothing.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierstore.cluster.bucket import Bucket
from tierstore.cluster.records import pack, unpack
from tierstore.errors import CorruptDataError
from tierstore.records import Memory, SweepReport
from tierstore.remote import wire

__all__ = [
    "Snapshot",
    "blob_key",
    "decode_answer",
    "encode_answer",
    "is_sealed",
    "latest_snapshot",
    "materialize",
    "read_files",
    "snapshot_key",
    "snapshots_newest_first",
    "split_sealed",
    "write_files",
]

_SEQ_DIGITS = 12
_SKIP = {"LOCK"}  # the process lock: never copied


def snapshot_key(slot: int, seq: int) -> str:
    return f"slots/{slot:05d}/snap/{seq:0{_SEQ_DIGITS}d}"


def blob_key(slot: int, digest: str) -> str:
    return f"slots/{slot:05d}/blobs/{digest}"


def is_sealed(rel: str) -> bool:
    """A file of a sealed warm shard (``warm/<ns>/<name>/<file>``, not a ``.tmp-`` one)."""
    parts = rel.split("/")
    return len(parts) == 4 and parts[0] == "warm" and not parts[2].startswith(".tmp-")


def split_sealed(bucket: Bucket, slot: int, files: dict[str, bytes], uploaded: set[str]) -> dict[str, str]:
    """Take the sealed warm shards' files out of ``files``, upload each one
    not in ``uploaded`` (hashes known to be in the bucket; updated), and
    return relative path -> SHA-256 for the snapshot to name."""
    refs: dict[str, str] = {}
    for rel in [r for r in files if is_sealed(r)]:
        data = files.pop(rel)
        digest = hashlib.sha256(data).hexdigest()
        if digest not in uploaded:
            bucket.put_new(blob_key(slot, digest), data)  # None: already there (same bytes, same key)
            uploaded.add(digest)
        refs[rel] = digest
    return refs


@dataclass
class Snapshot:
    slot: int
    seq: int  # the records before this one are in it
    epoch: int
    owner: str
    t: float  # the slot's store time when it was taken, POSIX seconds
    files: dict[str, bytes]  # relative path -> bytes (uncompressed)
    answers: list[tuple[str, Any]]  # (request id, encoded answer), oldest first
    refs: dict[str, str] = field(default_factory=dict)  # relative path -> SHA-256 of a blob (sealed warm files)
    # seqs of the fence records before seq (every one since the slot began); None: not known (an older
    # version's snapshot), and then nothing of the slot's history is collected
    fences: list[int] | None = None

    def encode(self) -> bytes:
        return pack(
            {
                "v": 1,
                "slot": self.slot,
                "seq": self.seq,
                "epoch": self.epoch,
                "owner": self.owner,
                "t": self.t,
                "files": {p: zlib.compress(b, 1) for p, b in self.files.items()},
                "answers": [[rid, a] for rid, a in self.answers],
                "refs": self.refs,
                "fences": self.fences,
            }
        )

    @classmethod
    def decode(cls, body: bytes, what: str) -> Snapshot:
        doc = unpack(body, what)
        try:
            files = {str(p): zlib.decompress(b) for p, b in doc["files"].items()}
            fences = doc.get("fences")
            return cls(
                int(doc["slot"]),
                int(doc["seq"]),
                int(doc["epoch"]),
                str(doc["owner"]),
                float(doc["t"]),
                files,
                [(str(r), a) for r, a in doc["answers"]],
                {str(p): str(d) for p, d in (doc.get("refs") or {}).items()},
                None if fences is None else [int(f) for f in fences],
            )
        except (KeyError, TypeError, ValueError, zlib.error) as exc:
            raise CorruptDataError(f"{what}: not a slot snapshot ({exc})") from None


def read_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (a closed store), by relative path."""
    out: dict[str, bytes] = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if rel not in _SKIP:
                out[rel] = path.read_bytes()
    return out


def write_files(root: Path, files: dict[str, bytes]) -> None:
    """Lay ``files`` out under the empty directory ``root`` (paths checked to stay inside it)."""
    base = root.resolve()
    for rel, data in files.items():
        path = (root / rel).resolve()
        if base not in path.parents:
            raise CorruptDataError(f"snapshot file {rel!r} points outside the slot directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def materialize(bucket: Bucket, snap: Snapshot, root: Path) -> None:
    """Lay the snapshot's files out under the empty ``root``: the inlined
    ones, and the sealed warm files downloaded from their blobs (each
    checked against its hash; CorruptDataError if one is missing or wrong)."""
    files = dict(snap.files)
    refs = list(snap.refs.items())
    keys = [blob_key(snap.slot, digest) for _, digest in refs]
    for (rel, digest), key, got in zip(refs, keys, bucket.get_many(keys)):
        if got is None:
            raise CorruptDataError(f"{key}: named by snapshot {snap.seq} of slot {snap.slot}, missing")
        if hashlib.sha256(got[0]).hexdigest() != digest:
            raise CorruptDataError(f"{key}: its bytes do not hash to its name")
        files[rel] = got[0]
    write_files(root, files)


def snapshots_newest_first(bucket: Bucket, slot: int) -> Iterator[Snapshot]:
    """The slot's readable snapshots, newest first (a corrupt or vanished one is passed over)."""
    prefix = f"slots/{slot:05d}/snap/"
    for key in reversed(bucket.list(prefix)):
        got = bucket.get(key)
        if got is None:
            continue
        try:
            yield Snapshot.decode(got[0], key)
        except CorruptDataError:
            continue


def latest_snapshot(bucket: Bucket, slot: int) -> Snapshot | None:
    """The newest readable snapshot of the slot (a corrupt one is passed over), or None."""
    return next(snapshots_newest_first(bucket, slot), None)


def encode_answer(answer: Any) -> Any:
    """A write's answer as plain data (``None`` for one not worth keeping)."""
    if answer is None or isinstance(answer, (bool, int, float, str)):
        return {"v": answer}
    if isinstance(answer, list) and all(isinstance(a, str) for a in answer):
        return {"v": answer}
    if isinstance(answer, Memory):
        return {"memory": wire.memory_to_wire(answer)}
    if isinstance(answer, SweepReport):
        return {"sweep": answer.as_dict()}
    return None


def decode_answer(doc: Any) -> Any:
    if "memory" in doc:
        return wire.memory_from_wire(doc["memory"])
    if "sweep" in doc:
        return wire.sweep_report_from_wire(doc["sweep"])
    return doc["v"]

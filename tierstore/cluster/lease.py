"""A slot's lease: the object ``slots/<slot>/lease`` naming its owner and epoch.

Taken by conditional put: create-only (``If-None-Match: *``) when there is
none, compare-and-swap (``If-Match: <etag>``) with ``epoch + 1`` otherwise.
The body carries a random nonce, because two identical bodies would have the
same ETag and a CAS could not tell a stale reader from a fresh one. The lease
says who *should* own the slot; what keeps a stale owner from writing is the
log's create-only appends and the fence record (see :mod:`.slotlog`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from tierstore.cluster.bucket import Bucket
from tierstore.cluster.records import pack, unpack
from tierstore.errors import ObjectStoreError

__all__ = ["Lease", "lease_key", "read_lease", "release_lease", "take_lease"]

_TAKE_ATTEMPTS = 8


def lease_key(slot: int) -> str:
    return f"slots/{slot:05d}/lease"


@dataclass(frozen=True)
class Lease:
    slot: int
    owner: str  # "" once released
    epoch: int
    nonce: str
    etag: str


def read_lease(bucket: Bucket, slot: int) -> Lease | None:
    """The slot's lease as stored, or ``None`` if it was never taken."""
    got = bucket.get(lease_key(slot))
    if got is None:
        return None
    body, etag = got
    doc = unpack(body, lease_key(slot))
    return Lease(slot, str(doc["owner"]), int(doc["epoch"]), str(doc["nonce"]), etag)


def _body(owner: str, epoch: int, nonce: str) -> bytes:
    return pack({"owner": owner, "epoch": epoch, "nonce": nonce, "t": time.time()})


def take_lease(bucket: Bucket, slot: int, owner: str) -> Lease:
    """Take the slot for ``owner`` at the next epoch, whoever held it.

    Retries when another taker wins a race (a 412 after a fresh read); raises
    ObjectStoreError if it loses ``_TAKE_ATTEMPTS`` times in a row."""
    for _ in range(_TAKE_ATTEMPTS):
        current = read_lease(bucket, slot)
        epoch = 1 if current is None else current.epoch + 1
        nonce = uuid.uuid4().hex
        body = _body(owner, epoch, nonce)
        if current is None:
            etag = bucket.put_new(lease_key(slot), body)
        else:
            etag = bucket.put_cas(lease_key(slot), body, current.etag)
        if etag is not None:
            return Lease(slot, owner, epoch, nonce, etag)
    raise ObjectStoreError(f"could not take the lease of slot {slot}: {_TAKE_ATTEMPTS} races lost")


def release_lease(bucket: Bucket, lease: Lease) -> bool:
    """Mark the lease released (owner ``""``, same epoch) if it is still ours;
    False if someone took it meanwhile (then nothing is written)."""
    return bucket.put_cas(lease_key(lease.slot), _body("", lease.epoch, uuid.uuid4().hex), lease.etag) is not None

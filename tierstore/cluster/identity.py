"""Which cluster a bucket prefix belongs to.

A cluster's slots (leases, logs, snapshots) live under its bucket prefix,
and shards take any slot they find there: a second cluster started on the
same prefix under another name would take the first one's slots over —
its memories, served under the wrong name, and its live shards fenced.
So a prefix names its cluster in ``cluster.json``, written create-only
(``If-None-Match: *``) by the first router that starts shards on it; a
router starting a cluster of another name there is refused. As with a
store's ``owner.json`` (:mod:`tierstore.storage.ownership`), the object says who
owns the prefix; the slots' leases still say who serves each slot.

A prefix used by a version without the object is claimed by the first
router that starts shards on it after an upgrade. To hand a prefix to
another name, stop the old cluster's shards and delete ``cluster.json``.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass

from tierstore.cluster.bucket import Bucket
from tierstore.errors import StoreConfigError
from tierstore.storage.ownership import parse_claim

KEY = "cluster.json"
FORMAT = "tierstore-cluster"


@dataclass(frozen=True)
class Identity:
    name: str  # the cluster's name (Cluster(name=...), its Ray namespace)
    host: str  # where the claiming router ran (for the message)
    claimed_at: float  # POSIX seconds

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"format": FORMAT, "version": 1, "name": self.name, "host": self.host, "claimed_at": self.claimed_at}
        ).encode()

    @classmethod
    def parse(cls, data: bytes) -> Identity | None:
        """The identity an object holds, or ``None`` if it does not parse as one."""
        doc = parse_claim(data, FORMAT, "name")
        return None if doc is None else cls(doc["name"], str(doc.get("host", "?")), doc["claimed_at"])


def read_identity(bucket: Bucket) -> Identity | None | bool:
    """The prefix's cluster; ``None`` if unclaimed, ``False`` if the object does not parse."""
    got = bucket.get(KEY)
    if got is None:
        return None
    return Identity.parse(got[0]) or False


def claim(bucket: Bucket, name: str) -> None:
    """Make the prefix ``name``'s (create-only), or find it already is; else
    StoreConfigError naming the cluster that has it. Bucket errors propagate."""
    current = read_identity(bucket)
    if current is None:
        if bucket.put_new(KEY, Identity(name, socket.gethostname(), time.time()).to_bytes()) is not None:
            return
        current = read_identity(bucket)  # another router claimed it between our read and our put
    if isinstance(current, Identity) and current.name == name:
        return
    where = f"s3://{bucket.config.bucket}/{bucket.config.prefix.strip('/')}".rstrip("/")
    if not isinstance(current, Identity):
        raise StoreConfigError(
            f"{where}/{KEY} does not say which cluster the prefix belongs to (it does not "
            "parse): give this cluster a bucket or prefix of its own, or delete that object"
        )
    since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(current.claimed_at))
    raise StoreConfigError(
        f"{where} holds the slots of the cluster {current.name!r} (since {since}, from {current.host}): a cluster "
        f"named {name!r} there would take its memories over. Use name={current.name!r} to join that cluster, or "
        f"give this one a bucket or prefix of its own (to hand the prefix over for good, stop that cluster's "
        f"shards and delete {where}/{KEY})"
    )

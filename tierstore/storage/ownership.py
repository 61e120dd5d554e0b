"""One store per object-store prefix.

A store deletes archive objects its catalog no longer needs and tombstones it
no longer needs. Two stores on one prefix (a scratch store made to rebuild a
catalog, a copy of a store opened on the same bucket) would delete each
other's objects. So a store claims its prefix: an owner object,
``owner.json``, written with a conditional put (create-only) and naming the
store's id (meta ``store_id``, made when the store is created). Opening a
store on a prefix another store owns is refused with an error saying which
store owns it; ``take_over=True`` hands the prefix over (the other store must
be stopped for good first: it checks the owner object again before it deletes
anything, at most once a minute, and stops deleting once it has lost it).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tierstore.errors import ObjectNotFoundError, StoreConfigError
from tierstore.storage.objectstore import ObjectStore

OWNER_KEY = "owner.json"
FORMAT = "tierstore-owner"
RECHECK_S = 60.0  # how often a store re-reads the owner object before deleting objects, seconds


@dataclass(frozen=True)
class Owner:
    store_id: str
    path: str  # where the owning store lives (for the message; not checked)
    host: str
    claimed_at: float  # POSIX seconds

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT,
                "version": 1,
                "store_id": self.store_id,
                "path": self.path,
                "host": self.host,
                "claimed_at": self.claimed_at,
            }
        ).encode()

    @classmethod
    def parse(cls, data: bytes) -> Owner | None:
        """The owner named by an owner object, or None if it does not parse."""
        doc = parse_claim(data, FORMAT, "store_id")
        if doc is None:
            return None
        return cls(doc["store_id"], str(doc.get("path", "?")), str(doc.get("host", "?")), doc["claimed_at"])


def parse_claim(data: bytes, fmt: str, who: str) -> dict | None:
    """A claim object's fields (JSON of format ``fmt`` naming its claimant in
    the string field ``who``, ``claimed_at`` made a float), or None if it is not one."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != fmt or not isinstance(doc.get(who), str):
            return None
        doc["claimed_at"] = float(doc.get("claimed_at", 0.0))
        return doc
    except (ValueError, TypeError):
        return None


def read_owner(objects: ObjectStore) -> Owner | None | Literal[False]:
    """The prefix's owner; ``None`` if there is no owner object, ``False`` if
    there is one that does not parse."""
    try:
        data = objects.get(OWNER_KEY)
    except ObjectNotFoundError:
        return None
    owner = Owner.parse(data)
    return False if owner is None else owner


def claim(objects: ObjectStore, store_id: str, root: Path, *, take_over: bool = False) -> None:
    """Make ``store_id`` the owner of the prefix, or raise StoreConfigError
    naming the store that owns it. Object-store errors propagate."""
    mine = Owner(store_id, str(root.resolve()), socket.gethostname(), time.time())
    current = read_owner(objects)
    # None: no owner object. Another store may claim the prefix between our read and our put, and its
    # owner object may be gone again when we read it (that store gave the prefix up): then claim again.
    while current is None:
        if objects.put_if_absent(OWNER_KEY, mine.to_bytes()):
            return
        current = read_owner(objects)
    if isinstance(current, Owner) and current.store_id == store_id:
        return
    if take_over:
        objects.put(OWNER_KEY, mine.to_bytes())
        return
    who = (
        "an owner object that does not parse"
        if current is False
        else f"store {current.store_id} (at {current.path} on {current.host}, since "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(current.claimed_at))})"
    )
    raise StoreConfigError(
        f"the object store {objects!r} belongs to {who}: two stores on one prefix delete each other's archives. "
        "Give this store its own prefix, or, once the other store is stopped for good (e.g. to rebuild a lost "
        "catalog from the bucket), hand the prefix over with take_over_cold=True (CLI: --take-over-cold)"
    )


class PrefixOwnership:
    """A store's standing claim: before deleting objects, re-read the owner
    object (at most every ``RECHECK_S`` seconds) and stop deleting once
    another store has taken the prefix over."""

    def __init__(self, objects: ObjectStore, store_id: str) -> None:
        self._objects = objects
        self._store_id = store_id
        self._checked = time.monotonic()
        self._lock = threading.Lock()
        self.lost: str | None = None  # why this store no longer deletes objects

    def may_delete(self) -> bool:
        """Whether this store still owns its prefix (a cached answer between
        checks). Object-store errors propagate (the delete would fail too)."""
        with self._lock:
            if self.lost is not None:
                return False
            if time.monotonic() - self._checked < RECHECK_S:
                return True
            owner = read_owner(self._objects)
            self._checked = time.monotonic()
            if not (isinstance(owner, Owner) and owner.store_id == self._store_id):
                self.lost = (
                    f"the object store {self._objects!r} was handed over to another store: this store "
                    "no longer deletes archive objects or tombstones there"
                )
                return False
            return True

"""The cluster's own exceptions (the store's are re-raised as they are)."""

from __future__ import annotations

from tierstore.errors import TierStoreError

__all__ = [
    "ClusterError",
    "DeadlineExceededError",
    "FencedError",
    "LeaseUnconfirmedError",
    "NotOwnerError",
    "SlotLostError",
]


class ClusterError(TierStoreError):
    """The cluster could not serve a call (no live shard, retries exhausted)."""


class DeadlineExceededError(ClusterError):
    """A call was not answered within its deadline (``deadline_s``, seconds from
    the call's start): what it was waiting for is in the message and in
    :attr:`waiting_for` (``"slot move"``: its slot was changing owner, e.g. a
    failover; ``"shard"``: the owner had not answered; ``"placement"``: the
    router was re-placing the slots). A read can be retried as it is; a write
    whose deadline passed may still be applied (a shard finishes what it was
    sent, and an attempt that reached a shard before it died is replayed by
    the new owner), as with any timeout."""

    def __init__(self, message: str, *, slot: int, deadline_s: float, waiting_for: str) -> None:
        super().__init__(message)
        self.slot = slot
        self.deadline_s = deadline_s
        self.waiting_for = waiting_for

    def __reduce__(self) -> tuple[object, ...]:  # served clusters and Ray may ship it across processes
        return (_deadline_exceeded, (str(self), self.slot, self.deadline_s, self.waiting_for))


def _deadline_exceeded(message: str, slot: int, deadline_s: float, waiting_for: str) -> DeadlineExceededError:
    return DeadlineExceededError(message, slot=slot, deadline_s=deadline_s, waiting_for=waiting_for)


class NotOwnerError(ClusterError):
    """The shard does not own the slot (never did, released it, or was fenced):
    the router refreshes its slot table and retries."""

    def __init__(self, slot: int, message: str = "") -> None:
        super().__init__(message or f"this shard does not own slot {slot}")
        self.slot = slot

    def __reduce__(self) -> tuple[object, ...]:  # Ray ships exceptions across processes
        return (type(self), (self.slot, str(self)))


class FencedError(NotOwnerError):
    """A write met a log record of a newer owner (HTTP 412 on the create-only
    append): this shard lost the slot, the write was not acknowledged, and the
    shard stops serving the slot."""


class SlotLostError(NotOwnerError):
    """A write could not be made durable (the bucket kept failing, or the
    answer was lost): whether its log PUT landed is unknown, so the shard
    dropped the slot. The router has the slot taken and replayed afresh and
    retries with the same request id: applied once either way."""


class LeaseUnconfirmedError(NotOwnerError):
    """A read found the shard's last confirmation of the slot's lease older
    than the bound (``lease_check_s``) and the bucket did not answer the
    re-confirmation: the read is refused (it might be stale by more than the
    bound). The shard keeps the slot; the router retries."""

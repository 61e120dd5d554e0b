"""The cluster's own exceptions (the store's are re-raised as they are)."""

from __future__ import annotations

from tierstore.errors import TierStoreError

__all__ = ["ClusterError", "FencedError", "LeaseUnconfirmedError", "NotOwnerError", "SlotLostError"]


class ClusterError(TierStoreError):
    """The cluster could not serve a call (no live shard, retries exhausted)."""


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

"""Exceptions raised by tierstore.

Every error a caller can cause derives from :class:`TierStoreError`. Validation
errors are raised before anything is written, so a failed call leaves the store
unchanged.
"""

from __future__ import annotations


class TierStoreError(Exception):
    """Base class of every tierstore error."""


class InvalidInputError(TierStoreError, ValueError):
    """An argument is malformed (wrong type, out of range, non-finite)."""


class DimensionMismatchError(InvalidInputError):
    """A vector's length differs from the store's dimension."""


class InvalidVectorError(InvalidInputError):
    """A vector holds NaN or infinite values, or has zero length."""


class InvalidConfidenceError(InvalidInputError):
    """A confidence lies outside [0, 1]."""


class InvalidNamespaceError(InvalidInputError):
    """A namespace is not a name of the form ``[A-Za-z0-9_.-]{1,128}``."""


class UnknownMemoryTypeError(InvalidInputError):
    """A memory type is not defined by the store's policy."""


class PolicyError(InvalidInputError):
    """A policy document is invalid; the message names the offending key."""


class InvalidKeyError(InvalidInputError):
    """A memory's ``key`` (its slot) is not a string of 1-128 letters, digits and ``_ . : / - @ # +``."""


class DuplicateIdError(InvalidInputError):
    """A memory with this id already exists in the namespace."""


class MemoryNotFoundError(TierStoreError, KeyError):
    """No memory with this id exists in the namespace."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "memory not found"


class StoreClosedError(TierStoreError):
    """The store was closed; open it again to continue."""


class StoreConfigError(TierStoreError):
    """The store on disk does not match the arguments it was opened with."""


class ReadOnlyStoreError(StoreConfigError):
    """A call that would change the store, on a store opened with ``readonly=True``."""


class ClockSkewError(TierStoreError):
    """The clock disagrees with the store's own record of time (set back, or
    the store's time was kept by another clock); destructive work is refused.
    The message says how far and what to do."""


class CorruptDataError(TierStoreError):
    """Stored bytes fail their checksum or do not parse; the message names the file or key."""


class ObjectStoreError(TierStoreError):
    """The object store (local directory or S3) failed an operation."""


class ObjectNotFoundError(ObjectStoreError, KeyError):
    """The object store holds no object under this key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "object not found"


class MissingDependencyError(TierStoreError, ImportError):
    """An optional dependency is not installed; the message says which extra to install."""


class AuthError(TierStoreError, PermissionError):
    """A server refused the request's token (HTTP 401: missing or unknown) or
    its namespace (403: outside the token's tenant prefixes)."""


class RemoteError(TierStoreError):
    """A server failed (a 5xx whose details stay in its log), could not be
    reached, or answered outside its API (see :mod:`tierstore.remote.client`)."""

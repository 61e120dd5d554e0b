"""tierstore: a tiered memory engine for AI agents that knows when to forget.

>>> from tierstore import TierStore, ManualClock
>>> store = TierStore.open("./agent-memory", dim=384)        # doctest: +SKIP
"""

from tierstore.clock import Clock, ManualClock, SystemClock
from tierstore.errors import (
    AuthError,
    ClockSkewError,
    CorruptDataError,
    DimensionMismatchError,
    DuplicateIdError,
    InvalidConfidenceError,
    InvalidInputError,
    InvalidKeyError,
    InvalidNamespaceError,
    InvalidVectorError,
    MemoryNotFoundError,
    MissingDependencyError,
    ObjectNotFoundError,
    ObjectStoreError,
    PolicyError,
    ReadOnlyStoreError,
    RemoteError,
    StoreClosedError,
    StoreConfigError,
    TierStoreError,
    UnknownMemoryTypeError,
)
from tierstore.policy import ConfidencePolicy, ContextRule, MaskRule, Policy, ScoringPolicy, Thresholds, TypePolicy
from tierstore.records import Explain, Hit, Memory, Stats, SweepReport
from tierstore.store import Settings, TierStore
from tierstore.tiers.hot import HotSettings

__version__ = "0.1.0"

__all__ = [
    "AuthError",
    "Clock",
    "ClockSkewError",
    "ConfidencePolicy",
    "ContextRule",
    "CorruptDataError",
    "DimensionMismatchError",
    "DuplicateIdError",
    "Explain",
    "Hit",
    "HotSettings",
    "InvalidConfidenceError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidNamespaceError",
    "InvalidVectorError",
    "ManualClock",
    "MaskRule",
    "Memory",
    "MemoryNotFoundError",
    "MissingDependencyError",
    "ObjectNotFoundError",
    "ObjectStoreError",
    "Policy",
    "PolicyError",
    "ReadOnlyStoreError",
    "RemoteError",
    "ScoringPolicy",
    "Settings",
    "Stats",
    "StoreClosedError",
    "StoreConfigError",
    "SweepReport",
    "SystemClock",
    "Thresholds",
    "TierStore",
    "TierStoreError",
    "TypePolicy",
    "UnknownMemoryTypeError",
]

"""Which ``Document.metadata`` keys set a memory's store fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierstore.errors import InvalidInputError

_FIELDS = ("memory_type", "confidence", "tags", "ttl_seconds", "pinned")


@dataclass(frozen=True)
class FieldMap:
    """Metadata keys the caller chooses, one per store field (``None``: the
    field is not read from metadata and takes the adapter's default).

    A document whose metadata holds ``{"kind": "preference"}`` is stored as a
    preference with ``FieldMap(memory_type="kind")``. The metadata itself is
    stored whole and returned unchanged: the mapping reads it, never adds to
    it. ``ttl_seconds`` is in seconds; ``confidence`` in [0, 1]; ``tags`` a
    list of strings; ``pinned`` a bool — checked by the store as for
    :meth:`TierStore.add`."""

    memory_type: str | None = None
    confidence: str | None = None
    tags: str | None = None
    ttl_seconds: str | None = None
    pinned: str | None = None

    def __post_init__(self) -> None:
        for name in _FIELDS:
            key = getattr(self, name)
            if key is not None and (not isinstance(key, str) or not key):
                raise InvalidInputError(
                    f"FieldMap.{name} must be a metadata key (a non-empty string) or None, got {key!r}"
                )

    def store_fields(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """The store fields ``metadata`` sets (keys of :meth:`TierStore.add`)."""
        out: dict[str, Any] = {}
        for name in _FIELDS:
            key = getattr(self, name)
            if key is not None and key in metadata:
                out[name] = metadata[key]
        return out

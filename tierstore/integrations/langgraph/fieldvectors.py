"""One vector per indexed text of an item, kept in the item's metadata.

LangGraph's stores embed each indexed field (each text a JSON path yields)
separately and score an item by its best-matching text. A tierstore memory
has one vector (the item's texts' mean, which the store's own search and
the cold tier use); when an item has several texts, their unit vectors are
kept beside it, in the memory's metadata, as base64 of little-endian
float32 (one string per text), so the cosine ranking can take the best.
They count against the metadata's size limit
(:data:`tierstore.rules.validation.METADATA_MAX_BYTES`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np

VECTORS_KEY = "vectors"  # the metadata key


def unit_rows(vectors: Sequence[Any]) -> np.ndarray:
    """``vectors`` as float64 rows of length 1 (a zero vector stays zero)."""
    rows = np.asarray(vectors, np.float64).reshape(len(vectors), -1)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


def encode_vectors(units: np.ndarray) -> list[str]:
    """Unit vectors (rows) as the metadata's strings."""
    return [base64.b64encode(np.ascontiguousarray(row, "<f4").tobytes()).decode("ascii") for row in units]


def decode_vectors(texts: Sequence[str], dim: int) -> np.ndarray:
    """The rows :func:`encode_vectors` wrote, float64, shape ``(len(texts), dim)``."""
    raw = b"".join(base64.b64decode(t) for t in texts)
    return np.frombuffer(raw, "<f4").astype(np.float64).reshape(len(texts), dim)


def best_cosine(metadata: dict[str, Any], embedding: np.ndarray, query_unit: np.ndarray) -> float:
    """The item's score for a query (a unit vector): the highest cosine over
    its texts' vectors, or over its one vector when it has a single text."""
    kept = metadata.get(VECTORS_KEY)
    if kept:
        return float(np.max(decode_vectors(kept, query_unit.shape[0]) @ query_unit))
    return float(np.dot(embedding.astype(np.float64), query_unit))

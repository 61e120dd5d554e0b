"""Embedders for tests and examples: deterministic, dependency-free, fast."""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["DIM", "T0", "hash_embed"]

DIM = 32
T0 = 1_700_000_000.0


def hash_embed(texts: list[str]) -> np.ndarray:
    """A deterministic toy embedder (hashed words, :data:`DIM` dimensions): texts sharing words are similar."""
    out = np.zeros((len(texts), DIM), np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().replace("?", " ").replace(".", " ").split():
            out[i, zlib.crc32(word.encode()) % DIM] += 1.0
        out[i, DIM - 1] += 0.01  # never all zero
    return out


hash_embed.dim = DIM  # type: ignore[attr-defined]
hash_embed.name = "hash_embed-32"  # type: ignore[attr-defined]

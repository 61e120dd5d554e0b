"""A deterministic synthetic embedding model for demos, tests and benchmarks.

``HashingEmbedder`` maps each lower-cased word to a fixed pseudo-random unit
vector (seeded by a BLAKE2b hash of the word) and embeds a text as the
normalised sum of its words' vectors plus ``topic_weight`` times the vectors
of its topics (``topic:<name>``). Texts that share words or topics are
similar; unrelated texts are nearly orthogonal. It needs no
model download and gives the same vectors on every machine.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

import numpy as np

_WORD_RE = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset("a an the to of in on for and or is was be at by with about from as it this that i".split())


# A module-level cache keyed by what the vector depends on: one on the method would key on (and keep alive)
# every embedder that ever asked.
@lru_cache(maxsize=65536)
def _word_vector(salt: str, dim: int, word: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.blake2b(f"{salt}:{word}".encode(), digest_size=8).digest(), "little")
    v = np.random.default_rng(seed).normal(size=dim)
    return (v / np.linalg.norm(v)).astype(np.float32)


class HashingEmbedder:
    def __init__(
        self, dim: int = 384, salt: str = "tierstore", ignore: tuple[str, ...] = (), topic_weight: float = 2.0
    ) -> None:
        self.dim = dim
        self.salt = salt
        self.ignore = STOPWORDS | {w.lower() for w in ignore}
        self.topic_weight = topic_weight

    def word_vector(self, word: str) -> np.ndarray:
        return _word_vector(self.salt, self.dim, word)

    def embed(self, text: str, topics: tuple[str, ...] | list[str] = ()) -> np.ndarray:
        """L2-normalised float32 vector of ``text`` (and its ``topics``)."""
        words = [w for w in _WORD_RE.findall(text.lower()) if w not in self.ignore]
        if not words and not topics:
            words = ["<empty>"]
        v = np.zeros(self.dim, np.float32)
        for w in words:
            v += self.word_vector(w)
        for t in topics:
            v += self.topic_weight * self.word_vector(f"topic:{t}")
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed_many(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.embed(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

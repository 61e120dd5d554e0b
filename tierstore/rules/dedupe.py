"""Exact duplicates: the same content, normalised, in the same namespace and type.

Re-adding a memory that is already there ("prefers window seats", said again)
reinforces the existing memory instead of storing a second copy (policy
``dedupe = "exact"``). Two texts are the same when their normalised forms are
equal: Unicode NFKC, case folded, runs of whitespace as one space, no leading
or trailing whitespace and no trailing sentence punctuation. Paraphrases are
not duplicates here; a paraphrase is a matter for automatic supersession
(:mod:`tierstore.rules.auto_supersession`), which compares vectors.

The catalog keeps a 64-bit hash of the normalised text per memory (column
``content_hash``, indexed with the namespace), so finding a duplicate is one
index lookup; the texts of the few rows sharing a hash are then compared.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

DEDUPE_MODES = ("exact", "off")

_TRAILING = ".!?。！？…"


def normalise(content: str) -> str:
    """The text two memories must share to be duplicates (see the module doc)."""
    text = " ".join(unicodedata.normalize("NFKC", content).casefold().split())
    return text.rstrip(_TRAILING).rstrip()


def content_hash(content: str) -> int:
    """Signed 64-bit hash of :func:`normalise` ``(content)`` (an SQLite INTEGER)."""
    digest = hashlib.blake2b(normalise(content).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(frozen=True)
class Duplicate:
    """An existing memory a new one duplicates: its catalog rid, id and tier (0 hot, 1 warm, 2 cold)."""

    rid: int
    id: str
    tier: int


def find_duplicate(
    conn: sqlite3.Connection, ns: str, memory_type: str, key: str | None, content: str
) -> Duplicate | None:
    """The oldest memory of ``ns`` with this type, key and normalised content
    that is not superseded, in any tier; ``None`` if there is none. Reads
    through ``conn`` (inside the add's transaction, so that two adds of the
    same text cannot both miss each other)."""
    norm = normalise(content)
    rows = conn.execute(
        "SELECT m.rid, m.id, m.content, m.tier FROM memories m WHERE m.ns = ? AND m.content_hash = ?"
        " AND m.memory_type = ? AND m.key IS ?"
        " AND NOT EXISTS (SELECT 1 FROM supersessions s WHERE s.rid = m.rid) ORDER BY m.rid",
        (ns, content_hash(content), memory_type, key),
    ).fetchall()
    for rid, mid, text, tier in rows:
        if normalise(text) == norm:
            return Duplicate(int(rid), str(mid), int(tier))
    return None


def hashes_present(conn: sqlite3.Connection, ns: str, hashes: Sequence[int]) -> set[int]:
    """Which of ``hashes`` (:func:`content_hash` values) some memory of ``ns``
    has, in one query: a new memory whose hash is absent (and not repeated
    earlier in its batch) has no duplicate, and needs no :func:`find_duplicate`."""
    present: set[int] = set()
    distinct = list(set(hashes))
    for start in range(0, len(distinct), _IN_CHUNK):
        chunk = distinct[start : start + _IN_CHUNK]
        rows = conn.execute(
            "SELECT DISTINCT content_hash FROM memories"
            " WHERE ns = ? AND content_hash IN (SELECT value FROM json_each(?))",
            (ns, json.dumps(chunk)),
        ).fetchall()
        present.update(int(r[0]) for r in rows)
    return present


_IN_CHUNK = 5000  # hashes per query: one JSON array each

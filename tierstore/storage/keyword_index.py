"""The keyword index: every memory's text, in any tier, searched by words.

The catalog's FTS5 table ``memory_text`` (external content: the text stays in
``memories.content`` alone, with the namespace beside it as a second column;
rowid = the memory's rid; the porter tokenizer stems English words; ``rank``
is BM25 over the text column alone) is kept in step by SQLite triggers on ``memories``, in
the transaction of every write: an add, a delete, a content change (each
row's trigger takes a note, and a transaction's notes are applied together
just before its commit: ``catalog.index_noted_text``). A tier move changes
no text, so hot, warm and cold memories are all in it, and no write path,
crash or recovery can leave it behind (``catalog.SCHEMA``).

``search(ns, text)`` asks it for candidates beside the vector index's
(:mod:`tierstore.core.hybrid`); ``restore(text=)`` for cold memories by keyword.

Text from a user is never FTS5 syntax: it is split into words (runs of
letters and digits, as FTS5's ``unicode61`` tokenizer splits them), common
English stop words are dropped, each word is quoted (a quoted word is a
phrase, never an operator) and any of them is enough (OR); at most
:data:`MAX_WORDS` words, the first ones. A text with no word left (empty, all
stop words, punctuation) has no keyword query: the search answers by meaning
alone.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from tierstore.storage.catalog import clear_notes

MAX_WORDS = 32
MAX_WORD_CHARS = 64  # longer runs (a base64 blob, an unsplit script) are kept, cut to this

# Common English function words: they match most turns and only add noise (and cost) to BM25.
STOP_WORDS = frozenset(
    """
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
once only or other our ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves s t d ll m re ve don doesn didn isn wasn
aren weren won wouldn shouldn couldn let us also ok okay yes yeah hi hello hey please thanks thank
""".split()
)


def query_words(text: str) -> list[str]:
    """The words of ``text`` a keyword query uses: lower-cased runs of
    letters and digits, stop words dropped, each once, in order, at most
    :data:`MAX_WORDS`."""
    if not isinstance(text, str):
        return []
    words: list[str] = []
    seen: set[str] = set()
    for w in "".join(ch if ch.isalnum() else " " for ch in text.lower()).split():
        if w in STOP_WORDS or w in seen:
            continue
        seen.add(w)
        words.append(w[:MAX_WORD_CHARS])
        if len(words) == MAX_WORDS:
            break
    return words


def text_match(words: list[str]) -> str:
    """An FTS5 expression matching any of ``words`` in the memories' text:
    each quoted (a phrase, never an operator), OR-joined."""
    return "content : (" + " OR ".join('"' + w.replace('"', '""') + '"' for w in words) + ")"


def _rows(catalog: Any, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """``sql``'s rows from a :class:`Catalog` or an open ``sqlite3.Connection``."""
    if isinstance(catalog, sqlite3.Connection):
        return catalog.execute(sql, params).fetchall()
    return catalog.query(sql, params)


def fts_query(text: str, ns: str | None = None) -> str | None:
    """``text`` as an FTS5 query: its :func:`query_words`, each quoted,
    OR-joined, matched in the memories' text; None when no word is left.
    With ``ns``, only rows whose namespace column starts with the
    namespace's words match too: the index is the store's, and without it
    every search computed BM25 for every namespace's matches (a superset
    where one namespace's words begin another's: callers also compare
    ``memories.ns``)."""
    words = query_words(text)
    if not words:
        return None
    q = text_match(words)
    if ns is not None and any(ch.isalnum() for ch in ns):
        q = 'ns : ^"' + ns.replace('"', '""') + '" AND ' + q
    return q


# A superseded memory is no keyword candidate: its words are what the statement that replaced it
# says too, and BM25 cannot tell the newer (it stays findable by meaning, ranked as a vector search
# ranks it).
_CANDIDATES_SQL = (
    "SELECT m.rid, m.id, m.tier, bm25(memory_text, 1.0, 0.0){}"
    " FROM memory_text JOIN memories m ON m.rid = memory_text.rowid"
    " WHERE memory_text MATCH ? AND m.ns = ? AND NOT EXISTS (SELECT 1 FROM supersessions s WHERE s.rid = m.rid)"
    " ORDER BY rank LIMIT ?"
)
_PLAIN_SQL = _CANDIDATES_SQL.format("")
_WITH_VECTORS_SQL = _CANDIDATES_SQL.format(", m.embedding")


def indexed_rows(catalog: Any) -> int | None:
    """How many memories the keyword index holds, store-wide: FTS5's own
    count (the first varint of its averages record), one read; None when
    there is no index or no record yet."""
    try:
        row = catalog.query_one("SELECT block FROM memory_text_data WHERE id = 1")
    except sqlite3.OperationalError:
        return None
    if row is None or not row[0]:
        return None
    value = 0
    for i, b in enumerate(bytes(row[0])[:9]):  # SQLite's varint: 7 bits a byte, big-endian; the 9th all 8
        if i == 8:
            return (value << 8) | b
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value
    return None


def keyword_candidates(
    catalog: Any, ns: str, text: str, limit: int, *, with_vectors: bool = False, scoped: bool = True
) -> list[tuple[Any, ...]]:
    """The best ``limit`` memories of ``ns`` (any tier, not superseded) for
    the words of ``text``, best first: ``(rid, id, tier, bm25)`` with ``bm25`` positive
    (FTS5's score negated: larger matches better), and with
    ``with_vectors`` the catalog's embedding bytes (hot and warm memories;
    None for cold ones) as a fifth field: the row is read anyway, and
    hnswlib's ``get_items`` costs more than the bytes. Empty when the text
    has no word to look for, or the catalog has no keyword index (a
    read-only open of a store not upgraded yet: no index, or one without
    the namespace column). ``catalog``: a :class:`Catalog` or an open
    ``sqlite3.Connection``. ``scoped``: the match is narrowed to the
    namespace in the index (:func:`fts_query`); it costs a walk of the
    namespace's rows, so it pays where the namespace is a small part of the
    store, and not where it is most of it."""
    q = fts_query(text, ns if scoped else None)
    if q is None or limit < 1:
        return []
    sql = _WITH_VECTORS_SQL if with_vectors else _PLAIN_SQL
    try:
        rows = _rows(catalog, sql, (q, ns, int(limit)))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc) or "no such column" in str(exc):
            return []
        raise
    return [(int(r[0]), r[1], int(r[2]), -float(r[3]), *r[4:]) for r in rows]


# The rowids filter the match as it is scanned (`+rowid`: not FTS5's per-rowid lookups, ~40 µs each),
# so BM25 is computed for those rows alone; which of them count (the namespace's, not superseded) is a
# second query by primary key (joined in one, the planner ran the MATCH once per joined row).
_SCORES_SQL = "SELECT rowid, bm25(memory_text, 1.0, 0.0) FROM memory_text WHERE memory_text MATCH ? AND +rowid IN ({})"
_COUNTED_SQL = (
    "SELECT m.rid FROM memories m WHERE m.rid IN ({}) AND m.ns = ?"
    " AND NOT EXISTS (SELECT 1 FROM supersessions s WHERE s.rid = m.rid)"
)


def keyword_scores(catalog: Any, ns: str, text: str, rids: list[int]) -> dict[int, float]:
    """The BM25 (positive; as :func:`keyword_candidates` gives it, from the
    same corpus statistics) of each of ``rids`` that matches a word of
    ``text``; rids that match none, are superseded, or are not of ``ns`` are
    absent. For a search's vector candidates that fell outside the keyword
    list's cut: their keyword term is what their words earn, not 0."""
    q = fts_query(text)
    if q is None or not rids:
        return {}
    try:
        scored = _rows(catalog, _SCORES_SQL.format(",".join("?" * len(rids))), (q, *(int(r) for r in rids)))
        if not scored:
            return {}
        counted = _rows(catalog, _COUNTED_SQL.format(",".join("?" * len(scored))), (*(int(r[0]) for r in scored), ns))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return {}
        raise
    keep = {int(r[0]) for r in counted}
    return {int(r[0]): -float(r[1]) for r in scored if int(r[0]) in keep}


# -- integrity ------------------------------------------------------------------------------


def check_index(conn_or_catalog: Any) -> dict[str, list[int]]:
    """The rids of memories missing from the keyword index, and of index
    entries without a memory (``{"missing": [...], "extra": [...]}``, up to
    1000 each), from the index's per-document table ``memory_text_docsize``."""
    q = conn_or_catalog.execute if isinstance(conn_or_catalog, sqlite3.Connection) else conn_or_catalog.query

    def rids(sql: str) -> list[int]:
        out = q(sql)
        return [int(r[0]) for r in (out.fetchall() if hasattr(out, "fetchall") else out)]

    return {
        "missing": rids("SELECT rid FROM memories WHERE rid NOT IN (SELECT id FROM memory_text_docsize) LIMIT 1000"),
        "extra": rids("SELECT id FROM memory_text_docsize WHERE id NOT IN (SELECT rid FROM memories) LIMIT 1000"),
    }


def rebuild_index(conn: sqlite3.Connection) -> None:
    """Rebuild the keyword index from the catalog's text (inside the caller's
    write transaction): FTS5's ``rebuild`` reads every ``memories`` row."""
    conn.execute("INSERT INTO memory_text (memory_text) VALUES ('rebuild')")
    clear_notes(conn)  # what earlier writes of the transaction noted: the rebuild read their rows as they are


def index_bytes(catalog: Any) -> int:
    """Bytes the keyword index takes in the catalog (its shadow tables' pages;
    the text itself is the memories table's), or -1 when SQLite's ``dbstat``
    table is not available."""
    try:
        row = catalog.query_one("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'memory_text%'")
    except sqlite3.OperationalError:
        return -1
    return int(row[0] or 0)

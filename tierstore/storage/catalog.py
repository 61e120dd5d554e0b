"""The catalog: SQLite in WAL mode, the system of record.

Every memory's fields, vector (while hot or warm), tier, weight state and next
due time live here; hot indexes and warm shards are caches derived from it.

Writes go through one writer thread that drains a queue and commits each batch
in one transaction (group commit): ``write()`` returns once the transaction
holding the caller's change has committed. Each queued change runs in its own
savepoint, so one failing change is rolled back alone and its caller gets the
exception while the rest of the batch commits. Reads use one connection per
thread and see every committed write.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from tierstore.errors import ReadOnlyStoreError, StoreClosedError
from tierstore.rules.dedupe import content_hash
from tierstore.storage import faults

T = TypeVar("T")

SCHEMA_VERSION = 1
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")  # SQLite's PRAGMA synchronous values the catalog takes

# Settings of the database itself, one comment per value (diskcache style).
PRAGMAS = {
    "journal_mode": "wal",  # readers never block the writer
    "busy_timeout": 10_000,  # ms; another connection checkpointing the WAL
    "foreign_keys": "on",
    "temp_store": "memory",
    # KiB (8 MiB) of page cache per connection: the file's pages stay in the OS's cache anyway, and at
    # 64 MiB the writer alone held 2.9 KB per memory after a 20 000-memory ingest (benchmarks/hot_bytes.py)
    "cache_size": -8_192,
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- One row per memory in any tier. AUTOINCREMENT: a rid is never reused, so a
-- checkpointed hot index can never map an old slot to a new memory.
CREATE TABLE IF NOT EXISTS memories (
    rid              INTEGER PRIMARY KEY AUTOINCREMENT,
    ns               TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    content          TEXT    NOT NULL,
    embedding        BLOB,              -- float32 little-endian; NULL while cold
    memory_type      TEXT    NOT NULL,
    source           TEXT    NOT NULL,
    tags             TEXT    NOT NULL,  -- JSON array of strings
    created_at       REAL    NOT NULL,
    last_accessed_at REAL    NOT NULL,
    access_count     INTEGER NOT NULL,
    conf_llm         REAL,              -- confidence signals, NULL when absent
    conf_rule        REAL,
    conf_feedback    REAL,
    confidence       REAL    NOT NULL,  -- fused base confidence at t_conf
    t_conf           REAL    NOT NULL,
    ttl_seconds      REAL,              -- per-memory override, NULL: the type's
    pinned           INTEGER NOT NULL,
    tier             INTEGER NOT NULL,  -- 0 hot, 1 warm, 2 cold
    w_ref            REAL    NOT NULL,
    t_ref            REAL    NOT NULL,
    half_life        REAL    NOT NULL,  -- effective, seconds
    ttl              REAL,              -- effective, seconds; NULL: never expires
    ttl_anchor       REAL    NOT NULL,
    ctx_mult         REAL    NOT NULL,
    due_at           REAL,              -- NULL: never due
    shard            INTEGER,           -- warm shard holding the vector
    cold_key         TEXT,              -- archive object holding the record
    cold_offset      INTEGER,
    cold_length      INTEGER,
    key              TEXT,              -- the memory's slot (add(key=...)), NULL: none
    content_hash     INTEGER,           -- dedupe.content_hash(content): finds exact duplicates
    metadata         TEXT,              -- the caller's free-form metadata, compact JSON; NULL: none
    UNIQUE (ns, id)
);
-- A sweep reads only what is due: this index answers "due_at <= now" in order.
CREATE INDEX IF NOT EXISTS memories_due ON memories (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_ns_tier ON memories (ns, tier, created_at);
CREATE INDEX IF NOT EXISTS memories_shard ON memories (shard) WHERE shard IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_cold_key ON memories (cold_key) WHERE cold_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS contexts (
    ns   TEXT PRIMARY KEY,
    tags TEXT NOT NULL                  -- JSON array: the namespace's active context
);
-- Warm shards: immutable directories under warm/. A row of memories belongs
-- to a shard while its tier is warm and its shard column names it.
CREATE TABLE IF NOT EXISTS shards (
    shard      INTEGER PRIMARY KEY AUTOINCREMENT,
    ns         TEXT    NOT NULL,
    name       TEXT    NOT NULL UNIQUE, -- directory under warm/
    kind       TEXT    NOT NULL,        -- flat | hnsw
    count      INTEGER NOT NULL,
    created_at REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS shards_ns ON shards (ns, shard);
-- Archive batches in the object store. A batch is recorded here (pending)
-- before its object is written, so an interrupted archive is finished on the
-- next sweep with the same key and the same members. A batch holding the
-- record of a deleted memory is marked purge until the sweep rewrites it.
CREATE TABLE IF NOT EXISTS archives (
    batch      INTEGER PRIMARY KEY AUTOINCREMENT,
    key        TEXT    NOT NULL UNIQUE,
    ns         TEXT    NOT NULL,
    rids       TEXT    NOT NULL,        -- JSON: the rows this batch archives
    state      TEXT    NOT NULL,        -- pending | done | purge
    count      INTEGER NOT NULL,
    created_at REAL    NOT NULL
);
-- A namespace's batches by state: what a delete asks (tombstones.stale_rids) and
-- what a tombstone's collection asks per tombstone; without it both read every
-- batch of the store, and a night of deletes cost O(deletes x batches).
CREATE INDEX IF NOT EXISTS archives_ns ON archives (ns, state);
-- Deletes that may leave a record in an archive object also write a tombstone
-- object (tierstore/tiers/tombstones.py), so a catalog rebuilt from the bucket does
-- not bring the memory back; listed here until a sweep drops them.
-- One row per deleted memory; one object names every memory one transaction
-- deleted in one namespace, so rows share their object's key.
CREATE TABLE IF NOT EXISTS tombstones (
    key        TEXT    NOT NULL,        -- object key under tombstone/
    ns         TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    deleted_at REAL    NOT NULL,
    state      TEXT    NOT NULL,        -- pending (object not yet written) | written
    PRIMARY KEY (key, id)
) WITHOUT ROWID;
-- Every lifecycle transition: create, promote, demote, archive, restore, delete, ...
CREATE TABLE IF NOT EXISTS events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    t            REAL    NOT NULL,
    ns           TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    from_tier    TEXT,
    to_tier      TEXT,
    reason       TEXT,
    weight       REAL,
    confidence   REAL,
    access_count INTEGER,
    memory_type  TEXT
);
CREATE INDEX IF NOT EXISTS events_t ON events (t);
-- Accesses, aggregated per memory and day so that the log does not grow per search.
CREATE TABLE IF NOT EXISTS access_log (
    ns    TEXT    NOT NULL,
    id    TEXT    NOT NULL,
    day   INTEGER NOT NULL,             -- floor(time / 86400)
    count INTEGER NOT NULL,
    PRIMARY KEY (ns, id, day)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_ns_id ON events (ns, id);
-- What replaced what: one row per superseded memory while the mark holds (see
-- tierstore/rules/supersession.py). Keyed by rid, which is never reused, so a mark
-- left by a deleted memory can never fall on a new one with the same id.
CREATE TABLE IF NOT EXISTS supersessions (
    rid               INTEGER PRIMARY KEY, -- the superseded memory (memories.rid)
    ns                TEXT    NOT NULL,
    by_id             TEXT    NOT NULL,    -- the memory that superseded it
    kind              TEXT    NOT NULL,    -- explicit | key | auto
    similarity        REAL,                -- auto: the cosine of the two
    t                 REAL    NOT NULL,
    prior_ttl_seconds REAL                 -- its per-memory TTL before (NULL: the type's), back on reversal
);
-- the marks a memory made (an archive record keeps them; a delete reverses them)
CREATE INDEX IF NOT EXISTS supersessions_by ON supersessions (ns, by_id);
-- The cold search index (tierstore/tiers/cold_index.py): a sign code per cold
-- memory, written in the transaction that archives it. A memory that leaves
-- the cold tier, or the catalog, takes its code with it (the triggers), so no
-- path that restores, reactivates or deletes can leave a stale code behind.
-- vector_at / vector_crc: where the memory's embedding starts in its record
-- frame and the CRC32 of its bytes, so that a search reads the vector alone
-- (NULL: not known, the whole record is read; rows written before them).
-- code8: the int8 code a search reads to choose which candidates to read
-- exactly (NULL: rows written before it; such a candidate is always read).
CREATE TABLE IF NOT EXISTS cold_codes (
    rid        INTEGER PRIMARY KEY,     -- memories.rid of a cold memory
    ns         TEXT    NOT NULL,
    code       BLOB    NOT NULL,        -- sign code: ceil(dim/64) uint64 words, little-endian
    vector_at  INTEGER,                 -- bytes from the record frame's start
    vector_crc INTEGER,                 -- zlib.crc32 of the embedding's bytes
    code8      BLOB                     -- float32 scale (little-endian), then dim int8 components
);
CREATE INDEX IF NOT EXISTS cold_codes_ns ON cold_codes (ns, rid);
CREATE TRIGGER IF NOT EXISTS cold_codes_leave AFTER UPDATE OF tier ON memories WHEN NEW.tier != 2
BEGIN DELETE FROM cold_codes WHERE rid = NEW.rid; END;
CREATE TRIGGER IF NOT EXISTS cold_codes_forget AFTER DELETE ON memories
BEGIN DELETE FROM cold_codes WHERE rid = OLD.rid; END;
"""

# The keyword index (tierstore/storage/keyword_index.py): every memory's text, in any tier,
# for search(text=...) and restore(text=...): FTS5 over stemmed words (the
# porter tokenizer), BM25. External content: the text itself stays in
# memories.content alone, the namespace beside it; rowid = memories.rid. The triggers keep it
# in step in the transaction of every write (add, delete, a content change;
# a tier move changes no text), so no path, crash or recovery can leave it
# behind. Replaces cold_text (archived text only): upgrade_schema.
#
# The index is written at the end of each transaction, not by each row's
# statement: FTS5 does work per statement that writes to it (~20 us an add,
# ~40 us a delete, most of their catalog time, where one statement for a
# whole batch costs ~1 us a row). So the triggers only take notes: an added
# row's rid in keyword_pending (its text is read when it is indexed), a
# deleted or edited row's indexed text in keyword_gone (an FTS5 'delete' must
# name the text the row was indexed with); index_noted_text() applies every
# note in two statements before the commit (Catalog._run; upgrade_schema for
# notes a connection of its own left). A row noted but not indexed yet that
# is deleted only loses its note (an FTS5 'delete' of a row never indexed
# would corrupt the index); one edited again is read as it is then.
# The statements are kept apart so that upgrade_schema can make the index again on an older store.
KEYWORD_INDEX_STATEMENTS = (
    """CREATE VIRTUAL TABLE IF NOT EXISTS memory_text USING fts5(
    content, ns, content = 'memories', content_rowid = 'rid', tokenize = 'porter unicode61')""",
    "CREATE TABLE IF NOT EXISTS keyword_pending (rid INTEGER PRIMARY KEY)",
    "CREATE TABLE IF NOT EXISTS keyword_gone (rid INTEGER PRIMARY KEY, content TEXT NOT NULL, ns TEXT NOT NULL)",
    # (a memory's ns never changes: no trigger on it)
    """CREATE TRIGGER IF NOT EXISTS memory_text_add AFTER INSERT ON memories
BEGIN INSERT INTO keyword_pending (rid) VALUES (NEW.rid); END""",
    """CREATE TRIGGER IF NOT EXISTS memory_text_forget AFTER DELETE ON memories
BEGIN
    INSERT OR IGNORE INTO keyword_gone (rid, content, ns) SELECT OLD.rid, OLD.content, OLD.ns
        WHERE NOT EXISTS (SELECT 1 FROM keyword_pending WHERE rid = OLD.rid);
    DELETE FROM keyword_pending WHERE rid = OLD.rid;
END""",
    """CREATE TRIGGER IF NOT EXISTS memory_text_edit AFTER UPDATE OF content ON memories
    WHEN NOT EXISTS (SELECT 1 FROM keyword_pending WHERE rid = OLD.rid)
BEGIN
    INSERT OR IGNORE INTO keyword_gone (rid, content, ns) VALUES (OLD.rid, OLD.content, OLD.ns);
    INSERT INTO keyword_pending (rid) VALUES (NEW.rid);
END""",
)
KEYWORD_TRIGGERS = ("memory_text_add", "memory_text_forget", "memory_text_edit")


def index_noted_text(conn: sqlite3.Connection) -> None:
    """Apply the keyword index's notes (``keyword_gone``, then
    ``keyword_pending``) in one statement each, and clear them (inside the
    caller's write transaction, before its commit)."""
    if conn.execute("SELECT 1 FROM keyword_gone LIMIT 1").fetchone() is not None:
        conn.execute(
            "INSERT INTO memory_text (memory_text, rowid, content, ns)"
            " SELECT 'delete', rid, content, ns FROM keyword_gone"
        )
        conn.execute("DELETE FROM keyword_gone")
    if conn.execute("SELECT 1 FROM keyword_pending LIMIT 1").fetchone() is not None:
        conn.execute(
            "INSERT INTO memory_text (rowid, content, ns)"
            " SELECT m.rid, m.content, m.ns FROM keyword_pending p JOIN memories m ON m.rid = p.rid"
        )
        conn.execute("DELETE FROM keyword_pending")


def clear_notes(conn: sqlite3.Connection) -> None:
    """Drop the keyword index's notes unapplied: after an FTS5 ``rebuild``,
    which indexed every row as it is (inside the same transaction)."""
    conn.execute("DELETE FROM keyword_pending")
    conn.execute("DELETE FROM keyword_gone")


SCHEMA += "".join(statement + ";\n" for statement in KEYWORD_INDEX_STATEMENTS)


# Columns and indexes added after the first release: created by upgrade_schema
# on stores written by earlier code (CREATE TABLE IF NOT EXISTS leaves an
# existing table as it is), and on new stores alike.
ADDED_COLUMNS = (("key", "TEXT"), ("content_hash", "INTEGER"), ("metadata", "TEXT"))
ADDED_CODE_COLUMNS = (("vector_at", "INTEGER"), ("vector_crc", "INTEGER"), ("code8", "BLOB"))  # of cold_codes
ADDED_INDEXES = """
CREATE INDEX IF NOT EXISTS memories_key ON memories (ns, key) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS memories_content ON memories (ns, content_hash);
-- rows without a hash (written before the upgrade, or by earlier code since): hashed at open
CREATE INDEX IF NOT EXISTS memories_unhashed ON memories (rid) WHERE content_hash IS NULL;
-- each sweep asks for the batches pending (recovery) and marked purge (compaction), and for the tombstones
-- pending: without these it read every batch and every tombstone of the store to find the few
CREATE INDEX IF NOT EXISTS archives_state ON archives (state, batch);
CREATE INDEX IF NOT EXISTS tombstones_state ON tombstones (state);
"""

# The cold_codes table alone, for code that keeps codes in a database of its own (tests, benchmarks).
COLD_CODES_SCHEMA = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS cold_codes") : SCHEMA.index("CREATE TRIGGER")]


# meta key: set once the keyword index holds every memory (built from the
# catalog: a new store, or one written before memory_text existed)
KEYWORD_INDEX_META = "memory_text"


def _build_memory_text(conn: sqlite3.Connection) -> None:
    """Fill the keyword index from the catalog once (a store written before
    it: its rows were never indexed; or before it held each memory's
    namespace: the table and its triggers are made again) and drop its
    predecessor ``cold_text``;
    one transaction, so an interrupted upgrade is redone at the next open.
    Idempotent."""
    columns = {r[1] for r in conn.execute("PRAGMA table_info(memory_text)")}
    if "ns" in columns and conn.execute("SELECT 1 FROM meta WHERE key = ?", (KEYWORD_INDEX_META,)).fetchone():
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DROP TABLE IF EXISTS cold_text")
        if "ns" not in columns:  # written before the index had the namespace: made again with it
            for trigger in KEYWORD_TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            conn.execute("DROP TABLE IF EXISTS memory_text")
            for statement in KEYWORD_INDEX_STATEMENTS:
                conn.execute(statement)
        # rank (ORDER BY rank: the keyword candidates, restore(text=)) is BM25 over the text alone
        conn.execute("INSERT INTO memory_text (memory_text, rank) VALUES ('rank', 'bm25(1.0, 0.0)')")
        conn.execute("INSERT INTO memory_text (memory_text) VALUES ('rebuild')")
        clear_notes(conn)  # 'rebuild' indexed every row as it is: no note is left to apply
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, 'built')", (KEYWORD_INDEX_META,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _tombstones_by_object(conn: sqlite3.Connection) -> None:
    """Key the ``tombstones`` table by (object key, id), as objects now name
    several memories (earlier code keyed it by the object key alone, one
    memory per object); one transaction. Idempotent."""
    pk = {r[1]: r[5] for r in conn.execute("PRAGMA table_info(tombstones)")}
    if pk.get("id"):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("ALTER TABLE tombstones RENAME TO tombstones_by_key")
        create = SCHEMA[SCHEMA.index("CREATE TABLE IF NOT EXISTS tombstones") :]
        conn.execute(create[: create.index(";") + 1])
        conn.execute(
            "INSERT INTO tombstones (key, ns, id, deleted_at, state)"
            " SELECT key, ns, id, deleted_at, state FROM tombstones_by_key"
        )
        conn.execute("DROP TABLE tombstones_by_key")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _index_text_at_commit(conn: sqlite3.Connection) -> None:
    """Replace keyword-index triggers written by earlier code (each row's
    statement wrote the index) with this version's, and apply any notes left
    (by a connection that is not a Catalog's writer); one transaction.
    Idempotent."""
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'memory_text_forget'"
    ).fetchone()
    current = row is not None and "keyword_gone" in row[0]
    if (
        current
        and conn.execute("SELECT 1 FROM keyword_pending LIMIT 1").fetchone() is None
        and conn.execute("SELECT 1 FROM keyword_gone LIMIT 1").fetchone() is None
    ):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not current:  # every row so far was indexed by the old trigger: nothing is pending
            for trigger in KEYWORD_TRIGGERS:
                conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            for statement in KEYWORD_INDEX_STATEMENTS:
                conn.execute(statement)
        index_noted_text(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


ACCESS_LOG_SQL = (
    "INSERT INTO access_log (ns, id, day, count) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (ns, id, day) DO UPDATE SET count = count + excluded.count"
)

EVENT_SQL = (
    "INSERT INTO events (t, ns, id, kind, from_tier, to_tier, reason, weight, confidence, access_count,"
    " memory_type) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

# Columns read to rebuild a memory in memory, in this order.
MEMORY_COLUMNS = (
    "rid",
    "ns",
    "id",
    "content",
    "embedding",
    "memory_type",
    "source",
    "tags",
    "created_at",
    "last_accessed_at",
    "access_count",
    "conf_llm",
    "conf_rule",
    "conf_feedback",
    "confidence",
    "t_conf",
    "ttl_seconds",
    "pinned",
    "tier",
    "w_ref",
    "t_ref",
    "half_life",
    "ttl",
    "ttl_anchor",
    "ctx_mult",
    "due_at",
    "shard",
    "cold_key",
    "cold_offset",
    "cold_length",
    "key",
    "metadata",
)
# Columns written by an insert: every one but the rid, and the content hash
# (derived from the content, never read back into a MemoryRow).
INSERT_COLUMNS = (*MEMORY_COLUMNS[1:], "content_hash")
_SELECT_MEMORY = "SELECT " + ", ".join(MEMORY_COLUMNS) + " FROM memories"

# The state that changes after creation, written back by flushes.
STATE_COLUMNS = (
    "last_accessed_at",
    "access_count",
    "conf_feedback",
    "confidence",
    "t_conf",
    "pinned",
    "w_ref",
    "t_ref",
    "half_life",
    "ttl",
    "ttl_anchor",
    "ctx_mult",
    "due_at",
    "ttl_seconds",
)


@dataclass(slots=True)
class MemoryRow:
    """One catalog row. ``ttl``/``due_at`` use +inf for never (NULL in SQL)."""

    rid: int
    ns: str
    id: str
    content: str
    embedding: bytes | None
    memory_type: str
    source: str
    tags: tuple[str, ...]
    created_at: float
    last_accessed_at: float
    access_count: int
    conf_llm: float | None
    conf_rule: float | None
    conf_feedback: float | None
    confidence: float
    t_conf: float
    ttl_seconds: float | None
    pinned: bool
    tier: int
    w_ref: float
    t_ref: float
    half_life: float
    ttl: float
    ttl_anchor: float
    ctx_mult: float
    due_at: float
    shard: int | None = None
    cold_key: str | None = None
    cold_offset: int | None = None
    cold_length: int | None = None
    key: str | None = None
    metadata: str | None = None  # compact JSON text (validation.check_metadata), None: none

    @classmethod
    def from_sql(cls, r: Sequence[Any]) -> MemoryRow:
        # positional, in MEMORY_COLUMNS order (a search builds ~100 of these per cold pass)
        return cls(
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            () if r[7] == "[]" else tuple(json.loads(r[7])),  # tags: most rows have none, no parse
            r[8],
            r[9],
            r[10],
            r[11],
            r[12],
            r[13],
            r[14],
            r[15],
            r[16],
            bool(r[17]),
            r[18],
            r[19],
            r[20],
            r[21],
            math.inf if r[22] is None else r[22],
            r[23],  # ttl: NULL is never
            r[24],
            math.inf if r[25] is None else r[25],
            *r[26:32],  # due_at: NULL is never
        )

    def vector(self) -> np.ndarray | None:
        if self.embedding is None:
            return None
        return np.frombuffer(self.embedding, dtype="<f4").astype(np.float32, copy=True)

    @property
    def expires_at(self) -> float:
        return self.ttl_anchor + self.ttl


def upgrade_schema(conn: sqlite3.Connection, chunk: int = 10_000) -> None:
    """Bring a store written by earlier code up to this schema, in place:
    add the missing columns of :data:`ADDED_COLUMNS` (and of
    :data:`ADDED_CODE_COLUMNS` to ``cold_codes``), create the indexes of
    :data:`ADDED_INDEXES`, and hash the content of rows that have no
    ``content_hash`` (in chunks, one transaction each: an interrupted upgrade
    resumes at the next open); build the keyword index ``memory_text`` from
    the catalog (replacing ``cold_text``). ``conn`` is in autocommit mode;
    idempotent."""
    _build_memory_text(conn)
    _index_text_at_commit(conn)
    _tombstones_by_object(conn)
    have = {r[1] for r in conn.execute("PRAGMA table_info(memories)")}
    have_codes = {r[1] for r in conn.execute("PRAGMA table_info(cold_codes)")}
    conn.execute("BEGIN IMMEDIATE")
    try:
        for name, sql_type in ADDED_COLUMNS:
            if name not in have:
                conn.execute(f"ALTER TABLE memories ADD COLUMN {name} {sql_type}")
        for name, sql_type in ADDED_CODE_COLUMNS:
            if name not in have_codes:
                conn.execute(f"ALTER TABLE cold_codes ADD COLUMN {name} {sql_type}")
        for statement in ADDED_INDEXES.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    while True:
        rows = conn.execute("SELECT rid, content FROM memories WHERE content_hash IS NULL LIMIT ?", (chunk,)).fetchall()
        if not rows:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "UPDATE memories SET content_hash = ? WHERE rid = ?", [(content_hash(text), rid) for rid, text in rows]
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def stack_embeddings(blobs: Sequence[bytes | None], dim: int) -> np.ndarray:
    """float32 ``(n, dim)`` from catalog embedding blobs."""
    if not blobs:
        return np.zeros((0, dim), np.float32)
    buf = b"".join(b or b"" for b in blobs)
    vecs = np.frombuffer(buf, dtype="<f4").astype(np.float32)
    if vecs.size != len(blobs) * dim:
        from tierstore.errors import CorruptDataError

        raise CorruptDataError("catalog rows hold embeddings of the wrong length")
    return vecs.reshape(len(blobs), dim)


def tags_json(tags: Sequence[str]) -> str:
    """The ``tags`` column's JSON array (most memories have none: no encoder call)."""
    return json.dumps(list(tags)) if tags else "[]"


def sql_time(x: float) -> float | None:
    """+inf (never) is stored as NULL."""
    return None if not math.isfinite(x) else float(x)


def insert_params(row: MemoryRow, hashed: int | None = None) -> tuple[Any, ...]:
    """INSERT_SQL's values for ``row``; ``hashed``: its :func:`content_hash`
    when the caller has it already (an add computes it to look for duplicates)."""
    return (
        row.ns,
        row.id,
        row.content,
        row.embedding,
        row.memory_type,
        row.source,
        tags_json(row.tags),
        row.created_at,
        row.last_accessed_at,
        row.access_count,
        row.conf_llm,
        row.conf_rule,
        row.conf_feedback,
        row.confidence,
        row.t_conf,
        row.ttl_seconds,
        int(row.pinned),
        row.tier,
        row.w_ref,
        row.t_ref,
        row.half_life,
        sql_time(row.ttl),
        row.ttl_anchor,
        row.ctx_mult,
        sql_time(row.due_at),
        row.shard,
        row.cold_key,
        row.cold_offset,
        row.cold_length,
        row.key,
        row.metadata,
        content_hash(row.content) if hashed is None else hashed,
    )


def state_params(row: MemoryRow) -> tuple[Any, ...]:
    """STATE_COLUMNS values of ``row`` and its rid, for UPDATE_STATE_SQL."""
    return (
        row.last_accessed_at,
        row.access_count,
        row.conf_feedback,
        row.confidence,
        row.t_conf,
        int(row.pinned),
        row.w_ref,
        row.t_ref,
        row.half_life,
        sql_time(row.ttl),
        row.ttl_anchor,
        row.ctx_mult,
        sql_time(row.due_at),
        row.ttl_seconds,
        row.rid,
    )


# OR FAIL: an insert that breaks a constraint is undone by the savepoint every write runs in
# (Catalog._run) with the rest of its write, so SQLite opens no statement journal per row. With
# the add trigger an insert writes two tables, and that journal copied each page the row
# touched: ~17 of an add's ~45 us of catalog CPU (30 000 x 384 in batches of 1 000, ad hoc).
INSERT_SQL = (
    "INSERT OR FAIL INTO memories ("
    + ", ".join(INSERT_COLUMNS)
    + ") VALUES ("
    + ", ".join("?" * len(INSERT_COLUMNS))
    + ")"
)

UPDATE_STATE_SQL = "UPDATE memories SET " + ", ".join(f"{c} = ?" for c in STATE_COLUMNS) + " WHERE rid = ?"


class Catalog:
    """SQLite catalog with a group-committing writer thread.

    ``synchronous``: ``"NORMAL"`` makes a committed write survive a process
    crash (WAL); ``"FULL"`` also survives power loss, at an fsync per commit.
    """

    def __init__(
        self, path: str | Path, *, synchronous: str = "NORMAL", max_batch: int = 512, readonly: bool = False
    ) -> None:
        self.path = Path(path)
        self._synchronous = synchronous.upper()
        if self._synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be NORMAL or FULL, got {synchronous!r}")
        self._max_batch = max_batch
        self.readonly = readonly
        self._queue: deque[tuple[Callable[[sqlite3.Connection], Any], Future[Any]]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self.commits = 0  # transactions committed (group-commit evidence for tests/benchmarks)
        self.syncs = 0  # durability barriers (sync()) that forced the WAL to disk
        self._writer: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        if readonly:  # a reader beside the store's writer (WAL): no writer, no schema change
            self.query_one("SELECT count(*) FROM meta")  # fails now, clearly, if this is not a catalog
            return
        self._writer = self._connect()
        self._writer.executescript(SCHEMA)
        upgrade_schema(self._writer)
        self._thread = threading.Thread(target=self._run, name="tierstore-catalog-writer", daemon=True)
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        if self.readonly:
            conn = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=30.0,
            )
            conn.execute("PRAGMA busy_timeout = 10000")
            return conn
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        for key, value in PRAGMAS.items():
            conn.execute(f"PRAGMA {key} = {value}")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        return conn

    # -- writes -------------------------------------------------------------

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` inside the next group commit; return its result
        once committed, or raise its exception (its changes rolled back)."""
        return self.submit(fn).result()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """One statement in the next group commit, as :meth:`write`. Its
        arguments are bound by the call, so a loop can run one per item (a
        lambda there would close over the loop's variables)."""
        self.write(lambda conn: conn.execute(sql, params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """:meth:`execute` for ``conn.executemany``."""
        self.write(lambda conn: conn.executemany(sql, rows))

    def release_cache(self) -> None:
        """Have the writer hand its page cache back to the system
        (``PRAGMA shrink_memory`` in a group commit; nothing is written).
        After a bulk write the cache holds up to ``cache_size`` of pages the
        next writes mostly do not need (8 MiB: 84 bytes per memory of a
        100 000-memory ingest, benchmarks/hot_bytes.py); reading one again
        costs a pread from the OS's cache."""
        if not self.readonly:
            self.execute("PRAGMA shrink_memory")

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Queue ``fn`` for the next group commit without waiting."""
        fut: Future[T] = Future()
        if self.readonly:
            raise ReadOnlyStoreError("the store was opened read-only (readonly=True): it changes nothing")
        with self._cond:
            if self._closed:
                raise StoreClosedError("the catalog is closed")
            self._queue.append((fn, fut))
            self._cond.notify()
        return fut

    def _run(self) -> None:
        conn = self._writer
        assert conn is not None, "the writer thread starts after the writer connection is made"
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
                batch: list[tuple[Callable[[sqlite3.Connection], Any], Future[Any]]] = []
                while self._queue and len(batch) < self._max_batch:
                    batch.append(self._queue.popleft())
            outcomes: list[tuple[Future[Any], Any, BaseException | None]] = []
            try:
                conn.execute("BEGIN IMMEDIATE")
                for fn, fut in batch:
                    conn.execute("SAVEPOINT op")
                    try:
                        result = fn(conn)
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                        outcomes.append((fut, None, exc))
                    else:
                        conn.execute("RELEASE op")
                        outcomes.append((fut, result, None))
                index_noted_text(conn)
                conn.execute("COMMIT")
                self.commits += 1
            except BaseException as exc:  # noqa: BLE001 - the commit itself failed
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            for fut, result, error in outcomes:
                if error is None:
                    fut.set_result(result)
                else:
                    fut.set_exception(error)

    def sync(self) -> None:
        """Force every transaction committed so far to disk.

        With ``synchronous=NORMAL`` a commit survives a process crash at once
        but an OS crash only once the WAL is synced (SQLite syncs it at
        checkpoints). Callers that are about to delete something a commit
        stopped referencing (an archive object, a tombstone) call this first:
        were the commit lost after the delete, the catalog would point at
        nothing. One fsync of the WAL file covers every commit written to it.
        """
        if self._synchronous in ("FULL", "EXTRA") or self.readonly:
            return  # every commit was synced as it was made (or this catalog makes none)
        wal = str(self.path) + "-wal"
        before = faults.wal_position(str(self.path))
        try:
            fd = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:
            return  # no WAL: everything is in the database file, synced by the checkpoint that emptied it
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.syncs += 1
        faults.synced(str(self.path), before)

    # -- reads --------------------------------------------------------------

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (autocommit: each statement sees the
        latest commit)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreClosedError("the catalog is closed")
            conn = self._connect()
            conn.execute("PRAGMA query_only = on")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's read connection; a read that fails because close()
        closed the connection under it (a call racing close() in another
        thread) raises StoreClosedError, not SQLite's ProgrammingError."""
        try:
            yield self.reader()
        except sqlite3.ProgrammingError:
            if self._closed:
                raise StoreClosedError("the store was closed during this call") from None
            raise

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._reading() as conn:
            return conn.execute(sql, params).fetchall()

    def query_one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        with self._reading() as conn:
            return conn.execute(sql, params).fetchone()

    def missing_schema(self) -> list[str]:
        """Tables and ``memories`` columns of this version's schema that the
        catalog lacks (a store written by an earlier version and not opened
        for writing since: the writable open adds them). ``cold_codes`` is
        and ``memory_text`` (with its notes' tables) are not listed: readers search without them
        (nothing archived is findable by meaning, nor anything by keywords,
        until the upgrade)."""
        have = {r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables = [
            t
            for t in re.findall(r"CREATE (?:VIRTUAL )?TABLE IF NOT EXISTS (\w+)", SCHEMA)
            if t not in have and t not in ("cold_codes", "memory_text", "keyword_pending", "keyword_gone")
        ]
        columns = {r[1] for r in self.query("PRAGMA table_info(memories)")}
        return tables + [f"memories.{name}" for name, _ in ADDED_COLUMNS if name not in columns]

    def has_table(self, name: str) -> bool:
        """Whether the catalog has this table (a read-only open of a store an
        earlier version wrote may lack this version's tables)."""
        return self.query_one("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)) is not None

    # -- memories -----------------------------------------------------------

    def get_row(self, ns: str, id: str) -> MemoryRow | None:
        r = self.query_one(_SELECT_MEMORY + " WHERE ns = ? AND id = ?", (ns, id))
        return None if r is None else MemoryRow.from_sql(r)

    @staticmethod
    def row_in(conn: sqlite3.Connection, ns: str, id: str) -> MemoryRow | None:
        """A row read through ``conn`` (inside a write transaction)."""
        r = conn.execute(_SELECT_MEMORY + " WHERE ns = ? AND id = ?", (ns, id)).fetchone()
        return None if r is None else MemoryRow.from_sql(r)

    @staticmethod
    def write_state(conn: sqlite3.Connection, row: MemoryRow) -> None:
        """Write a row's mutable state (STATE_COLUMNS) through ``conn``."""
        conn.execute(UPDATE_STATE_SQL, state_params(row))

    def get_rows_by_rid(self, rids: Iterable[int]) -> list[MemoryRow]:
        rids = list(rids)
        out: list[MemoryRow] = []
        for i in range(0, len(rids), 500):
            chunk = rids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            out.extend(MemoryRow.from_sql(r) for r in self.query(_SELECT_MEMORY + f" WHERE rid IN ({marks})", chunk))
        return out

    def select_rows(self, tail: str, params: Sequence[Any] = ()) -> list[MemoryRow]:
        """Rows of ``SELECT <every column> FROM memories m <tail>``; ``tail``
        holds joins, WHERE, ORDER BY and LIMIT, naming the table ``m``."""
        cols = ", ".join(f"m.{c}" for c in MEMORY_COLUMNS)
        return [MemoryRow.from_sql(r) for r in self.query(f"SELECT {cols} FROM memories m {tail}", params)]

    def iter_rows(self, ns: str, tier: int) -> Iterator[MemoryRow]:
        rows = self.query(_SELECT_MEMORY + " WHERE ns = ? AND tier = ? ORDER BY rid", (ns, tier))
        for r in rows:
            yield MemoryRow.from_sql(r)

    def namespaces(self) -> list[str]:
        return [r[0] for r in self.query("SELECT DISTINCT ns FROM memories ORDER BY ns")]

    def due(self, now: float, limit: int) -> list[MemoryRow]:
        """Memories whose due time has come, earliest first (reads the due index)."""
        rows = self.query(_SELECT_MEMORY + " WHERE due_at <= ? ORDER BY due_at LIMIT ?", (now, limit))
        return [MemoryRow.from_sql(r) for r in rows]

    def due_after(self, now: float, after: tuple[float, int], limit: int) -> list[MemoryRow]:
        """Due memories after ``(due_at, rid)`` in (due_at, rid) order: a
        page of the due index for a reader that changes nothing."""
        rows = self.query(
            _SELECT_MEMORY + " WHERE due_at <= ? AND (due_at > ? OR (due_at = ? AND rid > ?))"
            " ORDER BY due_at, rid LIMIT ?",
            (now, after[0], after[0], after[1], limit),
        )
        return [MemoryRow.from_sql(r) for r in rows]

    def count_due(self, now: float) -> int:
        r = self.query_one("SELECT count(*) FROM memories WHERE due_at <= ?", (now,))
        return int(r[0]) if r else 0

    # -- meta ---------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        r = self.query_one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if r is None else r[0]

    def set_meta(self, items: dict[str, str]) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                list(items.items()),
            )

        self.write(fn)

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._writer is not None:
            self._thread.join()
            self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._writer.close()
        with self._readers_lock:
            for conn in self._readers:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._readers.clear()

    @property
    def closed(self) -> bool:
        return self._closed

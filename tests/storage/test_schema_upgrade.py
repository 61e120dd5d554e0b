"""A store written by the code before issue 16 opens and is upgraded in place."""

from __future__ import annotations

import json
import sqlite3

from helpers import DIM, T0, unit

from tierstore import ManualClock, TierStore

DAY = 86400.0

# The memories table of the previous release, column by column (tierstore/storage/catalog.py before issue 16).
OLD_COLUMNS = [
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
]
NEW_POLICY_KEYS = ("dedupe", "supersession")
NEW_TYPE_KEYS = ("supersede_above", "supersede_above_shared_tag")


def make_old_store(path, rng) -> dict[str, bytes]:
    """A store as the previous code left it: written by this code, then taken
    back by hand to the previous schema (no key / content_hash columns, no
    supersessions table, none of their indexes) and the previous policy JSON."""
    clock = ManualClock(T0)
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        store.add("u", "Alice prefers window seats", unit(rng), memory_type="preference", id="seats")
        store.add("u", "Alice lives in Lisbon", unit(rng), id="home")
        store.add("u", "said good morning", unit(rng), memory_type="conversation", id="chat")
        vectors = {i: store.get("u", i).embedding.tobytes() for i in ("seats", "home", "chat")}
        clock.advance(2 * 3600)
        store.sweep()  # the conversation goes cold: its vector leaves the catalog
    conn = sqlite3.connect(path / "catalog.sqlite")
    with conn:
        for index in ("memories_key", "memories_content", "memories_unhashed"):
            conn.execute(f"DROP INDEX {index}")
        conn.execute("DROP TABLE supersessions")
        conn.execute("ALTER TABLE memories DROP COLUMN key")
        conn.execute("ALTER TABLE memories DROP COLUMN content_hash")
        conn.execute("ALTER TABLE memories DROP COLUMN metadata")
        (policy,) = conn.execute("SELECT value FROM meta WHERE key = 'policy'").fetchone()
        old = json.loads(policy)
        for k in NEW_POLICY_KEYS:
            del old[k]
        for t in old["types"].values():
            for k in NEW_TYPE_KEYS:
                del t[k]
        conn.execute("UPDATE meta SET value = ? WHERE key = 'policy'", (json.dumps(old, sort_keys=True),))
    assert [r[1] for r in conn.execute("PRAGMA table_info(memories)")] == OLD_COLUMNS
    conn.close()
    return vectors


def test_a_store_of_the_previous_schema_is_upgraded_at_open(tmp_path, rng):
    path = tmp_path / "s"
    vectors = make_old_store(path, rng)
    clock = ManualClock(T0 + 3 * 3600)
    with TierStore.open(path, clock=clock) as store:
        conn = sqlite3.connect(path / "catalog.sqlite")
        cols = [r[1] for r in conn.execute("PRAGMA table_info(memories)")]
        assert cols == OLD_COLUMNS + ["key", "content_hash", "metadata"]
        indexes = {r[1] for r in conn.execute("PRAGMA index_list(memories)")}
        assert {"memories_key", "memories_content", "memories_unhashed"} <= indexes
        assert conn.execute("SELECT count(*) FROM memories WHERE content_hash IS NULL").fetchone() == (0,)
        conn.close()
        # the old memories are intact, in their tiers
        assert store.get("u", "seats").embedding.tobytes() == vectors["seats"]
        assert store.get("u", "chat").tier == "cold" and store.get("u", "seats").key is None
        # and take part in the new features: dedupe against a memory written before the upgrade ...
        assert store.add("u", "alice prefers window seats.", unit(rng), memory_type="preference") == "seats"
        # ... a cold one included (restored, same id, bit-identical)
        assert store.add("u", "Said good morning", unit(rng), memory_type="conversation") == "chat"
        assert store.get("u", "chat").tier == "hot" and store.get("u", "chat").embedding.tobytes() == vectors["chat"]
        # keys and supersession marks
        new = store.add("u", "Alice moved to Osaka", unit(rng), key="home_city", supersedes=["home"])
        assert store.get("u", "home").superseded_by == new and store.get_by_key("u", "home_city").id == new
        assert store.policy.dedupe == "exact"
    # and it opens again as it is
    with TierStore.open(path, clock=clock) as store:
        assert store.get_by_key("u", "home_city").id == new and store.get("u", "home").superseded_by == new


def test_rows_written_without_a_hash_are_hashed_at_the_next_open(tmp_path, rng):
    """Earlier code writing to an upgraded store (or an interrupted upgrade)
    leaves rows without a content hash: the next open hashes them."""
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)) as store:
        store.add("u", "a note", unit(rng), id="n")
    with sqlite3.connect(path / "catalog.sqlite") as conn:
        conn.execute("UPDATE memories SET content_hash = NULL")
    with TierStore.open(path, clock=ManualClock(T0)) as store:
        assert store.add("u", "A note.", unit(rng)) == "n"


def test_a_read_only_open_of_the_previous_schema_says_how_to_upgrade(tmp_path, rng):
    import pytest

    from tierstore import StoreConfigError

    path = tmp_path / "old"
    make_old_store(path, rng)
    before = (path / "catalog.sqlite").read_bytes()
    with pytest.raises(
        StoreConfigError,
        match=r"earlier tierstore version .*supersessions, memories\.key.*"
        r"open it once for writing",
    ):
        TierStore.open(path, readonly=True)
    assert (path / "catalog.sqlite").read_bytes() == before  # a reader changed nothing
    TierStore.open(path, clock=ManualClock(T0 + 3 * 3600)).close()  # the upgrade the message names
    with TierStore.open(path, readonly=True, clock=ManualClock(T0 + 3 * 3600)) as reader:
        assert reader.get("u", "home").content == "Alice lives in Lisbon"
        assert [h.id for h in reader.search("u", reader.get("u", "home").embedding, k=1)] == ["home"]

"""A memory's free-form metadata: validated, kept exactly through every tier,
the archive, restore and a catalog rebuilt from the objects alone."""

from __future__ import annotations

import math
import sqlite3

import pytest
from helpers import DIM, T0, unit
from hypothesis import given
from hypothesis import strategies as st

from tierstore import ManualClock, TierStore
from tierstore.errors import CorruptDataError, InvalidInputError
from tierstore.tiers.archive import check_record

HOUR, DAY = 3600.0, 86400.0
META = {
    "source_doc": "handbook.pdf",
    "page": 3,
    "score": 0.25,
    "ok": True,
    "none": None,
    "nested": {"a": [1, 2.5, "x", {"b": []}]},
    "unicode": "Zürich 東京",
}


def test_metadata_round_trips_hot_warm_cold_restore(store, clock, rng):
    v = unit(rng)
    a = store.add("m", "a fact with metadata", v, metadata=META)
    b = store.add("m", "a fact without", unit(rng))
    assert store.get("m", a).metadata == META and store.get("m", b).metadata is None
    # a search hit carries it too, and each snapshot gets its own dict
    hit = store.search("m", v, k=1, record_access=False)[0]
    assert hit.id == a and hit.memory.metadata == META
    # read from the hit without building its Memory: the same values (a hot hit parses a fresh dict)
    assert hit.content == "a fact with metadata" and hit.metadata == META and hit.metadata is not hit.metadata
    hit.memory.metadata["page"] = 99
    assert store.get("m", a).metadata == META
    clock.advance(20 * DAY)  # unused facts decay below the demote threshold
    assert store.sweep().demoted == 2
    assert store.get("m", a).tier == "warm" and store.get("m", a).metadata == META
    warm_hit = store.search("m", v, k=1, record_access=False, include_cold=False)[0]
    assert warm_hit.memory.tier == "warm" and warm_hit.memory.metadata == META
    assert (warm_hit.content, warm_hit.metadata) == (warm_hit.memory.content, META)
    clock.advance(20 * DAY)  # past the 30-day TTL: archived
    assert store.sweep().archived == 2
    m = store.get("m", a)
    assert m.tier == "cold" and m.metadata == META
    cold_hit = store.search("m", v, k=1, record_access=False, include_cold=True)[0]
    assert cold_hit.memory.tier == "cold" and cold_hit.memory.metadata == META
    assert (cold_hit.content, cold_hit.metadata) == (cold_hit.memory.content, META)
    assert store.restore("m", ids=[a]) == [a]
    m = store.get("m", a)
    assert m.tier == "hot" and m.metadata == META and store.get("m", b).metadata is None


def test_metadata_survives_reopen_and_hot_compaction(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        ids = store.add_batch(
            "m", [{"content": f"note {i}", "embedding": unit(rng), "metadata": {"i": i}} for i in range(300)]
        )
        for i in ids[:200]:  # past half dead slots: the namespace is compacted
            store.delete("m", i)
        assert [store.get("m", i).metadata for i in ids[200:]] == [{"i": i} for i in range(200, 300)]
    with TierStore.open(path, clock=clock) as store:
        assert [store.get("m", i).metadata for i in ids[200:]] == [{"i": i} for i in range(200, 300)]


def test_rebuilt_catalog_keeps_metadata(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "old", dim=DIM, clock=clock) as store:
        mid = store.add("m", "said hello", unit(rng), memory_type="conversation", metadata=META)
        plain = store.add("m", "said bye", unit(rng), memory_type="conversation")
        clock.advance(2 * HOUR)
        assert store.sweep().archived == 2
    with TierStore.open(
        tmp_path / "new", dim=DIM, clock=clock, cold=str(tmp_path / "old" / "cold"), take_over_cold=True
    ) as fresh:
        assert fresh.rebuild_catalog()["inserted"] == 2
        assert fresh.get("m", mid).metadata == META and fresh.get("m", plain).metadata is None
        fresh.restore("m", ids=[mid])
        assert fresh.get("m", mid).metadata == META


@pytest.mark.parametrize(
    "bad, words",
    [
        ("not a dict", "must be a dict"),
        ([("a", 1)], "must be a dict"),
        ({1: "x"}, "not a string"),
        ({"a": math.nan}, "finite"),
        ({"a": {"b": [math.inf]}}, "metadata['a']['b'][0]"),
        ({"a": {1, 2}}, "set is not JSON"),
        ({"a": b"bytes"}, "bytes is not JSON"),
        ({"a": "\udc80"}, "lone surrogate"),
        ({"a": "x" * 70_000}, "more than the limit"),
    ],
)
def test_bad_metadata_is_refused_and_changes_nothing(store, rng, bad, words):
    with pytest.raises(InvalidInputError, match=None) as info:
        store.add("m", "x", unit(rng), metadata=bad)
    assert words in str(info.value)
    with pytest.raises(InvalidInputError):
        store.add_batch(
            "m",
            [{"content": "ok", "embedding": unit(rng)}, {"content": "bad", "embedding": unit(rng), "metadata": bad}],
        )
    assert store.stats().total == 0


def test_too_deep_metadata_is_refused(store, rng):
    deep: dict = {}
    inner = deep
    for _ in range(40):
        inner["d"] = {}
        inner = inner["d"]
    with pytest.raises(InvalidInputError, match="deeper"):
        store.add("m", "x", unit(rng), metadata=deep)
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(InvalidInputError, match="deeper"):
        store.add("m", "x", unit(rng), metadata=cyclic)
    assert store.stats().total == 0


def test_tuples_read_back_as_lists_and_empty_metadata_stays_empty(store, rng):
    mid = store.add("m", "x", unit(rng), metadata={"t": (1, 2)})
    assert store.get("m", mid).metadata == {"t": [1, 2]}
    empty = store.add("m", "y", unit(rng), metadata={})
    assert store.get("m", empty).metadata == {}


def test_archive_record_metadata_is_checked(rng):
    rec = {
        "ns": "m",
        "id": "x",
        "content": "c",
        "embedding": unit(rng).tobytes(),
        "memory_type": "fact",
        "source": "s",
        "tags": [],
        "created_at": 0.0,
        "last_accessed_at": 0.0,
        "access_count": 0,
        "conf_llm": None,
        "conf_rule": None,
        "conf_feedback": None,
        "confidence": 1.0,
        "t_conf": 0.0,
        "ttl_seconds": None,
        "pinned": False,
        "w_ref": 1.0,
        "t_ref": 0.0,
        "half_life": 1.0,
        "ttl": None,
        "ttl_anchor": 0.0,
        "ctx_mult": 1.0,
        "archived_at": 0.0,
    }
    assert check_record(dict(rec), "t", DIM)  # a record of earlier code, without the field
    assert check_record({**rec, "metadata": '{"a":1}'}, "t", DIM)
    with pytest.raises(CorruptDataError, match="metadata"):
        check_record({**rec, "metadata": 5}, "t", DIM)
    with pytest.raises(CorruptDataError, match="not JSON"):
        check_record({**rec, "metadata": "{oops"}, "t", DIM)


def test_a_store_without_the_metadata_column_gains_it_at_open(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        old = store.add("m", "before", unit(rng))
    conn = sqlite3.connect(path / "catalog.sqlite")
    with conn:
        conn.execute("ALTER TABLE memories DROP COLUMN metadata")
    conn.close()
    with TierStore.open(path, clock=clock) as store:
        assert store.get("m", old).metadata is None
        new = store.add("m", "after", unit(rng), metadata={"k": "v"})
        assert store.get("m", new).metadata == {"k": "v"}


def test_memories_lists_a_namespace_in_order_from_every_tier(store, clock, rng):
    ids = [store.add("m", f"note {i}", unit(rng), metadata={"i": i}) for i in range(3)]
    chat = store.add("m", "chat", unit(rng), memory_type="conversation")
    store.add("other", "elsewhere", unit(rng))
    store.search("m", store.get("m", ids[0]).embedding, k=1, record_access=True)  # an unflushed access
    listed = store.memories("m")
    assert [m.id for m in listed] == [*ids, chat] and [m.metadata for m in listed[:3]] == [{"i": i} for i in range(3)]
    assert listed[0].access_count == 1 and listed[0].embedding is None
    clock.advance(2 * HOUR)
    store.sweep()  # the conversation goes cold
    listed = store.memories("m", with_embedding=True)
    assert [m.tier for m in listed] == ["hot", "hot", "hot", "cold"]
    assert listed[1].embedding is not None and listed[3].embedding is None
    assert store.memories("empty") == []


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=5), _json_values, max_size=5))
def test_load_metadata_reads_back_exactly_what_json_reads(meta):
    """load_metadata (orjson when installed) returns what json.loads returns, types included:
    integers beyond 64 bits stay exact integers, floats the same floats."""
    import json

    from tierstore.rules.validation import check_metadata, load_metadata

    text = check_metadata(meta)
    got, want = load_metadata(text), json.loads(text)
    assert got == want and repr(got) == repr(want)

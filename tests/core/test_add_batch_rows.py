"""What one add_batch writes per item: each item's own lifetime (however many
items of the batch share it), its content hash, and its events in the order
they happened (tierstore.core.ingest: lifetimes computed once per distinct
item shape, create events written together)."""

from __future__ import annotations

import time

import pytest
from helpers import DIM, T0, unit

from tierstore import ManualClock, Policy, TierStore
from tierstore.errors import InvalidInputError
from tierstore.rules.dedupe import content_hash

LIFETIME = "SELECT confidence, conf_rule, half_life, ttl, w_ref, ctx_mult FROM memories WHERE id = ?"


def test_a_mixed_batch_gives_each_item_the_lifetime_it_gets_alone(tmp_path, rng) -> None:
    shapes = [
        {},
        {"memory_type": "preference"},
        {"confidence": 0.3},
        {"source": "inferred"},
        {"tags": ["travel"]},
        {"ttl_seconds": 120.0},
        {"memory_type": "task", "confidence": 0.55, "tags": ["work", "travel"]},
    ]
    items = [dict(s, id=f"b{i}", content=f"memory {i}", embedding=unit(rng)) for i, s in enumerate(shapes * 3)]
    batch = TierStore.open(tmp_path / "batch", dim=DIM, clock=ManualClock(T0))
    alone = TierStore.open(tmp_path / "alone", dim=DIM, clock=ManualClock(T0))
    batch.set_context("ns", ["work"])  # a context multiplier that differs with the tags
    alone.set_context("ns", ["work"])
    batch.add_batch("ns", items)
    for item in items:
        alone.add_batch("ns", [item])
    seen = set()
    for item in items:
        got = batch.engine.catalog.query_one(LIFETIME, (item["id"],))
        want = alone.engine.catalog.query_one(LIFETIME, (item["id"],))
        assert got == want, item
        seen.add(got)
    assert len(seen) >= 6  # the shapes really differ: one shared lifetime would fail above
    batch.close()
    alone.close()


@pytest.mark.parametrize("dedupe", ["exact", "off"])
def test_the_content_hash_is_the_contents_with_or_without_dedupe(tmp_path, rng, dedupe) -> None:
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0), policy=Policy(dedupe=dedupe))
    texts = ["Likes tea.", "likes  TEA", "Moved to Lisbon"]
    store.add_batch("ns", [{"id": f"m{i}", "content": t, "embedding": unit(rng)} for i, t in enumerate(texts)])
    rows = store.engine.catalog.query("SELECT content, content_hash FROM memories ORDER BY rid")
    assert [h for _, h in rows] == [content_hash(c) for c, _ in rows]
    assert len(rows) == (2 if dedupe == "exact" else 3)  # the second text is the first one, normalised
    store.close()


def test_events_follow_the_order_of_the_batch(tmp_path, rng) -> None:
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0))
    store.add_batch(
        "ns",
        [
            {"id": "a", "content": "lives in Oslo", "embedding": unit(rng), "key": "city"},
            {"id": "b", "content": "lives in Rome", "embedding": unit(rng), "key": "city"},  # a's slot: a retired
            {"id": "c", "content": "has a cat", "embedding": unit(rng), "key": "pet"},
            {"id": "d", "content": "has a dog", "embedding": unit(rng), "key": "pet"},
            {"id": "e", "content": "drinks tea", "embedding": unit(rng)},
        ],
    )
    events = store.engine.catalog.query("SELECT kind, id FROM events ORDER BY seq")
    # every creation in the batch's order, committed together; then each retirement, applied after the commit
    assert events == [
        ("create", "a"),
        ("create", "b"),
        ("create", "c"),
        ("create", "d"),
        ("create", "e"),
        ("feedback", "a"),
        ("supersede", "a"),
        ("feedback", "c"),
        ("supersede", "c"),
    ]
    store.close()


def test_a_field_given_as_none_is_checked_and_a_missing_one_defaulted(tmp_path, rng) -> None:
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0))
    for field in ("memory_type", "source", "confidence"):
        with pytest.raises(InvalidInputError, match=field):
            store.add_batch("ns", [{"id": "x", "content": "t", "embedding": unit(rng), field: None}])
    assert store.engine.catalog.query("SELECT count(*) FROM memories") == [(0,)]
    store.add_batch("ns", [{"id": "x", "content": "t", "embedding": unit(rng), "tags": None}])
    row = store.engine.catalog.query_one("SELECT memory_type, source, conf_llm, tags FROM memories")
    assert row == ("fact", "user_declaration", 0.8, "[]")
    store.close()


def test_a_replacing_batch_logs_each_version_as_it_happened(tmp_path, rng) -> None:
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0))
    store.add_batch("ns", [{"id": i, "content": f"old {i}", "embedding": unit(rng)} for i in ("x", "z")])
    store.upsert_batch("ns", [{"id": i, "content": f"new {i}", "embedding": unit(rng)} for i in ("x", "y", "z")])
    events = store.engine.catalog.query("SELECT kind, id FROM events WHERE seq > 2 ORDER BY seq")
    assert events == [("delete", "x"), ("create", "x"), ("create", "y"), ("delete", "z"), ("create", "z")]
    store.close()


def test_ids_made_for_items_without_one_are_unique_and_ordered_by_creation(tmp_path, rng) -> None:
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0))
    first = store.add_batch("ns", [{"content": f"m {i}", "embedding": unit(rng)} for i in range(500)])
    time.sleep(0.003)  # a later millisecond
    second = store.add_batch("ns", [{"content": f"n {i}", "embedding": unit(rng)} for i in range(500)])
    ids = first + second
    assert len(set(ids)) == 1000
    assert all(len(i) == 32 and int(i, 16) >= 0 and i == i.lower() for i in ids)
    assert max(first) < min(second)  # the catalog's (ns, id) index grows at its end
    assert sorted(store.engine.catalog.query("SELECT id FROM memories")) == sorted((i,) for i in ids)
    store.close()

"""Re-adding the same content reinforces the existing memory (policy ``dedupe``, issue 16)."""

from __future__ import annotations

import sqlite3

import pytest
from helpers import DIM, T0, unit

from tierstore import DuplicateIdError, ManualClock, Policy, TierStore
from tierstore.rules.dedupe import content_hash, hashes_present, normalise

DAY = 86400.0


def count(store, ns="u") -> int:
    return store.engine.catalog.query("SELECT count(*) FROM memories WHERE ns = ?", (ns,))[0][0]


def test_normalisation():
    assert normalise("  Prefers   WINDOW seats on flights. ") == "prefers window seats on flights"
    assert normalise("Ｍorning!") == normalise("morning") == "morning"  # NFKC: full-width letters
    assert normalise("Straße?!") == normalise("STRASSE")  # case folding
    assert normalise("a.b") == "a.b" and normalise("a b") != normalise("ab")
    assert content_hash("Hello  world.") == content_hash("hello world") != content_hash("hello world again")
    assert -(2**63) <= content_hash("x") < 2**63


def test_re_adding_the_same_content_reinforces_and_returns_the_existing_id(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        first = store.add("u", "Alice prefers window seats", unit(rng), memory_type="preference", id="seats")
        clock.advance(2 * DAY)
        before = store.get("u", first)
        again = store.add("u", "alice prefers  window seats.", unit(rng), memory_type="preference", id="seats-2")
        after = store.get("u", first)
        assert again == first and count(store) == 1 and store.get("u", "seats-2") is None
        assert after.weight > before.weight and after.confidence > before.confidence
        assert after.expires_at == pytest.approx(clock.now() + (before.expires_at - before.created_at))
        assert after.embedding.tobytes() == before.embedding.tobytes()  # the existing memory keeps its vector
        kinds = [
            k for (k,) in store.engine.catalog.query("SELECT kind FROM events WHERE id = ? ORDER BY seq", (first,))
        ]
        assert kinds == ["create", "feedback", "reinforce"]
        # not duplicates: another type, another key, another namespace, other words
        store.add("u", "Alice prefers window seats", unit(rng), memory_type="fact")
        store.add("u", "Alice prefers window seats", unit(rng), memory_type="preference", key="seats")
        store.add("v", "Alice prefers window seats", unit(rng), memory_type="preference")
        store.add("u", "Alice prefers aisle seats", unit(rng), memory_type="preference")
        assert count(store) == 4 and count(store, "v") == 1


def test_a_surer_re_add_makes_the_memory_surer(tmp_path, rng):
    """The assistant guessed it; now the user says it: the memory's confidence
    signals become the user's, which lengthens its TTL, and this survives a restart."""
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        mid = store.add(
            "u", "prefers window seats", unit(rng), memory_type="preference", source="ai_guess", confidence=0.4
        )
        guess = store.get("u", mid)
        assert (
            store.add(
                "u",
                "prefers window seats",
                unit(rng),
                memory_type="preference",
                source="user_declaration",
                confidence=0.95,
            )
            == mid
        )
        sure = store.get("u", mid)
        assert sure.confidence > 0.85 > guess.confidence + 0.3
        assert sure.expires_at - clock.now() > 1.3 * (guess.expires_at - guess.created_at)
        # a less sure re-add lowers nothing
        store.add("u", "prefers window seats", unit(rng), memory_type="preference", source="ai_guess", confidence=0.3)
        assert store.get("u", mid).confidence >= sure.confidence
    with TierStore.open(tmp_path / "s", clock=clock) as store:
        assert store.get("u", mid).confidence >= sure.confidence
        assert store.engine.catalog.query("SELECT conf_llm, conf_rule FROM memories") == [(0.95, 0.95)]


def test_a_retried_add_with_its_id_is_idempotent(tmp_path, rng):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        v = unit(rng)
        assert store.add("u", "note", v, id="n1") == "n1"
        assert store.add("u", "note", v, id="n1") == "n1" and count(store) == 1
        with pytest.raises(DuplicateIdError):  # the same id for other content is still an error
            store.add("u", "another note", v, id="n1")


def test_duplicates_within_a_batch_and_after_supersession(tmp_path, rng):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        ids = store.add_batch(
            "u",
            [
                {"content": "Good morning!", "embedding": unit(rng), "memory_type": "conversation"},
                {"content": "good morning", "embedding": unit(rng), "memory_type": "conversation"},
                {"content": "Lives in Lisbon", "embedding": unit(rng), "key": "home"},
            ],
        )
        assert ids[0] == ids[1] and count(store) == 2
        store.add("u", "Lives in Osaka", unit(rng), key="home")
        back = store.add("u", "Lives in Lisbon", unit(rng), key="home")  # moved back: a new statement
        assert back != ids[2] and store.get_by_key("u", "home").id == back
        assert store.get("u", ids[2]).superseded_by is not None  # the superseded one stays superseded


def test_an_archived_duplicate_is_restored_and_reinforced(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        mid = store.add("u", "passport number ends in 42", unit(rng), memory_type="task")
        clock.advance(10 * DAY)
        store.sweep()
        assert store.get("u", mid).tier == "cold"
        assert store.add("u", "Passport number ends in 42.", unit(rng), memory_type="task") == mid
        m = store.get("u", mid)
        assert m.tier == "hot" and m.due_at > clock.now() and count(store) == 1
        assert store.search("u", m.embedding, k=1, record_access=False)[0].id == mid


def test_dedupe_off_stores_every_copy(tmp_path, rng):
    policy = Policy.from_dict({"dedupe": "off"})
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0), policy=policy) as store:
        a = store.add("u", "same words", unit(rng))
        b = store.add("u", "same words", unit(rng))
        assert a != b and count(store) == 2


def test_hashes_present_finds_exactly_the_stored_hashes_at_the_int64_edges(tmp_path):
    conn = sqlite3.connect(tmp_path / "h.sqlite")
    conn.execute("CREATE TABLE memories (ns TEXT, content_hash INTEGER)")
    edges = [-(2**63), 2**63 - 1, 0, -1, 1, 2**53 + 1]  # 2**53 + 1: not exact as a double
    conn.executemany("INSERT INTO memories VALUES ('a', ?)", [(h,) for h in edges])
    conn.execute("INSERT INTO memories VALUES ('b', 7)")
    asked = [*edges, 2**53, 7, 8]
    assert hashes_present(conn, "a", asked) == set(edges)
    assert hashes_present(conn, "b", asked) == {7}
    assert hashes_present(conn, "a", []) == set()
    many = list(range(12_000))  # more than one query's chunk
    assert hashes_present(conn, "a", many) == {0, 1}

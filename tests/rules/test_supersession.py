"""Slots (add(key=...)), automatic supersession and its reversal (issue 16)."""

from __future__ import annotations

import pytest
from helpers import DIM, SUPPORT, T0, near, unit

from tierstore import InvalidInputError, InvalidKeyError, ManualClock, Policy, TierStore

DAY = 86400.0
BAR = 0.9  # the fact bar of the policy these tests use (the default's is set by measurement, docs/benchmarks.md)


def open_store(tmp_path, clock=None, **policy) -> TierStore:
    data = {"types": {"fact": {"supersede_above": BAR}, "preference": {"supersede_above": BAR}}}
    for k, v in policy.items():
        data[k] = v
    return TierStore.open(tmp_path / "s", dim=DIM, clock=clock or ManualClock(T0), policy=Policy.from_dict(data))


def mark_of(store, ns, mid):
    return store.engine.catalog.query(
        "SELECT s.by_id, s.kind FROM supersessions s JOIN memories m ON m.rid = s.rid WHERE m.ns = ? AND m.id = ?",
        (ns, mid),
    )


def count(store) -> int:
    return store.engine.catalog.query("SELECT count(*) FROM memories")[0][0]


# ---------------------------------------------------------------- keys


def test_a_key_supersedes_its_live_memory_exactly_as_supersedes_does(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path / "k", clock) as by_key, open_store(tmp_path / "e", clock) as explicit:
        v, w = unit(rng), unit(rng)  # unrelated vectors: only the key links the two statements
        a = by_key.add("u", "Alice lives in Lisbon", v, key="home_city", id="h1")
        explicit.add("u", "Alice lives in Lisbon", v, id="h1")
        clock.advance(3600)
        b = by_key.add("u", "Alice moved to Osaka", w, key="home_city", id="h2")
        explicit.add("u", "Alice moved to Osaka", w, id="h2", supersedes=["h1"])
        old_k, old_e = by_key.get("u", a), explicit.get("u", "h1")
        # the same damping: confidence, weight, TTL 0, due now
        for field in ("confidence", "weight", "ttl_seconds", "expires_at", "due_at", "tier"):
            assert getattr(old_k, field) == pytest.approx(getattr(old_e, field)), field
        assert old_k.ttl_seconds == 0 and old_k.due_at <= clock.now()
        assert old_k.superseded_by == b == explicit.get("u", "h1").superseded_by
        assert by_key.get_by_key("u", "home_city").id == b and by_key.get("u", b).key == "home_city"
        assert by_key.get("u", b).superseded_by is None and old_k.key == "home_city"
        assert mark_of(by_key, "u", a) == [(b, "key")] and mark_of(explicit, "u", "h1") == [("h2", "explicit")]
        reasons = by_key.engine.catalog.query("SELECT reason FROM events WHERE kind = 'supersede'")
        assert reasons == [("by h2 (key home_city)",)]
        by_key.sweep()
        assert by_key.get("u", a).tier == "cold" and by_key.get_by_key("u", "home_city").tier == "hot"


def test_keys_in_a_batch_take_effect_in_order_and_per_namespace(tmp_path, rng):
    with open_store(tmp_path) as store:
        ids = store.add_batch("u", [{"content": f"value {i}", "embedding": unit(rng), "key": "k"} for i in range(3)])
        assert [store.get("u", i).superseded_by for i in ids] == [ids[1], ids[2], None]
        assert store.get_by_key("u", "k").id == ids[2]
        assert store.get_by_key("other", "k") is None  # a slot belongs to its namespace
        other = store.add("other", "value 0", unit(rng), key="k")
        assert store.get_by_key("other", "k").id == other and store.get_by_key("u", "k").id == ids[2]
        assert store.get_by_key("u", "never-used") is None
        assert store.delete("u", ids[2])  # the slot's memory is gone: the slot is empty, not reverted
        assert store.get_by_key("u", "k") is None
        again = store.add("u", "value 3", unit(rng), key="k")
        assert store.get_by_key("u", "k").id == again


def test_a_keys_live_memory_is_superseded_in_any_tier(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path, clock) as store:
        warm = store.add("u", "in warm", unit(rng), key="w", memory_type="preference")
        cold = store.add("u", "in cold", unit(rng), key="c", memory_type="conversation")
        clock.advance(5 * DAY)  # preference weight below demote; the conversation expired long ago
        store.sweep()
        assert (store.get("u", warm).tier, store.get("u", cold).tier) == ("warm", "cold")
        w2 = store.add("u", "new w", unit(rng), key="w", memory_type="preference")
        c2 = store.add("u", "new c", unit(rng), key="c", memory_type="conversation")
        assert store.get("u", warm).superseded_by == w2 and store.get("u", cold).superseded_by == c2
        assert store.get("u", warm).ttl_seconds == 0 and store.get("u", cold).ttl_seconds == 0
        assert store.get_by_key("u", "w").id == w2 and store.get_by_key("u", "c").id == c2


@pytest.mark.parametrize(
    "bad", [5, b"home", ["home"], "", "x" * 129, "home city", "home\n", "a\x00b", "tab\there", "new/line\r"]
)
def test_bad_keys_are_refused_and_change_nothing(tmp_path, rng, bad):
    with open_store(tmp_path) as store:
        live = store.add("u", "kept", unit(rng), key="home")
        before = count(store)
        with pytest.raises(InvalidKeyError) as exc:
            store.add("u", "new", unit(rng), key=bad)
        assert "key" in str(exc.value)
        with pytest.raises(InvalidKeyError):
            store.add_batch(
                "u",
                [
                    {"content": "fine", "embedding": unit(rng), "key": "ok"},
                    {"content": "bad", "embedding": unit(rng), "key": bad},
                ],
            )
        if bad is not None and not isinstance(bad, (bytes, list, int)):
            with pytest.raises(InvalidKeyError):
                store.get_by_key("u", bad)
        assert count(store) == before and store.get_by_key("u", "home").id == live
        assert store.get_by_key("u", "ok") is None


def test_keys_may_use_any_script_and_separators(tmp_path, rng):
    with open_store(tmp_path) as store:
        for key in ("住所", "project:sparrow/deadline", "user.email@work", "a-b+c#1", "x" * 128):
            mid = store.add("u", f"value of {key}", unit(rng), key=key)
            assert store.get_by_key("u", key).id == mid


def test_a_key_and_supersedes_that_disagree_are_an_error_and_change_nothing(tmp_path, rng):
    with open_store(tmp_path) as store:
        home = store.add("u", "Lisbon", unit(rng), key="home", id="home-1")
        job = store.add("u", "nurse", unit(rng), key="job", id="job-1")
        loose = store.add("u", "a note", unit(rng), id="note")
        before = count(store)
        with pytest.raises(InvalidInputError, match="disagree.*'job'"):  # names another slot's memory
            store.add("u", "Osaka", unit(rng), key="home", supersedes=[job])
        with pytest.raises(InvalidInputError, match="disagree.*'home-1'"):  # misses the slot's live memory
            store.add("u", "Osaka", unit(rng), key="home", supersedes=[loose])
        with pytest.raises(InvalidInputError, match="item 1: key 'home'"):  # in a batch: all or nothing
            store.add_batch(
                "u",
                [
                    {"content": "ok", "embedding": unit(rng), "key": "other"},
                    {"content": "Osaka", "embedding": unit(rng), "key": "home", "supersedes": [job]},
                ],
            )
        assert count(store) == before and not store.engine.catalog.query("SELECT * FROM supersessions")
        assert store.get("u", home).due_at > store.now() and store.get_by_key("u", "other") is None
        # agreeing: the slot's live memory, and an unkeyed one besides
        new = store.add("u", "Osaka", unit(rng), key="home", supersedes=[home, loose])
        assert store.get("u", home).superseded_by == new and store.get("u", loose).superseded_by == new
        assert mark_of(store, "u", home) == [(new, "key")] and mark_of(store, "u", loose) == [(new, "explicit")]
        # without a key, supersedes may retire a slot's memory: the slot is then empty
        store.add("u", "unemployed", unit(rng), supersedes=[job])
        assert store.get_by_key("u", "job") is None


# ---------------------------------------------------------------- automatic supersession


def test_a_very_similar_memory_of_the_same_type_supersedes_softly(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path, clock) as store:
        v = unit(rng)
        old = store.add("u", "Alice likes green tea", v, memory_type="fact", id="tea")
        keep = store.add("u", "Alice likes jazz", near(rng, v, BAR - 0.02), memory_type="fact", id="jazz")
        clock.advance(DAY)
        before = store.get("u", old)
        new = store.add("u", "Alice likes black tea now", near(rng, v, BAR + 0.02), memory_type="fact", id="black")
        after = store.get("u", old)
        assert after.superseded_by == new and store.get("u", keep).superseded_by is None
        # softly: an implicit negative feedback (confidence barely moves), then due at once
        drop = before.confidence - after.confidence
        assert 0 < drop < 0.02 and after.weight == pytest.approx(before.weight * 0.5)
        assert after.ttl_seconds == 0 and after.due_at <= clock.now()
        hits = store.search("u", v, k=3, explain=True, record_access=False)
        expl = {h.id: h.explain for h in hits}
        assert expl[old].superseded_by == new and expl[old].supersession.startswith("auto, similarity 0.9")
        assert expl[new].superseded_by is None and "superseded_by=black" in str(expl[old])
        reason = store.engine.catalog.query("SELECT reason FROM events WHERE kind = 'supersede'")[0][0]
        assert reason.startswith("by black (auto, similarity 0.92")
        report = store.sweep()
        assert report.archived == 1 and report.deleted == 0 and store.get("u", old).tier == "cold"


def test_automatic_supersession_stays_within_its_type_and_is_off_for_conversation(tmp_path, rng):
    assert Policy.default().types["conversation"].supersede_above is None
    with open_store(tmp_path) as store:
        v = unit(rng)
        chat = store.add("u", "said good morning", v, memory_type="conversation")
        pref = store.add("u", "prefers mornings", v, memory_type="preference")
        store.add("u", "said good morning again", v, memory_type="conversation")
        store.add("u", "is a morning person", v, memory_type="fact")
        assert store.get("u", chat).superseded_by is None and store.get("u", pref).superseded_by is None


def test_tags_veto_and_a_shared_tag_can_lower_the_bar(tmp_path, rng):
    policy = {"types": {"fact": {"supersede_above": BAR, "supersede_above_shared_tag": 0.7}}}
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0), policy=Policy.from_dict(policy)) as store:
        v = unit(rng)
        drink = store.add("u", "drinks tea", v, tags=["drink"])
        store.add("u", "likes Thai food", near(rng, v, 0.99), tags=["food"])  # different topics: vetoed
        assert store.get("u", drink).superseded_by is None
        by_tag = store.add("u", "drinks coffee now", near(rng, v, 0.75), tags=["drink", "morning"])
        assert store.get("u", drink).superseded_by == by_tag  # shared tag: 0.75 >= 0.7
        untagged = store.add("u", "plays chess", v)
        store.add("u", "plays go", near(rng, v, 0.75))  # no tags: the plain bar applies
        assert store.get("u", untagged).superseded_by is None
        half = store.add("u", "reads novels", v, tags=["books"])
        by_untagged = store.add("u", "reads novels on trains", near(rng, v, 0.95))  # one side untagged: no veto
        assert store.get("u", half).superseded_by == by_untagged


def test_a_guess_never_retires_a_statement_and_pinned_or_keyed_memories_stay(tmp_path, rng):
    with open_store(tmp_path) as store:
        v = unit(rng)
        said = store.add("u", "lives in Lisbon", v, source="user_declaration", confidence=0.95)
        guess = store.add("u", "may live in Porto", near(rng, v, 0.97), source="ai_guess", confidence=0.4)
        assert store.get("u", said).superseded_by is None
        # the other way round is fine: a statement retires a guess
        w = unit(rng)
        g2 = store.add("u", "might like jazz", w, source="ai_guess", confidence=0.4)
        s2 = store.add("u", "likes jazz", near(rng, w, 0.97), source="user_declaration", confidence=0.95)
        assert store.get("u", g2).superseded_by == s2 and store.get("u", guess).superseded_by is None
        x = unit(rng)
        pinned = store.add("u", "emergency contact: Ana", x, pinned=True)
        keyed = store.add("u", "home: Lisbon", near(rng, x, 0.99), key="home")
        store.add("u", "emergency contact: Sam", near(rng, x, 0.98))
        assert store.get("u", pinned).superseded_by is None and store.get("u", keyed).superseded_by is None


def test_candidates_in_warm_and_in_the_same_batch(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path, clock) as store:
        v = unit(rng)
        old = store.add("u", "prefers aisle seats", v, memory_type="preference")
        clock.advance(5 * DAY)
        store.sweep()
        assert store.get("u", old).tier == "warm"
        new = store.add("u", "prefers window seats", near(rng, v, 0.95), memory_type="preference")
        assert store.get("u", old).superseded_by == new
        w = unit(rng)
        a, b = store.add_batch(
            "u", [{"content": "first", "embedding": w}, {"content": "second", "embedding": near(rng, w, 0.95)}]
        )
        assert store.get("u", a).superseded_by == b and store.get("u", b).superseded_by is None


def test_explicit_positive_feedback_takes_an_automatic_supersession_back(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path, clock) as store:
        v = unit(rng)
        old = store.add("u", "works at Acme", v, ttl_seconds=40 * DAY)
        new = store.add("u", "works at Acme labs", near(rng, v, 0.95))
        assert store.get("u", old).superseded_by == new
        store.feedback("u", old, positive=True, implicit=True)  # implicit: not enough to take it back
        assert store.get("u", old).superseded_by == new
        clock.advance(DAY)
        store.sweep()
        assert store.get("u", old).tier == "cold"
        back = store.feedback("u", old, positive=True)
        assert back.superseded_by is None and back.tier == "hot" and back.ttl_seconds == 40 * DAY
        assert back.due_at > clock.now() and store.get("u", new).superseded_by is None  # both live now
        kinds = [k for (k,) in store.engine.catalog.query("SELECT kind FROM events WHERE id = ? ORDER BY seq", (old,))]
        assert kinds[-3:] == ["feedback", "unsupersede", "restore"]
        assert store.sweep().archived == 0 and store.get("u", old).tier == "hot"


def test_feedback_does_not_undo_explicit_or_key_supersession(tmp_path, rng):
    with open_store(tmp_path) as store:
        a = store.add("u", "v1", unit(rng), key="k")
        store.add("u", "v2", unit(rng), key="k")
        b = store.add("u", "old plan", unit(rng))
        store.add("u", "new plan", unit(rng), supersedes=[b])
        for mid in (a, b):
            m = store.feedback("u", mid, positive=True)
            assert m.superseded_by is not None and m.ttl_seconds == 0


@pytest.mark.slow
def test_a_crash_between_the_commit_and_the_damping_is_finished_at_open(tmp_path, rng):
    """The add commits the new memory and its mark in one transaction; the
    damping follows. A SIGKILL in between leaves a marked memory with its old
    TTL: the next open gives it the TTL of 0 the damping would have."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)) as store:
        store.add("crash", "the slot's first value", unit(rng), id="first", key="slot")
    child = SUPPORT / "crash_child.py"
    env = {**__import__("os").environ, "TIERSTORE_CRASH_AT": "add.after_commit"}
    proc = subprocess.run(
        [sys.executable, str(child), str(path), "add-key", repr(T0 + 60)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 120)) as store:
        first = store.get("crash", "first")
        assert first.superseded_by == "late" and store.get_by_key("crash", "slot").id == "late"
        assert first.ttl_seconds == 0 and first.due_at <= T0 + 120
        assert store.engine.catalog.query("SELECT reason FROM events WHERE id = 'first' AND kind = 'supersede'") == [
            ("damping finished at open",)
        ]
        assert store.sweep().archived == 1


def test_candidates_are_found_through_the_hnsw_index_too(tmp_path, rng):
    """Past the exact-search threshold a namespace has an hnswlib index: the
    nearest memories come from it."""
    from tierstore import HotSettings, Settings

    policy = Policy.from_dict({"types": {"fact": {"supersede_above": BAR}}})
    settings = Settings(hot=HotSettings(exact_threshold=16))
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0), policy=policy, settings=settings) as store:
        ids = store.add_batch("u", [{"content": f"fact {i}", "embedding": unit(rng)} for i in range(40)])
        assert store.engine.hot.ensure("u").index is not None
        target = store.get("u", ids[7]).embedding
        new = store.add("u", "fact 7, restated", near(rng, target, 0.96))
        marked = [i for i in ids if store.get("u", i).superseded_by is not None]
        assert marked == [ids[7]] and store.get("u", ids[7]).superseded_by == new

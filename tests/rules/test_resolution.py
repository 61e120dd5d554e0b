"""Issue 27: a supersession mark ranks at once, query-time resolution puts the
newer of two statements first and retires nothing, older stores keep their
behaviour, and the new policy keys are validated."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import DIM, T0, near, unit

from tierstore import ManualClock, Policy, PolicyError, TierStore

DAY = 86400.0


def open_store(path, clock, policy: dict | None = None) -> TierStore:
    return TierStore.open(path, dim=DIM, clock=clock, policy=Policy.from_dict(policy) if policy else None)


@pytest.mark.parametrize("how", ["supersedes", "key", "auto"])
def test_a_mark_ranks_the_superseded_memory_after_its_successor_at_once(tmp_path, rng, how):
    """Before any sweep, whatever made the mark: the old statement matches the
    query better, yet comes after the one that replaced it, demoted by the
    policy's factor (its explanation says so); in every search path."""
    clock = ManualClock(T0)
    pol = {"types": {"fact": {"supersede_above": 0.5}}} if how == "auto" else None
    with open_store(tmp_path / "s", clock, pol) as store:
        q = unit(rng)
        old_vec = near(rng, q, 0.95)
        old = store.add(
            "u", "Frank lives in Madrid", old_vec, memory_type="fact", **({"key": "home"} if how == "key" else {})
        )
        clock.advance(DAY)
        new_vec = near(rng, q, 0.80)
        if how == "auto":  # similar to the old one, above the bar
            new_vec = 0.7 * old_vec + 0.3 * new_vec
            new_vec = (new_vec / np.linalg.norm(new_vec)).astype(np.float32)
        kw = {"supersedes": [old]} if how == "supersedes" else {"key": "home"} if how == "key" else {}
        new = store.add("u", "Frank lives in Paris", new_vec, memory_type="fact", **kw)
        assert store.get("u", old).superseded_by == new
        for include_cold in (False, True):  # the hot kernel's path, and the merged one
            hits = store.search("u", q, k=5, explain=True, include_cold=include_cold)
            ids = [h.id for h in hits]
            assert ids.index(new) < ids.index(old), (include_cold, ids)
            e = hits[ids.index(old)].explain
            assert e.superseded_by == new and e.superseded_factor == 0.5
        # archived by the next sweep, it stays a hit (true history), after the new value
        clock.advance(DAY)
        store.sweep()
        assert store.get("u", old).tier == "cold"
        ids = [h.id for h in store.search("u", q, k=5, include_cold=True)]
        assert new in ids and old in ids and ids.index(new) < ids.index(old)


def test_a_superseded_memory_that_ranks_below_its_successor_stays_where_it_is(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock) as store:
        q = unit(rng)
        old = store.add("u", "old", near(rng, q, 0.5))
        clock.advance(DAY)
        new = store.add("u", "new", near(rng, q, 0.9), supersedes=[old])
        other = store.add("u", "other", near(rng, q, 0.7))
        assert [h.id for h in store.search("u", q, k=3)] == [new, other, old]


def test_resolution_puts_the_newer_statement_first_and_retires_nothing(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock) as store:
        q = unit(rng)
        old = store.add("u", "Frank works at Acme", near(rng, q, 0.84), memory_type="fact")
        clock.advance(2 * 3600)  # beyond the gap (1 h), close enough that the older still scores higher
        new = store.add("u", "Frank works at Globex", near(rng, q, 0.80), memory_type="fact")
        for include_cold in (False, True):
            hits = store.search("u", q, k=5, explain=True, include_cold=include_cold)
            assert [h.id for h in hits] == [new, old], include_cold
            assert hits[0].score < hits[1].score  # placed first by resolution, not by its score
            assert old in hits[0].explain.resolution and new in hits[1].explain.resolution
            assert "ranked after" in hits[1].explain.resolution
        assert store.get("u", old).superseded_by is None and store.get("u", new).superseded_by is None
        # outside the margin (0.1), the better match keeps its place
        far = store.add("u", "Frank worked at Initech", near(rng, q, 0.6), memory_type="fact")
        assert [h.id for h in store.search("u", q, k=5)][-1] == far


def test_several_true_values_all_stay_hits(tmp_path, rng):
    """A second allergy is another value, not a replacement: nothing is marked
    by default, and both stay in the top 5 (whatever their order)."""
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock) as store:
        q = unit(rng)
        base = near(rng, q, 0.85)
        peanuts = store.add("u", "Frank is allergic to peanuts", base, memory_type="fact")
        clock.advance(40 * DAY)
        second = (0.9 * base + 0.1 * unit(rng)).astype(np.float32)  # cosine with the first above the former bar
        shellfish = store.add(
            "u", "Frank is allergic to shellfish", second / np.linalg.norm(second), memory_type="fact"
        )
        for _ in range(3):
            clock.advance(DAY)
            store.sweep()
        ids = [h.id for h in store.search("u", q, k=5)]
        assert {peanuts, shellfish} <= set(ids)
        assert store.get("u", peanuts).superseded_by is None and store.get("u", shellfish).superseded_by is None


def test_statements_within_the_gap_and_guesses_are_not_resolved(tmp_path, rng):
    clock = ManualClock(T0)
    with open_store(tmp_path / "s", clock) as store:
        q = unit(rng)
        first = store.add("u", "birthday", near(rng, q, 0.84), memory_type="fact")
        clock.advance(600)  # the same session: another thing said, not a correction
        second = store.add("u", "job", near(rng, q, 0.80), memory_type="fact")
        assert [h.id for h in store.search("u", q, k=5)] == [first, second]
        # a guess made later is not taken as the new value of a stated fact
        stated = store.add("v", "stated", near(rng, q, 0.84), memory_type="fact", confidence=0.95)
        clock.advance(2 * 3600)
        guess = store.add("v", "a guess", near(rng, q, 0.83), memory_type="fact", confidence=0.4)
        assert [h.id for h in store.search("v", q, k=5)] == [stated, guess]
        sure = store.add("w", "stated", near(rng, q, 0.84), memory_type="fact", confidence=0.95)
        clock.advance(2 * 3600)
        later = store.add("w", "stated again", near(rng, q, 0.83), memory_type="fact", confidence=0.95)
        assert [h.id for h in store.search("w", q, k=5)] == [later, sure]  # the same case, stated: resolved


def test_resolution_off_and_the_factor_one_are_the_behaviour_before(tmp_path, rng):
    clock = ManualClock(T0)
    before = {"supersession": {"resolve_margin": None, "resolve_margin_shared_tag": None, "superseded_factor": 1.0}}
    with open_store(tmp_path / "s", clock, before) as store:
        q = unit(rng)
        old = store.add("u", "old", near(rng, q, 0.84))
        clock.advance(2 * 3600)
        new = store.add("u", "new", near(rng, q, 0.80))
        assert [h.id for h in store.search("u", q, k=5)] == [old, new]


def test_a_store_opened_with_a_policy_stored_before_keeps_its_behaviour(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    former = {"types": {t: {"supersede_above": 0.7, "supersede_above_shared_tag": 0.6} for t in ("fact", "preference")}}
    with open_store(path, clock, former) as store:
        store.add("u", "x", unit(rng))
        stored = json.loads(store.engine.catalog.get_meta("policy"))
        for k in ("superseded_factor", "resolve_margin", "resolve_margin_shared_tag", "resolve_min_gap"):
            del stored["supersession"][k]  # as a store written before issue 27 recorded it
        store.engine.catalog.set_meta({"policy": json.dumps(stored)})
    with TierStore.open(path, clock=clock) as store:
        sup = store.policy.supersession
        assert sup.resolve_margin is None and sup.resolve_margin_shared_tag is None and sup.superseded_factor == 1.0
        assert store.policy.types["fact"].supersede_above == 0.7
    # a new store, or the user opting in, gets the new default
    with TierStore.open(tmp_path / "new", dim=DIM, clock=clock) as store:
        assert store.policy.supersession.resolve_margin == 0.1 and store.policy.types["fact"].supersede_above is None


@pytest.mark.parametrize(
    "bad",
    [
        {"superseded_factor": 0},
        {"superseded_factor": 1.5},
        {"superseded_factor": "half"},
        {"superseded_factor": True},
        {"resolve_margin": -0.1},
        {"resolve_margin": 2},
        {"resolve_margin": True},
        {"resolve_margin": "0.1"},
        {"resolve_margin": 0.3, "resolve_margin_shared_tag": 0.2},
        {"resolve_min_gap": -1},
        {"resolve_min_gap": "soon"},
        {"resolve_min_gap": float("inf")},
        {"resolve": 1},
    ],
)
def test_bad_supersession_keys_are_refused_by_name(bad):
    with pytest.raises(PolicyError, match="supersession"):
        Policy.from_dict({"supersession": bad})


def test_supersession_keys_read_as_documented():
    p = Policy.from_dict(
        {"supersession": {"resolve_margin": False, "resolve_min_gap": "2h", "superseded_factor": 0.25}}
    )
    assert p.supersession.resolve_margin is None and p.supersession.resolve_min_gap == 7200.0
    assert p.supersession.superseded_factor == 0.25
    assert Policy.from_dict(p.to_dict()) == p  # a round trip keeps every key
    assert Policy.from_dict({"supersession": {"resolve_min_gap": 0}}).supersession.resolve_min_gap == 0.0


def test_content_words_and_same_wording():
    from tierstore.rules.resolution import content_words, same_wording

    assert content_words("Frank's sister lives in Madrid.") == {"frank", "sister", "lives", "madrid"}
    job_a, job_b = content_words("Frank works at Acme"), content_words("Frank now works at Globex")
    assert same_wording(job_a, job_b)  # subject and relation shared, the value differs
    assert not same_wording(job_a, content_words("Frank was born on May 3"))  # the subject alone
    assert not same_wording(content_words("the"), content_words("a the"))  # nothing with content


def test_the_same_wording_margin_resolves_further_apart_only_for_alike_statements(tmp_path, rng):
    clock = ManualClock(T0)
    pol = {"supersession": {"resolve_margin_same_wording": 0.3}}
    with open_store(tmp_path / "s", clock, pol) as store:
        q = unit(rng)
        old = store.add("u", "Frank works at Acme", near(rng, q, 0.9), memory_type="fact")
        other = store.add("u", "Frank was born in May", near(rng, q, 0.88), memory_type="fact")
        clock.advance(2 * 3600)
        new = store.add("u", "Frank works at Globex", near(rng, q, 0.7), memory_type="fact")
        born = store.add("u", "Frank likes his birthday cake", near(rng, q, 0.69), memory_type="fact")
        for include_cold in (False, True):
            hits = store.search("u", q, k=4, include_cold=include_cold, explain=True)
            ids = [h.id for h in hits]
            assert ids.index(new) < ids.index(old), include_cold  # 0.2 apart, same wording: resolved
            assert ids.index(other) < ids.index(born), include_cold  # unlike wording: left by score
            assert old in hits[ids.index(new)].explain.resolution
    with open_store(tmp_path / "t", clock) as store:  # off by default: 0.2 apart is beyond the margin
        q = unit(rng)
        old = store.add("u", "Frank works at Acme", near(rng, q, 0.9), memory_type="fact")
        clock.advance(2 * 3600)
        new = store.add("u", "Frank works at Globex", near(rng, q, 0.7), memory_type="fact")
        assert [h.id for h in store.search("u", q, k=2)] == [old, new]

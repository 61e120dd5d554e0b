"""Issue 27: a fact is ranked by how well it answers, not by how recently it
was used (``types.<t>.ranked_by_use``); its lifetime is unchanged, other
types still rank by use, and a store recorded before the key keeps ranking
every type by use."""

from __future__ import annotations

import json

import pytest
from helpers import DIM, T0, near, unit

from tierstore import ManualClock, Policy, PolicyError, TierStore

DAY = 86400.0


def test_defaults_and_parsing():
    p = Policy()
    assert p.types["fact"].ranked_by_use is False
    assert all(t.ranked_by_use for n, t in p.types.items() if n != "fact")
    q = Policy.from_dict({"types": {"preference": {"ranked_by_use": False}, "fact": {"ranked_by_use": True}}})
    assert q.types["preference"].ranked_by_use is False and q.types["fact"].ranked_by_use is True
    assert Policy.from_dict(q.to_dict()) == q
    # a new type inherits nothing: ranked by use unless it says otherwise
    assert Policy.from_dict({"types": {"note": {"ttl": "1d", "half_life": "1d"}}}).types["note"].ranked_by_use


@pytest.mark.parametrize("bad", ["no", 0, 1, None, "false"])
def test_a_bad_value_is_refused_by_name(bad):
    with pytest.raises(PolicyError, match=r"types\.fact\.ranked_by_use"):
        Policy.from_dict({"types": {"fact": {"ranked_by_use": bad}}})


def _two_facts(store: TierStore, clock: ManualClock, rng, memory_type: str = "fact") -> tuple[object, str, str]:
    """A fact that answers ``q`` well and is never used, and one that answers
    it less well and is used every day for 40 days."""
    q = unit(rng)
    answers = store.add("u", "answers", near(rng, q, 0.92), memory_type=memory_type)
    used = store.add("u", "used daily", near(rng, q, 0.78), memory_type=memory_type)
    for _ in range(40):
        clock.advance(DAY)
        store.touch("u", used)
    return q, answers, used


def test_a_fact_unused_for_weeks_still_ranks_by_how_well_it_answers(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        q, answers, used = _two_facts(store, clock, rng)
        hits = store.search("u", q, k=2, explain=True, record_access=False)
        assert [h.id for h in hits] == [answers, used]
        e = hits[0].explain
        assert e.raw["recency"] == 1.0 and e.normalised["weight"] == pytest.approx(1.0)
        # its lifetime is not touched: unused, it still decays and leaves the hot tier
        assert store.get("u", answers).weight < 0.1


def test_ranked_by_use_orders_by_use(tmp_path, rng):
    """The same memories ranked by use (the former behaviour, or another
    type): the one used every day comes first."""
    clock = ManualClock(T0)
    pol = Policy.from_dict({"types": {"fact": {"ranked_by_use": True}}})
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, policy=pol) as store:
        q, answers, used = _two_facts(store, clock, rng)
        assert [h.id for h in store.search("u", q, k=2, record_access=False)] == [used, answers]
    with TierStore.open(tmp_path / "p", dim=DIM, clock=clock) as store:
        q, answers, used = _two_facts(store, clock, rng, memory_type="preference")
        assert [h.id for h in store.search("u", q, k=2, record_access=False)] == [used, answers]


def test_an_archived_fact_ranks_by_how_well_it_answers(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        q, answers, used = _two_facts(store, clock, rng)
        store.sweep()
        assert store.get("u", answers).tier == "cold"
        hits = store.search("u", q, k=2, include_cold=True, record_access=False)
        assert [h.id for h in hits] == [answers, used]


def test_a_store_recorded_before_the_key_ranks_every_type_by_use(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        stored = json.loads(store.engine.catalog.get_meta("policy"))
        assert stored["types"]["fact"]["ranked_by_use"] is False
        for t in stored["types"].values():
            del t["ranked_by_use"]  # as a store written before issue 27's ranking recorded it
        store.engine.catalog.set_meta({"policy": json.dumps(stored)})
    with TierStore.open(path, clock=clock) as store:
        assert all(t.ranked_by_use for t in store.policy.types.values())
        q, answers, used = _two_facts(store, clock, rng)
        assert [h.id for h in store.search("u", q, k=2, record_access=False)] == [used, answers]

"""Issue 32: a fact holds until something replaces it, so the sweep never
deletes one by time alone (``types.<t>.sweep_deletes``): an unused fact whose
confidence has decayed below the delete bar stays archived, findable and
restorable; other types are still deleted; a store recorded before the key
keeps deleting facts."""

from __future__ import annotations

import json

import pytest
from helpers import DIM, T0, near, unit

from tierstore import ManualClock, Policy, PolicyError, TierStore

DAY = 86400.0
YEAR = 365 * DAY


def test_defaults_and_parsing():
    p = Policy()
    assert p.types["fact"].sweep_deletes is False
    assert all(t.sweep_deletes for n, t in p.types.items() if n != "fact")
    q = Policy.from_dict({"types": {"fact": {"sweep_deletes": True}, "preference": {"sweep_deletes": False}}})
    assert q.types["fact"].sweep_deletes is True and q.types["preference"].sweep_deletes is False
    assert Policy.from_dict(q.to_dict()) == q
    # a new type is deleted unless it says otherwise
    assert Policy.from_dict({"types": {"note": {"ttl": "1d", "half_life": "1d"}}}).types["note"].sweep_deletes


@pytest.mark.parametrize("bad", ["no", 0, 1, None, "false"])
def test_a_bad_value_is_refused_by_name(bad):
    with pytest.raises(PolicyError, match=r"types\.fact\.sweep_deletes"):
        Policy.from_dict({"types": {"fact": {"sweep_deletes": bad}}})


def _a_year_unused(store: TierStore, clock: ManualClock, rng) -> tuple[object, dict[str, str]]:
    """One memory of each type, told once and never used, then a year of
    daily sweeps: every confidence (0.95, halving in 180 days) ends below
    the delete bar (0.3) and every weight below the delete threshold."""
    q = unit(rng)
    ids = {
        t: store.add("u", f"a {t}", near(rng, q, 0.9), memory_type=t, source="user_declaration")
        for t in ("fact", "preference", "conversation")
    }
    for _ in range(365):
        clock.advance(DAY)
        store.sweep()
    return q, ids


def test_an_unused_fact_is_archived_and_never_deleted(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        q, ids = _a_year_unused(store, clock, rng)
        fact = store.get("u", ids["fact"])
        assert fact is not None and fact.tier == "cold"
        assert fact.confidence < 0.3 and fact.weight < 0.01  # past both bars: another type would be gone
        for t in ("preference", "conversation"):
            assert store.get("u", ids[t]) is None, t
        # still found by a question about it, and nothing is due for it any more
        assert [h.id for h in store.search("u", q, k=3, include_cold=True, record_access=False)] == [ids["fact"]]
        clock.advance(10 * YEAR)
        assert store.sweep().deleted == 0
        assert store.get("u", ids["fact"]) is not None
        # the caller can still delete it
        assert store.delete("u", ids["fact"]) is True


def test_a_policy_that_deletes_facts_deletes_them(tmp_path, rng):
    clock = ManualClock(T0)
    pol = Policy.from_dict({"types": {"fact": {"sweep_deletes": True}}})
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, policy=pol) as store:
        _, ids = _a_year_unused(store, clock, rng)
        assert all(store.get("u", i) is None for i in ids.values())


def test_a_store_recorded_before_the_key_keeps_deleting_facts(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        stored = json.loads(store.engine.catalog.get_meta("policy"))
        assert stored["types"]["fact"]["sweep_deletes"] is False
        for t in stored["types"].values():
            del t["sweep_deletes"]  # as a store written before issue 32 recorded it
        store.engine.catalog.set_meta({"policy": json.dumps(stored)})
    with TierStore.open(path, clock=clock) as store:
        assert all(t.sweep_deletes for t in store.policy.types.values())
        _, ids = _a_year_unused(store, clock, rng)
        assert store.get("u", ids["fact"]) is None


def test_opening_with_the_new_default_spares_the_facts_already_due(tmp_path, rng):
    """A store that deleted facts, opened with a policy that does not: the due
    times are recomputed at open, so an archived fact already past both bars
    is kept."""
    clock = ManualClock(T0)
    path = tmp_path / "s"
    deleting = Policy.from_dict({"types": {"fact": {"sweep_deletes": True}}})
    with TierStore.open(path, dim=DIM, clock=clock, policy=deleting) as store:
        q = unit(rng)
        fact = store.add("u", "a fact", near(rng, q, 0.9), source="user_declaration")
        for _ in range(40):  # archived, not yet past the confidence bar
            clock.advance(DAY)
            store.sweep()
        assert store.get("u", fact).tier == "cold"
    clock.advance(YEAR)
    with TierStore.open(path, clock=clock, policy=Policy()) as store:
        assert store.sweep().deleted == 0
        assert store.get("u", fact).tier == "cold"

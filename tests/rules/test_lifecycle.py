"""Due times and weights on a ManualClock (issue 2 must-shows)."""

from __future__ import annotations

import math

import pytest
from helpers import DIM, T0, unit

from tierstore import ManualClock, Policy, TierStore

DAY = 86400.0
HOUR = 3600.0


def test_conversation_falls_due_before_fact(store, clock, rng):
    conv = store.add("alice", "we talked about lunch", unit(rng), memory_type="conversation")
    fact = store.add("alice", "allergic to peanuts", unit(rng), memory_type="fact")
    m_conv, m_fact = store.get("alice", conv), store.get("alice", fact)
    assert m_conv.due_at < m_fact.due_at
    # Before the conversation's due time nothing is due; after it, only the conversation.
    clock.set(m_conv.due_at - 1)
    assert store.sweep().examined == 0
    clock.set(m_conv.due_at)
    report = store.sweep()
    # Unused, its weight crosses the demote threshold (0.3) before its TTL runs out.
    assert report.examined == 1 and report.by_type == {"conversation": {"demoted": 1}}
    pol = store.policy
    h = pol.types["conversation"].half_life_seconds * pol.half_life_scale(m_conv.confidence)
    assert m_conv.due_at - T0 == pytest.approx(h * math.log2(1.0 / pol.thresholds.demote))
    assert store.get("alice", conv).tier == "warm"
    # ... and at its TTL (scaled by confidence) it is archived.
    m_warm = store.get("alice", conv)
    assert m_warm.due_at - T0 == pytest.approx(HOUR * pol.ttl_scale(m_conv.confidence))
    clock.set(m_warm.due_at)
    assert store.sweep().by_type == {"conversation": {"archived": 1}}
    assert store.get("alice", conv).tier == "cold" and store.get("alice", fact).tier == "hot"


def test_low_confidence_falls_due_before_high_confidence(store, rng):
    v = unit(rng)
    # two namespaces: in one, the second add would be the same memory said again (dedupe)
    low = store.add("bob", "user might like blue", v, memory_type="preference", confidence=0.2, source="ai_inference")
    high = store.add("ann", "user might like blue", v, memory_type="preference", confidence=0.95, source="ai_inference")
    m_low, m_high = store.get("bob", low), store.get("ann", high)
    assert m_low.confidence < m_high.confidence
    assert m_low.expires_at < m_high.expires_at
    assert m_low.due_at < m_high.due_at


def test_pinned_memory_is_never_due(store, clock, rng):
    pinned = store.add("carol", "company name is Acme", unit(rng), memory_type="conversation", pinned=True)
    other = store.add("carol", "small talk", unit(rng), memory_type="conversation")
    assert store.get("carol", pinned).due_at is None
    clock.advance(2 * HOUR)
    report = store.sweep()
    assert report.examined == 1 and report.archived == 1  # only the unpinned one
    m = store.get("carol", pinned)
    assert m.pinned and m.tier == "hot" and m.due_at is None
    assert store.get("carol", other).tier == "cold"
    # Unpinning makes it due again (long expired): the next sweep archives it.
    store.pin("carol", pinned, False)
    assert store.get("carol", pinned).due_at is not None
    assert store.sweep().archived == 1
    assert store.get("carol", pinned).tier == "cold"
    # Pinned in the cold tier, it is never deleted either.
    store.pin("carol", pinned, True)
    assert store.get("carol", pinned).due_at is None
    clock.advance(5 * 365 * DAY)
    store.sweep()
    assert store.get("carol", pinned) is not None
    # the unpinned one, cold and with its confidence decayed below the bar, is gone
    assert store.get("carol", other) is None


def test_accessed_weight_matches_seed_formula(tmp_path, rng):
    # Confidence decay off: the half-life must stay constant for the closed form.
    policy = Policy.from_dict({"confidence": {"decay_half_life": None}})
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, policy=policy, clock=clock) as store:
        mid = store.add(
            "dan", "likes window seats", unit(rng), memory_type="preference", confidence=1.0, source="user_confirmation"
        )
        m0 = store.get("dan", mid)
        h = store.policy.types["preference"].half_life_seconds * store.policy.half_life_scale(m0.confidence)
        lam = math.log(2) / h
        w0 = store.policy.types["preference"].initial_weight
        boost = store.policy.types["preference"].boost
        access_times = [T0 + 2 * DAY, T0 + 3.5 * DAY, T0 + 9 * DAY]
        for t in access_times:
            clock.set(t)
            store.touch("dan", mid)
        t_now = T0 + 12 * DAY
        clock.set(t_now)
        expected = w0 * math.exp(-lam * (t_now - T0)) + sum(
            boost * math.exp(-lam * (t_now - ti)) for ti in access_times
        )
        m = store.get("dan", mid)
        assert m.access_count == 3
        assert m.weight == pytest.approx(expected, abs=1e-6)
        # also after the state has gone through the catalog and back
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        assert store.get("dan", mid).weight == pytest.approx(expected, abs=1e-6)


def test_access_on_refresh_type_pushes_expiry(store, clock, rng):
    fact = store.add("erin", "lives in Berlin", unit(rng), memory_type="fact")
    before = store.get("erin", fact)
    clock.advance(10 * DAY)
    store.touch("erin", fact)
    after = store.get("erin", fact)
    assert after.expires_at == pytest.approx(before.expires_at + 10 * DAY)
    assert after.due_at > before.due_at


def test_access_on_non_refresh_type_keeps_expiry(store, clock, rng):
    task = store.add("erin", "file the weekly report", unit(rng), memory_type="task")
    before = store.get("erin", task)
    clock.advance(HOUR)
    store.touch("erin", task)
    after = store.get("erin", task)
    assert after.expires_at == before.expires_at
    assert after.weight > before.weight  # boosted anyway


def test_ttl_override_is_taken_as_given(store, rng):
    mid = store.add("fay", "parking spot 42", unit(rng), memory_type="fact", ttl_seconds=600, confidence=0.1)
    m = store.get("fay", mid)
    assert m.expires_at - m.created_at == pytest.approx(600)
    assert m.ttl_seconds == 600


def test_sweep_reads_only_due_rows(store, clock, rng):
    store.add_batch("g", [{"content": f"fact {i}", "embedding": unit(rng), "memory_type": "fact"} for i in range(300)])
    store.add_batch(
        "g", [{"content": f"chat {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(7)]
    )
    clock.advance(2 * HOUR)
    report = store.sweep()
    assert report.examined == 7
    assert report.archived == 7
    assert report.remaining_due == 0
    store.add_batch(
        "g", [{"content": f"chat {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(7, 14)]
    )
    clock.advance(2 * HOUR)
    bounded = store.sweep(max_items=3)
    assert bounded.examined == 3 and bounded.remaining_due == 4
    assert store.sweep().examined == 4

"""Context-aware TTL, masking, confidence fusion and feedback, scoring modes,
no collapse (issue 4)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import DIM, T0, unit

from tierstore import ManualClock, Policy, TierStore

DAY = 86400.0

TRAVEL_FOOD = {
    "context": [
        {"when": "travel-planning", "tags": ["travel"], "ttl_multiplier": 3.0, "retrieval_multiplier": 1.5},
        {"when": "food-order", "tags": ["travel"], "ttl_multiplier": 0.5, "retrieval_multiplier": 0.5},
        {"when": "food-order", "tags": ["food"], "retrieval_multiplier": 1.5},
    ],
}


def open_store(tmp_path, policy=None, clock=None):
    return TierStore.open(
        tmp_path / "s",
        dim=DIM,
        clock=clock or ManualClock(T0),
        policy=Policy.from_dict(policy) if isinstance(policy, dict) else policy,
    )


def test_travel_versus_food_context(tmp_path, rng):
    """The seed's scenario: while planning a trip, travel memories live longer
    and rank higher; while ordering dinner they are damped."""
    clock = ManualClock(T0)
    store = open_store(tmp_path, TRAVEL_FOOD, clock)
    v = unit(rng)
    travel = store.add("u", "budget 50k for Japan next summer", v, memory_type="preference", tags=["travel"])
    food = store.add("u", "likes ramen", v, memory_type="preference", tags=["food"])
    neutral = store.add("u", "plain", v, memory_type="preference", tags=["misc"])  # a tag of its own: no supersession
    base = {m: store.get("u", m) for m in (travel, food, neutral)}
    clock.advance(DAY)
    weight_before_switch = store.get("u", travel).weight

    store.set_context("u", ["travel-planning"])
    stretched = store.get("u", travel)
    assert stretched.expires_at - stretched.created_at == pytest.approx(
        3 * (base[travel].expires_at - base[travel].created_at)
    )
    assert stretched.due_at > base[travel].due_at
    assert store.get("u", neutral).due_at == base[neutral].due_at  # untouched by the rule
    # the weight is rebased at the switch: no jump in the present, a slower decay from now on
    assert stretched.weight == pytest.approx(weight_before_switch, rel=1e-12)
    clock.advance(DAY)
    assert store.get("u", travel).weight > store.get("u", neutral).weight
    hits = store.search("u", v, k=3, record_access=False, explain=True)
    assert hits[0].id == travel  # identical vectors: the context decides
    assert hits[0].explain.raw["context"] == pytest.approx(1.5)

    store.set_context("u", ["food-order"])
    damped = store.get("u", travel)
    assert damped.expires_at - damped.created_at == pytest.approx(
        0.5 * (base[travel].expires_at - base[travel].created_at)
    )
    assert damped.due_at < base[travel].due_at
    order = [h.id for h in store.search("u", v, k=3, record_access=False)]
    assert order == [food, neutral, travel]

    # per query, whatever the namespace's context
    assert store.search("u", v, k=1, context_tags=["travel-planning"], record_access=False)[0].id == travel
    # back to no context: the original lifetimes return
    store.set_context("u", [])
    back = store.get("u", travel)
    assert back.expires_at == pytest.approx(base[travel].expires_at)
    store.close()
    with open_store(tmp_path, None, clock) as again:  # the context survives a reopen
        assert again.get_context("u") == ()


def test_context_change_reaches_warm_and_cold_rows(tmp_path, rng):
    clock = ManualClock(T0)
    store = open_store(tmp_path, TRAVEL_FOOD, clock)
    mid = store.add("u", "flight to Tokyo", unit(rng), memory_type="conversation", tags=["travel"])
    clock.advance(2 * 3600)
    store.sweep()
    assert store.get("u", mid).tier == "cold"
    before = store.get("u", mid)
    store.set_context("u", ["travel-planning"])
    after = store.get("u", mid)
    assert after.expires_at - after.created_at == pytest.approx(3 * (before.expires_at - before.created_at))
    store.close()


def test_masking(tmp_path, rng):
    policy = {"mask": [{"when": "programming", "tags": ["username-java"]}]}
    store = open_store(tmp_path, policy)
    v = unit(rng)
    by_rule = store.add("u", "the user's handle is Java", v, tags=["username-java"])
    by_prefix = store.add("u", "Java is the user's cat", v, tags=["_ignore_in_context_programming"])
    other = store.add("u", "prefers Python", v)
    in_prog = store.search("u", v, k=5, context_tags=["programming"], record_access=False)
    assert [h.id for h in in_prog] == [other]  # masked memories are never returned there
    assert {h.id for h in store.search("u", v, k=5, record_access=False)} == {by_rule, by_prefix, other}
    store.set_context("u", ["programming"])  # the namespace's context masks too
    assert [h.id for h in store.search("u", v, k=5, record_access=False)] == [other]
    store.close()


def test_confidence_fusion_by_hand(tmp_path, rng):
    store = open_store(tmp_path)
    c = store.policy.confidence
    a, b, g = c.llm_weight, c.rule_weight, c.feedback_weight
    mid = store.add("u", "might like blue", unit(rng), confidence=0.6, source="ai_inference")
    fused = (a * 0.6 + b * 0.7) / (a + b)
    assert store.get("u", mid).confidence == pytest.approx(fused)
    unknown = store.add("u", "x", unit(rng), confidence=0.42, source="some-new-source")
    assert store.get("u", unknown).confidence == pytest.approx(0.42)  # no rule signal: the estimate alone
    # explicit positive feedback: the signal starts at the current confidence, moves a step toward 1
    fb = fused + c.feedback_step * (1 - fused)
    after = store.feedback("u", mid, positive=True)
    assert after.confidence == pytest.approx((a * 0.6 + b * 0.7 + g * fb) / (a + b + g))
    # implicit negative feedback: a smaller step toward 0
    fb2 = fb - c.implicit_feedback_step * fb
    after2 = store.feedback("u", mid, positive=False, implicit=True)
    assert after2.confidence == pytest.approx((a * 0.6 + b * 0.7 + g * fb2) / (a + b + g))
    # half strength: half the step
    fb3 = fb2 + 0.5 * c.feedback_step * (1 - fb2)
    after3 = store.feedback("u", mid, positive=True, strength=0.5)
    assert after3.confidence == pytest.approx((a * 0.6 + b * 0.7 + g * fb3) / (a + b + g))
    store.close()


def test_confidence_decays_unless_reinforced(tmp_path, rng):
    clock = ManualClock(T0)
    store = open_store(tmp_path, None, clock)
    mid = store.add(
        "u", "fact", unit(rng), memory_type="fact", confidence=0.9, source="some-source", ttl_seconds=10 * 365 * DAY
    )
    h = store.policy.confidence.decay_half_life_seconds
    clock.advance(h)
    assert store.get("u", mid).confidence == pytest.approx(0.45)
    store.feedback("u", mid, positive=True)  # reinforced: decay restarts from the fused value
    assert store.get("u", mid).confidence > 0.9
    store.close()


def test_feedback_moves_the_due_time(tmp_path, rng):
    store = open_store(tmp_path)
    v = unit(rng)
    ids = [
        store.add(
            "u",
            f"pref {i}",
            v if i == 0 else unit(rng),
            memory_type="preference",
            confidence=0.7,
            source="ai_inference",
        )
        for i in range(2)
    ]
    before = store.get("u", ids[0]).due_at
    assert store.feedback("u", ids[0], positive=True).due_at > before
    assert store.feedback("u", ids[1], positive=False).due_at < before
    # and the catalog's due index says the same (a sweep reads it)
    store.flush()
    rows = dict(store.engine.catalog.query("SELECT id, due_at FROM memories"))
    assert rows[ids[0]] > before > rows[ids[1]]
    store.close()


def test_negative_feedback_below_a_threshold_is_acted_on_by_the_next_sweep(tmp_path, rng):
    """Feedback that pushes the weight past the demote and archive thresholds
    makes the memory due at once: it used to get a due time of -inf, which the
    catalog stored as "never", and the memory stayed hot for good."""
    clock = ManualClock(T0)
    store = open_store(tmp_path, None, clock)
    mid, keep = (store.add("u", c, unit(rng), memory_type="fact") for c in ("stale", "fresh"))
    for _ in range(4):  # weight 1 -> 1/16, below archive (0.1)
        m = store.feedback("u", mid, positive=False)
    assert m.weight < store.policy.thresholds.archive
    assert m.due_at is not None and m.due_at <= clock.now()
    store.flush()
    assert store.engine.catalog.query_one("SELECT due_at FROM memories WHERE id = ?", (mid,))[0] <= clock.now()
    clock.advance(1.0)
    report = store.sweep()
    assert report.archived == 1 and store.get("u", mid).tier == "cold"
    assert store.get("u", keep).tier == "hot"
    store.close()


def test_weighted_sum_terms_add_up_to_the_score(tmp_path, rng):
    policy = {
        "scoring": {
            "mode": "weighted_sum",
            "weights": {"similarity": 0.5, "recency": 0.2, "confidence": 0.1, "context": 0.1, "weight": 0.1},
        }
    }
    clock = ManualClock(T0)
    store = open_store(tmp_path, policy, clock)
    for i in range(8):
        store.add("u", f"m{i}", unit(rng), tags=["a"] if i % 2 else [], confidence=0.3 + 0.08 * i, source="some-source")
        clock.advance(3600 * i)
    hits = store.search("u", unit(rng), k=8, context_tags=["a"], record_access=False, explain=True)
    assert len(hits) == 8
    for h in hits:
        ex = h.explain
        assert ex.mode == "weighted_sum"
        assert sum(ex.terms.values()) == pytest.approx(h.score, abs=1e-12)
        assert ex.weights == pytest.approx(
            {"similarity": 0.5, "recency": 0.2, "confidence": 0.1, "context": 0.1, "weight": 0.1}
        )
        for f in ex.terms:
            assert ex.terms[f] == pytest.approx(ex.weights[f] * ex.normalised[f])
            assert 0.0 <= ex.normalised[f] <= 1.0
    # by score, but for what query-time resolution moved (its explanation says so)
    kept = [h.score for h in hits if h.explain.resolution is None]
    assert kept == sorted(kept, reverse=True)
    store.close()


@pytest.mark.parametrize("mode", ["product", "weighted_sum"])
def test_decay_never_collapses_the_result_set(tmp_path, rng, mode):
    """Every memory decayed far below every threshold, none archived yet (no
    sweep): search still returns the best matches, by similarity."""
    clock = ManualClock(T0)
    store = open_store(tmp_path, {"scoring": {"mode": mode}}, clock)
    q = unit(rng)
    vecs = [q + s * unit(rng) for s in (0.1, 0.3, 0.6, 1.0, 2.0, 4.0)]
    ids = [
        store.add("u", f"m{i}", v, memory_type="conversation", confidence=0.8, source="some-source")
        for i, v in enumerate(vecs)
    ]
    clock.advance(3 * 365 * DAY)  # ~80 000 half-lives: weights and recency underflow to 0
    for mid in ids:
        assert store.get("u", mid).weight < 1e-300
    hits = store.search("u", q, k=4, record_access=False, explain=True)
    expected = sorted(ids, key=lambda i: -float(np.dot(store.get("u", i).embedding, q / np.linalg.norm(q))))[:4]
    assert [h.id for h in hits] == expected
    assert all(h.score > 0 for h in hits)
    # archived memories are never returned by search
    store.sweep()
    assert all(store.get("u", i) is None or store.get("u", i).tier == "cold" for i in ids)
    assert store.search("u", q, k=4) == []
    store.close()


def test_supersedes_retires_the_old_statement(tmp_path, rng):
    clock = ManualClock(T0)
    store = open_store(tmp_path, None, clock)
    v = unit(rng)
    old = store.add("u", "Alice lives in Lisbon", v, memory_type="fact", id="home-1")
    clock.advance(3600)
    before = store.get("u", old)
    new = store.add("u", "Alice moved to Osaka", v, memory_type="fact", id="home-2", supersedes=[old])
    after = store.get("u", old)
    assert after.confidence < before.confidence and after.weight < before.weight
    assert after.ttl_seconds == 0 and after.expires_at <= clock.now() and after.due_at <= clock.now()
    assert [h.id for h in store.search("u", v, k=2, record_access=False)] == [new, old]
    clock.advance(60)
    store.touch("u", old)  # used by mistake: a fact refreshes its TTL on read, but 0 stays 0
    assert store.get("u", old).due_at <= clock.now()
    report = store.sweep()
    assert report.archived + report.deleted == 1
    m = store.get("u", old)
    assert m is None or m.tier == "cold"
    assert [h.id for h in store.search("u", v, k=2, record_access=False, include_cold=False)] == [new]
    events = store.engine.catalog.query("SELECT id, kind, reason FROM events WHERE kind = 'supersede'")
    assert events == [("home-1", "supersede", "by home-2")]
    store.close()


def test_supersedes_is_validated_before_anything_is_added(tmp_path, rng):
    from tierstore import InvalidInputError, MemoryNotFoundError

    store = open_store(tmp_path)
    old = store.add("u", "x", unit(rng), id="a")
    with pytest.raises(MemoryNotFoundError):
        store.add("u", "y", unit(rng), id="b", supersedes=["nope"])
    with pytest.raises(MemoryNotFoundError):
        store.add("other", "y", unit(rng), id="b", supersedes=[old])  # not across namespaces
    with pytest.raises(InvalidInputError):
        store.add("u", "y", unit(rng), id="b", supersedes=["b"])
    assert store.get("u", "b") is None and store.get("other", "b") is None
    assert store.get("u", old).due_at > store.clock.now()  # untouched
    ids = store.add_batch("u", [{"content": "z", "embedding": unit(rng), "supersedes": [old]}])
    assert store.get("u", old).due_at <= store.clock.now() and store.get("u", ids[0]) is not None
    store.close()

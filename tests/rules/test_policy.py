"""Policy: defaults from the seed, TOML and dict loading, errors naming the key."""

from __future__ import annotations

import json

import pytest

from tierstore import Policy, PolicyError
from tierstore.policy import DAY, HOUR, parse_duration


def test_seed_defaults():
    p = Policy.default()
    assert p.types["conversation"].ttl_seconds == HOUR
    assert p.types["fact"].ttl_seconds == 30 * DAY
    assert p.types["preference"].ttl_seconds == 7 * DAY
    assert p.types["task"].ttl_seconds == 2 * DAY
    assert 1 * DAY < p.types["opinion"].ttl_seconds <= 7 * DAY
    assert p.confidence.source_defaults["user_declaration"] == 0.95
    assert p.confidence.source_defaults["ai_inference"] == 0.7
    assert p.thresholds.demote > p.thresholds.archive > p.thresholds.delete


def test_confidence_scaling_shortens_life_of_guesses():
    p = Policy.default()
    assert p.ttl_scale(0.2) < p.ttl_scale(0.9) <= p.ttl_scale(1.0) == 1.0
    assert p.half_life_scale(0.0) == p.confidence.half_life_floor


def test_fusion_is_a_weighted_mean_of_present_signals():
    p = Policy.default()
    c = p.confidence
    assert p.fuse_confidence(0.8, None, None) == pytest.approx(0.8)
    assert p.fuse_confidence(0.8, 0.95, None) == pytest.approx(
        (c.llm_weight * 0.8 + c.rule_weight * 0.95) / (c.llm_weight + c.rule_weight)
    )
    assert p.fuse_confidence(0.8, 0.95, 0.3) == pytest.approx(
        (c.llm_weight * 0.8 + c.rule_weight * 0.95 + c.feedback_weight * 0.3)
        / (c.llm_weight + c.rule_weight + c.feedback_weight)
    )


TOML = """
[types.fact]
ttl = "90d"
refresh_on_read = false

[types.note]
ttl = "12h"
half_life = 21600
boost = 0.25

[thresholds]
demote = 0.4

[confidence]
decay_half_life = "never"
source_defaults = { sensor = 0.6 }

[[context]]
when = "travel-planning"
tags = ["travel"]
ttl_multiplier = 3.0
retrieval_multiplier = 1.5

[[mask]]
when = "programming"
tags = ["java-the-user"]

[scoring]
mode = "weighted_sum"
weights = { similarity = 0.7, recency = 0.1, confidence = 0.1, context = 0.1, weight = 0.0 }
recency_half_life = "3d"
"""


def test_toml_overrides_defaults(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(TOML)
    p = Policy.from_toml(path)
    assert p.types["fact"].ttl_seconds == 90 * DAY
    assert p.types["fact"].refresh_on_read is False
    assert p.types["fact"].half_life_seconds == Policy.default().types["fact"].half_life_seconds
    assert p.types["note"].ttl_seconds == 12 * HOUR and p.types["note"].boost == 0.25
    assert p.thresholds.demote == 0.4
    assert p.confidence.decay_half_life_seconds is None
    assert p.confidence.source_defaults["sensor"] == 0.6
    assert p.confidence.source_defaults["user_declaration"] == 0.95
    assert p.context_rules[0].ttl_multiplier == 3.0 and p.context_rules[0].tags == ("travel",)
    assert p.mask_rules[0].when == "programming"
    assert p.scoring.mode == "weighted_sum" and p.scoring.recency_half_life_seconds == 3 * DAY
    # round trip through the JSON the catalog stores
    assert Policy.from_json(p.to_json()) == p
    assert Policy.from_dict(json.loads(p.to_json())).to_json() == p.to_json()


@pytest.mark.parametrize(
    "data,key",
    [
        ({"types": {"fact": {"ttl": -1}}}, "types.fact.ttl"),
        ({"types": {"fact": {"ttl": "3 fortnights"}}}, "types.fact.ttl"),
        ({"types": {"fact": {"half_life": None}}}, "types.fact.half_life"),
        ({"types": {"fact": {"boost": "lots"}}}, "types.fact.boost"),
        ({"types": {"fact": {"colour": 1}}}, "types.fact.colour"),
        ({"types": {"note": {"ttl": "1d"}}}, "types.note.half_life"),
        ({"types": {"bad/name": {"ttl": "1d", "half_life": "1d"}}}, "types.bad/name"),
        ({"thresholds": {"archive": 0.5}}, "thresholds"),
        ({"thresholds": {"delete_below_confidence": 2}}, "thresholds.delete_below_confidence"),
        ({"confidence": {"source_defaults": {"x": 1.2}}}, "confidence.source_defaults.x"),
        ({"confidence": {"llm_weight": 0, "rule_weight": 0, "feedback_weight": 0}}, "confidence"),
        ({"context": [{"when": "travel", "tags": ["t"], "ttl_multiplier": 0}]}, "context[0].ttl_multiplier"),
        ({"context": [{"tags": ["t"]}]}, "context[0].when"),
        ({"mask": [{"when": "x"}]}, "mask[0].tags"),
        ({"scoring": {"mode": "max"}}, "scoring.mode"),
        ({"scoring": {"weights": {"sim": 1}}}, "scoring.weights.sim"),
        ({"scoring": {"oversample": 0}}, "scoring.oversample"),
        ({"retention": 3}, "retention"),
    ],
)
def test_invalid_policy_names_the_key(data, key):
    with pytest.raises(PolicyError) as info:
        Policy.from_dict(data)
    assert key in str(info.value)


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(PolicyError, match="TOML"):
        Policy.from_toml("[types.fact\nttl = 1")
    with pytest.raises(PolicyError, match="cannot read"):
        Policy.from_toml(tmp_path / "missing.toml")


def test_durations():
    assert parse_duration("90m", "k") == 5400
    assert parse_duration("1.5h", "k") == 5400
    assert parse_duration("2w", "k") == 14 * DAY
    assert parse_duration(30, "k") == 30
    assert parse_duration("never", "k", allow_none=True) is None
    with pytest.raises(PolicyError):
        parse_duration(True, "k")


def test_documented_example_policy_loads():
    from pathlib import Path

    p = Policy.from_toml(Path(__file__).resolve().parents[2] / "docs" / "examples" / "policy-travel.toml")
    assert p.types["trip"].ttl_seconds == 120 * DAY
    assert [r.when for r in p.context_rules] == ["travel-planning", "food-order", "food-order"]
    assert p.confidence.source_defaults["booking_system"] == 0.99

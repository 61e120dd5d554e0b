"""Settings, HotSettings and WarmSettings refuse every field out of its range,
naming the field and the range; TierStore.open with bad settings touches nothing."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest

from tierstore import Settings, TierStore
from tierstore.errors import InvalidInputError
from tierstore.tiers.hot import HotSettings
from tierstore.tiers.warm import WarmSettings

TIMEOUT_MAX = threading.TIMEOUT_MAX
FRACTION = ([0, 0.0, 0.25, 1, 1.0], [-0.01, 1.01, math.nan, math.inf, -math.inf, True, "0.5", None])
HNSW_M = ([2, 16, 10_000], [1, 0, -1, 10_001, 16.0, True, "16"])
AT_LEAST_1 = ([1, 64, 2**63 - 1], [0, -1, 2**63, 1.0, True, False, "1", None])
AT_LEAST_0 = ([0, 1, 2**40], [-1, 2**63, 0.0, 1.5, True, "0", None])
BOOL = ([True, False], [1, 0, "yes", None, 1.0])

# (class, field): (good values, bad values, the allowed range as the message states it)
FIELDS = {
    (Settings, "synchronous"): (
        ["NORMAL", "FULL", "OFF", "EXTRA", "normal", "Full"],
        ["", "FAST", "NORMAL ", 1, None, b"FULL"],
        "one of OFF, NORMAL, FULL, EXTRA (any case)",
    ),
    (Settings, "flush_interval_s"): (
        [0.001, 1, 1.0, 3600, TIMEOUT_MAX],
        [0, 0.0, -1, -0.5, math.nan, math.inf, TIMEOUT_MAX * 2, True, "1", None],
        "a finite number in (0, 9223372036] seconds",
    ),
    (Settings, "max_tags_per_memory"): (*AT_LEAST_0, f"an integer in [0, {2**63 - 1}]"),
    (Settings, "max_content_chars"): (*AT_LEAST_1, f"an integer in [1, {2**63 - 1}]"),
    (Settings, "sweep_batch"): (*AT_LEAST_1, f"an integer in [1, {2**63 - 1}]"),
    (Settings, "access_log"): (*BOOL, "True or False"),
    (Settings, "preload_hot"): (*BOOL, "True or False"),
    (Settings, "hot"): ([HotSettings(), HotSettings(hnsw_m=8)], [None, {}, WarmSettings()], "a HotSettings"),
    (Settings, "warm"): ([WarmSettings(), WarmSettings(merge_above=2)], [None, {}, HotSettings()], "a WarmSettings"),
    (HotSettings, "exact_threshold"): (*AT_LEAST_0, f"an integer in [0, {2**63 - 1}]"),
    (HotSettings, "hnsw_m"): (*HNSW_M, "an integer in [2, 10000]"),
    (HotSettings, "hnsw_ef_construction"): (*AT_LEAST_1, f"an integer in [1, {2**63 - 1}]"),
    (HotSettings, "hnsw_ef_search"): (*AT_LEAST_1, f"an integer in [1, {2**63 - 1}]"),
    (HotSettings, "compact_dead_fraction"): (*FRACTION, "a finite number in [0, 1]"),
    (WarmSettings, "cache_bytes"): (*AT_LEAST_0, f"an integer in [0, {2**63 - 1}]"),
    (WarmSettings, "flat_threshold"): (*AT_LEAST_0, f"an integer in [0, {2**63 - 1}]"),
    (WarmSettings, "hnsw_m"): (*HNSW_M, "an integer in [2, 10000]"),
    (WarmSettings, "hnsw_ef_construction"): (*AT_LEAST_1, f"an integer in [1, {2**63 - 1}]"),
    (WarmSettings, "hnsw_ef_search"): (*AT_LEAST_1, f"an integer in [1, {2**63 - 1}]"),
    (WarmSettings, "rebuild_live_fraction"): (*FRACTION, "a finite number in [0, 1]"),
    (WarmSettings, "merge_above"): (*AT_LEAST_1, f"an integer in [1, {2**63 - 1}]"),
}


def test_every_field_is_covered():
    for cls in (Settings, HotSettings, WarmSettings):
        assert {f.name for f in dataclasses.fields(cls)} == {name for c, name in FIELDS if c is cls}


GOOD = [
    pytest.param(cls, name, v, id=f"{cls.__name__}.{name}={v!r}")
    for (cls, name), (g, _, _) in FIELDS.items()
    for v in g
]
BAD = [
    pytest.param(cls, name, v, rng, id=f"{cls.__name__}.{name}={v!r}")
    for (cls, name), (_, b, rng) in FIELDS.items()
    for v in b
]


@pytest.mark.parametrize("cls, name, value", GOOD)
def test_a_value_in_range_is_taken_as_given(cls, name, value):
    s = cls(**{name: value})
    assert getattr(s, name) is value


@pytest.mark.parametrize("cls, name, value, allowed", BAD)
def test_a_value_out_of_range_is_refused_naming_the_field_and_the_range(cls, name, value, allowed):
    with pytest.raises(InvalidInputError) as err:
        cls(**{name: value})
    assert f"{cls.__name__}.{name} must be {allowed}, got " in str(err.value)


def test_the_defaults_are_valid_and_replace_checks_again():
    s = Settings()
    s.validate()
    assert dataclasses.replace(s, sweep_batch=5).sweep_batch == 5
    with pytest.raises(InvalidInputError, match="Settings.sweep_batch"):
        dataclasses.replace(s, sweep_batch=0)


def _tree(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))


def _changed(settings: Settings, name: str, value) -> Settings:
    object.__setattr__(settings, name, value)  # what the frozen dataclass refuses, done anyway
    return settings


@pytest.mark.parametrize(
    "settings, message",
    [
        pytest.param({"flush_interval_s": 1.0}, "settings must be a Settings, got dict", id="not-a-Settings"),
        pytest.param(_changed(Settings(), "flush_interval_s", -1), "Settings.flush_interval_s", id="changed-after"),
        pytest.param(_changed(Settings(), "synchronous", "FAST"), "Settings.synchronous", id="synchronous"),
        pytest.param(
            _changed(Settings(), "hot", _changed(HotSettings(), "hnsw_m", 1)), "HotSettings.hnsw_m", id="nested-hot"
        ),
    ],
)
def test_open_with_bad_settings_creates_nothing(tmp_path, settings, message):
    path, cold = tmp_path / "store", tmp_path / "cold"
    with pytest.raises(InvalidInputError, match=message):
        TierStore.open(path, dim=8, settings=settings, cold=cold)
    assert not path.exists() and not cold.exists()
    assert list(tmp_path.iterdir()) == []


def test_open_with_bad_settings_leaves_an_existing_store_as_it_was(tmp_path):
    path = tmp_path / "store"
    TierStore.open(path, dim=8).close()
    before = _tree(tmp_path)
    with pytest.raises(InvalidInputError, match=r"Settings\.sweep_batch must be an integer in \[1, "):
        TierStore.open(path, dim=8, settings=_changed(Settings(), "sweep_batch", 0))
    with pytest.raises(InvalidInputError, match="Settings.access_log must be True or False"):
        TierStore.open(path, readonly=True, settings=_changed(Settings(), "access_log", 1))
    assert _tree(tmp_path) == before

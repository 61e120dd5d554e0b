"""Lifecycle metrics on a scripted lifecycle whose answers are worked out by hand.

The script (ManualClock, fixed ids, a policy with no confidence scaling so
that every time is exact). Day 0 starts at D0, a day boundary:

- fact (half-life 1000 d: it never decays here; no TTL unless given):
  f1 touched once at 0.5 d, deleted at 2 d;
  f2 TTL 5 d, touched 3× and feedback +, +, implicit − at 0.5 d, archived at 5 d;
  f3 touched twice, implicit + feedback, pinned at 0.5 d; alive;
  f4 TTL 1 d: archived at 1 d, restored at 3 d (TTL restarts: 4 d), archived again at 5 d.
- note (half-life 1 d: weight 1 → 0.3 at 1.74 d, → 0.1 at 3.32 d):
  n1 demoted by the 2 d sweep (W = 0.25), touched at 2.5 d (warm → promote,
  W = 1 + boost 0.5), demoted by the 5 d sweep (W = 1.5·2^-2.5 = 0.27),
  archived by the 10 d sweep (W = 0.008; confidence 0.95 > 0.3: not deleted),
  negative feedback at 15 d;
  n2 pinned from the start: alive.
Sweeps at 1, 2, 5 and 10 d; metrics at 20 d.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers import DIM, unit

from tierstore import ManualClock, Policy, TierStore
from tierstore.analytics.lifecycle import (
    DEFAULT_KEEP_KINDS,
    compact_events,
    format_summary,
    kaplan_meier,
    lifecycle_metrics,
    survival_quantile,
    tier_at,
)
from tierstore.errors import InvalidInputError

DAY = 86400.0
D = 19676  # a POSIX day number
D0 = D * DAY

POLICY = Policy.from_dict(
    {
        "types": {
            "fact": {"ttl": None, "half_life": "1000d", "refresh_on_read": False},
            "note": {"ttl": None, "half_life": "1d", "refresh_on_read": False},
        },
        # no confidence scaling or decay: half-lives and TTLs are exactly as written
        "confidence": {"half_life_floor": 1.0, "ttl_floor": 1.0, "decay_half_life": None},
    }
)


def at(clock: ManualClock, days: float) -> None:
    clock.set(D0 + days * DAY)


def script(store: TierStore, clock: ManualClock, rng) -> None:
    def add(mid, mtype, **kw):
        return store.add("a", mid, unit(rng), memory_type=mtype, confidence=0.95, id=mid, **kw)

    add("f1", "fact")
    add("f2", "fact", ttl_seconds=5 * DAY)
    add("f3", "fact")
    add("f4", "fact", ttl_seconds=1 * DAY)
    add("n1", "note")
    add("n2", "note", pinned=True)
    at(clock, 0.5)
    store.touch("a", ["f1", "f2", "f2", "f2", "f3", "f3"])
    store.feedback("a", "f2", positive=True)
    store.feedback("a", "f2", positive=True)
    store.feedback("a", "f2", positive=False, implicit=True)
    store.feedback("a", "f3", positive=True, implicit=True)
    store.pin("a", "f3")
    at(clock, 1)
    assert store.sweep().archived == 1  # f4
    at(clock, 2)
    assert store.sweep().demoted == 1  # n1
    assert store.delete("a", "f1")
    at(clock, 2.5)
    store.touch("a", "n1")  # warm -> promote
    at(clock, 3)
    assert store.restore("a", ids=["f4"]) == ["f4"]
    at(clock, 5)
    r = store.sweep()
    assert (r.archived, r.demoted) == (2, 1)  # f2, f4; n1
    at(clock, 10)
    assert store.sweep().archived == 1  # n1, from warm
    at(clock, 15)
    store.feedback("a", "n1", positive=False)
    at(clock, 20)


@pytest.fixture
def scripted(tmp_path, rng):
    clock = ManualClock(D0)
    store = TierStore.open(tmp_path / "s", dim=DIM, policy=POLICY, clock=clock)
    script(store, clock, rng)
    yield store, clock
    store.close()


def test_event_counts(scripted):
    store, _ = scripted
    m = lifecycle_metrics(store)
    assert m["events"]["by_kind"] == {
        "create": 6,
        "promote": 1,
        "demote": 2,
        "archive": 4,
        "restore": 1,
        "reactivate": 0,
        "delete": 1,
        "feedback": 5,
        "pin": 1,
        "unpin": 0,
    }
    assert m["events"]["total"] == 21
    json.dumps(m)  # JSON-serialisable


def test_survival_per_type(scripted):
    store, _ = scripted
    s = lifecycle_metrics(store)["survival"]["by_type"]
    # facts: f4 ends at 1 d, f1 at 2 d, f2 at 5 d, f3 alive (censored at 20 d).
    # Kaplan–Meier: S(1 d) = 3/4, S(2 d) = 3/4·2/3 = 1/2 -> median 2 d;
    # S(5 d) = 1/2·1/2 = 1/4 and never <= 0.1 -> p90 unknown.
    fact = s["fact"]
    assert (fact["memories"], fact["ended"], fact["censored"]) == (4, 3, 1)
    assert (fact["archived"], fact["deleted"]) == (2, 1)
    assert fact["median_s"] == 2 * DAY and fact["p90_s"] is None
    assert fact["mean_ended_s"] == pytest.approx((1 + 2 + 5) / 3 * DAY)
    assert fact["curve"] == [[0.0, 1.0], [DAY, 0.75], [2 * DAY, 0.5], [5 * DAY, 0.25]]
    # notes: n1 ends at 10 d (its archive; the demotes do not end it), n2 pinned.
    note = s["note"]
    assert (note["memories"], note["ended"], note["censored"]) == (2, 1, 1)
    assert note["median_s"] == 10 * DAY and note["p90_s"] is None
    # hot or warm at 20 d: f3 and n2
    assert (fact["alive_now"], note["alive_now"], lifecycle_metrics(store)["survival"]["all"]["alive_now"]) == (1, 1, 2)


@pytest.mark.slow
def test_a_restored_memory_ended_its_first_life_and_is_alive_now(tmp_path, rng):
    """Archived, then restored: its first life ended (survival counts the end),
    and it is hot now (``alive_now``), which the summary and the report say."""
    from tierstore.analytics.report import write_report

    clock = ManualClock(D0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, policy=POLICY) as store:
        for mid in ("t1", "t2"):
            store.add("a", mid, unit(rng), memory_type="fact", ttl_seconds=DAY, id=mid)
        at(clock, 2)
        assert store.sweep().archived == 2
        assert store.restore("a", ids=["t1"]) == ["t1"]
        at(clock, 3)
        m = lifecycle_metrics(store)
        fact = m["survival"]["by_type"]["fact"]
        assert (fact["ended"], fact["censored"], fact["alive_now"]) == (2, 0, 1)
        assert "fact 2 d (2 ended, 0 not yet; 1 hot or warm now)" in format_summary(m)  # archived by the 2 d sweep
        pytest.importorskip("matplotlib")
        text = write_report(store, tmp_path / "r").read_text()
    assert "<th>hot or warm now</th>" in text
    assert (
        "<td>fact</td><td>2</td><td>2</td><td>0</td><td>2</td><td>0</td><td>2 days</td><td>2 days</td>"
        "<td>1</td>" in text
    )


def test_access_counts_at_end(scripted):
    store, _ = scripted
    a = lifecycle_metrics(store)["access_at_end"]
    # first ends: f4 (0 accesses), f1 (1), f2 (3), n1 (1: the touch that promoted it)
    assert a["count"] == 4 and a["mean"] == pytest.approx(5 / 4)
    assert {b["label"]: b["count"] for b in a["buckets"]} == {
        "0": 1,
        "1": 2,
        "2-3": 1,
        "4-7": 0,
        "8-15": 0,
        "16-31": 0,
        "32+": 0,
    }
    assert a["by_type"] == {"fact": {"count": 3, "mean": pytest.approx(4 / 3)}, "note": {"count": 1, "mean": 1.0}}


def test_reactivation(scripted):
    store, _ = scripted
    r = lifecycle_metrics(store, reactivation_days=7)["reactivation"]
    # leaves: f4 archive@1 (restored @3: yes, 2 d), n1 demote@2 (promoted @2.5: yes, 0.5 d),
    # f2 archive@5, f4 archive@5, n1 demote@5, n1 archive@10: never back, windows closed by 20 d.
    assert (r["numerator"], r["denominator"], r["pending"]) == (2, 6, 0)
    assert r["rate"] == pytest.approx(2 / 6)
    assert r["median_delay_s"] == pytest.approx((0.5 + 2) / 2 * DAY)
    assert (r["by_kind"]["demote"]["numerator"], r["by_kind"]["demote"]["denominator"]) == (1, 2)
    assert (r["by_kind"]["archive"]["numerator"], r["by_kind"]["archive"]["denominator"]) == (1, 4)
    assert r["by_type"]["note"]["rate"] == pytest.approx(1 / 3)
    assert r["by_cause"] == {"used": 0, "promoted": 1, "re-added": 0, "restored": 1}  # n1 touched warm; f4
    assert r["by_type"]["fact"]["by_cause"]["restored"] == 1 and r["by_kind"]["demote"]["by_cause"]["promoted"] == 1
    # A window shorter than 2 d misses f4's restore; one shorter than 0.5 d misses both.
    assert lifecycle_metrics(store, reactivation_days=1)["reactivation"]["numerator"] == 1
    assert lifecycle_metrics(store, reactivation_days=0.25)["reactivation"]["numerator"] == 0


def test_reactivation_pending_while_window_open(scripted):
    store, _ = scripted
    # As of 11 d, n1's archive at 10 d is still within its 7 d window: pending, not counted.
    # f2/f4 archive@5 and n1 demote@5 are pending too (5 + 7 > 11).
    r = lifecycle_metrics(store, now=D0 + 11 * DAY)["reactivation"]
    assert (r["numerator"], r["denominator"], r["pending"]) == (2, 2, 4)
    assert r["rate"] == 1.0


def test_memory_value(scripted):
    store, _ = scripted
    v = lifecycle_metrics(store)["value"]
    # retrievals (access_log): f1 1, f2 3, f3 2, n1 1. feedback: f2 2+/1-, f3 1+, n1 1-.
    # value = retrievals × positive rate: f2 3·2/3 = 2, f3 2·1 = 2, n1 1·0 = 0; f1 unrated.
    assert (v["memories"], v["rated"], v["retrievals"]) == (4, 3, 7)
    assert [(x["id"], x["value"]) for x in v["top"]] == [("f2", pytest.approx(2.0)), ("f3", 2.0), ("n1", 0.0)]
    assert v["top"][0]["positive_rate"] == pytest.approx(2 / 3) and v["top"][0]["content"] == "f2"
    assert v["by_type"]["fact"] == {"memories": 3, "rated": 2, "retrievals": 6, "mean_value": pytest.approx(2.0)}
    assert v["by_type"]["note"] == {"memories": 1, "rated": 1, "retrievals": 1, "mean_value": 0.0}


def test_tier_series(scripted):
    store, _ = scripted
    m = lifecycle_metrics(store)
    t = m["tiers"]
    assert t["days"] == list(range(D, D + 21))
    # end of day: d0 six created; d1 f4 archived; d2 n1 demoted then promoted, f1 deleted;
    # d3 f4 restored; d5 f2, f4 archived, n1 demoted; d10 n1 archived.
    assert t["hot"] == [6, 5, 4, 5, 5] + [2] * 16
    assert t["warm"] == [0] * 5 + [1] * 5 + [0] * 11
    assert t["cold"] == [0, 1, 1, 0, 0] + [2] * 5 + [3] * 11
    # the last day agrees with the catalog
    assert tier_at(m, D0 + 20 * DAY) == store.stats().by_tier
    assert tier_at(m, D0 - DAY) == {"hot": 0, "warm": 0, "cold": 0}


def test_metrics_as_of_an_earlier_time(scripted):
    store, _ = scripted
    m = lifecycle_metrics(store, now=D0 + 4 * DAY)
    fact = m["survival"]["by_type"]["fact"]
    # f4 1 d, f1 2 d ended; f2 and f3 alive at 4 d
    assert (fact["ended"], fact["censored"], fact["median_s"]) == (2, 2, 2 * DAY)
    assert m["tiers"]["days"][-1] == D + 4 and m["tiers"]["hot"][-1] == 5
    assert m["events"]["by_kind"]["archive"] == 1


def test_compaction_keeps_metrics(scripted):
    store, _ = scripted
    before = lifecycle_metrics(store)
    n_access = store.engine.catalog.query_one("SELECT count(*) FROM access_log")[0]
    # cutoff at 8 d: old feedback (4 rows) and the pin go; transitions stay (default keep kinds)
    removed = compact_events(store, older_than_s=12 * DAY)
    assert removed == 5
    after = lifecycle_metrics(store)
    assert after["compaction"]["cutoff"] == D0 + 8 * DAY
    assert after["compaction"]["folded_events"] == {"feedback": 4, "pin": 1}
    for key in ("events", "survival", "access_at_end", "reactivation", "value", "tiers"):
        assert after[key] == before[key], key
    # old access days are one row per memory, dated the day before the cutoff
    rows = store.engine.catalog.query("SELECT id, day, count FROM access_log ORDER BY id")
    assert rows == [("f1", D + 7, 1), ("f2", D + 7, 3), ("f3", D + 7, 2), ("n1", D + 7, 1)]
    assert len(rows) == n_access
    assert compact_events(store, older_than_s=12 * DAY) == 0  # idempotent


def test_compaction_of_every_kind_keeps_counts_value_and_series_from_cutoff(scripted):
    store, _ = scripted
    before = lifecycle_metrics(store)
    removed = compact_events(store, older_than_s=12 * DAY, keep_kinds=())
    # every event before 8 d: 6 creates, 3 archives, 1 delete, 1 restore, 2 demotes,
    # 1 promote, 4 feedback, 1 pin
    assert removed == 19
    assert store.engine.catalog.query_one("SELECT count(*) FROM events")[0] == 2  # n1 archive@10, feedback@15
    after = lifecycle_metrics(store)
    assert after["events"] == before["events"]
    assert after["value"] == before["value"]
    # The series starts at the cutoff day from the folded counts and matches from there on.
    i = before["tiers"]["days"].index(D + 8)
    assert after["tiers"]["days"] == before["tiers"]["days"][i:]
    for tier in ("hot", "warm", "cold"):
        assert after["tiers"][tier] == before["tiers"][tier][i:]
    # survival only sees memories whose creation is still logged (documented loss)
    assert after["survival"]["all"]["memories"] == 0


def test_prometheus_counters_survive_compaction(scripted):
    from tierstore.analytics.prometheus import metrics_text

    store, _ = scripted
    before = metrics_text(store)
    compact_events(store, older_than_s=12 * DAY, keep_kinds=())
    assert metrics_text(store) == before


def test_bad_arguments(scripted):
    store, _ = scripted
    with pytest.raises(InvalidInputError, match="reactivation_days"):
        lifecycle_metrics(store, reactivation_days=0)
    with pytest.raises(InvalidInputError, match="now"):
        lifecycle_metrics(store, now=float("nan"))
    with pytest.raises(InvalidInputError, match="older_than_s"):
        compact_events(store, older_than_s=-1)
    with pytest.raises(InvalidInputError, match="unknown event kinds"):
        compact_events(store, older_than_s=DAY, keep_kinds=("create", "explode"))
    with pytest.raises(InvalidInputError, match="not one string"):
        compact_events(store, older_than_s=DAY, keep_kinds="create")
    assert "delete" in DEFAULT_KEEP_KINDS


def test_summary_text(scripted):
    store, _ = scripted
    text = format_summary(lifecycle_metrics(store))
    assert "median survival: fact 2 d (3 ended, 1 not yet; 1 hot or warm now)" in text
    assert "reactivated within 7 d: 33.3 % (2/6, 0 pending); brought back: promoted 1, restored 1" in text


def test_reactivation_says_what_brought_memories_back(tmp_path, rng):
    # a duplicate of an archived memory comes back as re-added, a touched cold one as used
    clock = ManualClock(D0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        said = unit(rng)
        store.add("a", "standup moved to 10am", said, memory_type="conversation", id="again")
        store.add("a", "the build is green", unit(rng), memory_type="conversation", id="used")
        clock.advance(2 * 3600)
        assert store.sweep().archived == 2
        clock.advance(3600)
        assert store.add("a", "standup moved to 10am", said, memory_type="conversation") == "again"
        store.touch("a", "used")
        assert store.get("a", "again").tier == "hot" and store.get("a", "used").tier == "hot"
        r = lifecycle_metrics(store)["reactivation"]
        assert r["by_cause"] == {"used": 1, "promoted": 0, "re-added": 1, "restored": 0}
        assert "brought back: used 1, re-added 1" in format_summary(lifecycle_metrics(store))


def test_empty_store(store):
    m = lifecycle_metrics(store)
    assert m["events"]["total"] == 0 and m["survival"]["all"]["median_s"] is None
    assert m["reactivation"]["rate"] is None and m["value"]["top"] == []
    assert m["tiers"]["days"] == []
    json.dumps(m)


def test_kaplan_meier_by_hand():
    # ends at 1, 3; censored at 2, 4: S(1) = 3/4, S(3) = 3/4 · (1 - 1/2) = 3/8
    curve = kaplan_meier([1, 2, 3, 4], [True, False, True, False])
    assert curve == [(0.0, 1.0), (1.0, 0.75), (3.0, 0.375)]
    assert survival_quantile(curve, 0.5) == 3.0 and survival_quantile(curve, 0.9) is None
    # a tie: the end at 2 is processed before the censoring at 2
    assert kaplan_meier([2, 2], [False, True]) == [(0.0, 1.0), (2.0, 0.5)]


# ---------------------------------------------------------------- Prometheus

SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})? '
    r"(-?[0-9.eE+-]+|NaN|[+-]Inf)$"
)
META = re.compile(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$")


def parse_exposition(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every line is a sample ``name{labels} value`` or a ``# HELP``/``# TYPE`` line."""
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert META.match(line), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = tuple(sorted(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def test_prometheus_text_parses_and_matches_stats(scripted):
    from tierstore.analytics.prometheus import metrics_text

    store, _ = scripted
    text = metrics_text(store)
    samples = parse_exposition(text)
    stats = store.stats()
    assert "# TYPE tierstore_events_total counter" in text and "# TYPE tierstore_memories gauge" in text
    for mtype, per in stats.by_type.items():
        for tier, n in per.items():
            assert samples[("tierstore_memories", (("tier", tier), ("type", mtype)))] == n
    assert sum(v for (name, _), v in samples.items() if name == "tierstore_memories") == stats.total
    assert samples[("tierstore_pinned", ())] == stats.pinned == 2
    assert samples[("tierstore_due_now", ())] == stats.due_now
    assert samples[("tierstore_namespaces", ())] == stats.namespaces == 1
    for part, n in stats.memory_bytes.items():
        assert samples[("tierstore_memory_bytes", (("part", part),))] == n
    assert stats.memory_bytes["hot"] > 0
    assert samples[("tierstore_accesses_total", ())] == 7  # 6 touched ids + the touch that promoted n1
    by_kind = lifecycle_metrics(store)["events"]["by_kind"]
    for kind, n in by_kind.items():
        assert samples[("tierstore_events_total", (("kind", kind),))] == n


def test_prometheus_client_collector_exposes_the_same_samples(scripted):
    from prometheus_client import CollectorRegistry, generate_latest

    from tierstore.analytics.prometheus import TierStoreCollector, metrics_text

    store, _ = scripted
    registry = CollectorRegistry()
    registry.register(TierStoreCollector(store))
    theirs = parse_exposition(generate_latest(registry).decode())
    assert theirs == parse_exposition(metrics_text(store))

"""Trace replay under several policies (tierstore simulate)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from helpers import DIM, T0

from tierstore import ManualClock, Policy, TierStore
from tierstore.analytics.simulate import format_comparison, policy_changes, simulate
from tierstore.errors import CorruptDataError, InvalidInputError, PolicyError
from tierstore.tools.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
TRACE = EXAMPLES / "trace.jsonl.gz"
KEEP = EXAMPLES / "policy-keep-longer.toml"
FORGET = EXAMPLES / "policy-forget-faster.toml"
HOUR = 3600.0
DAY = 86400.0


def record(tmp_path: Path, script, labels: dict[int, dict] | None = None) -> Path:
    """Record ``script(store, clock)`` as a trace; ``labels`` adds fields to the n-th search line."""
    raw = tmp_path / "raw.jsonl"
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "rec", dim=DIM, clock=clock) as store:
        store.start_trace(raw)
        script(store, clock)
    out = tmp_path / "trace.jsonl"
    n = 0
    with open(raw) as src, open(out, "w") as dst:
        for line in src:
            rec = json.loads(line)
            if rec["op"] == "search":
                rec.update((labels or {}).get(n, {}))
                n += 1
            dst.write(json.dumps(rec) + "\n")
    return out


# ---------------------------------------------------------------- the shipped example


@pytest.fixture(scope="module")
def example():
    return simulate(TRACE, [KEEP, FORGET])


@pytest.mark.slow
def test_example_policies_differ_in_explainable_ways(example):
    keep, forget = example
    assert (keep.name, forget.name) == ("policy-keep-longer", "policy-forget-faster")
    assert keep.records == forget.records == sum(keep.replayed.values()) > 1000
    assert keep.sweeps == forget.sweeps > 1000  # hourly over 45 days
    # forgetting faster: a smaller hot tier, more archived, more brought back, fewer stale answers...
    assert forget.hot_mean < 0.6 * keep.hot_mean and forget.hot_final < keep.hot_final
    assert forget.hot_bytes_mean == forget.hot_mean * 32 * 4
    assert forget.archived > keep.archived and forget.archived_from_hot > keep.archived_from_hot
    # the recording agent touched what its own searches showed; memories this policy had archived are not
    # touched in its replay (a touch would reactivate them), and are counted
    assert forget.unseen_touches > keep.unseen_touches
    assert forget.reactivations > keep.reactivations
    assert forget.labelled_searches == keep.labelled_searches > 20
    # automatic supersession (the default bars, inherited by both) retires each superseded home fact
    assert forget.stale_hits == keep.stale_hits == 0
    # ... and the current home fact is sometimes gone too (archived after a week unused)
    assert forget.live_recall < keep.live_recall
    assert keep.label_types == forget.label_types and set(keep.label_types) == {"fact"}
    fact_keep = keep.lifecycle["survival"]["by_type"]["fact"]
    fact_forget = forget.lifecycle["survival"]["by_type"]["fact"]
    assert fact_keep["median_s"] is None and fact_forget["median_s"] is not None
    json.dumps([r.as_dict() for r in example])


@pytest.mark.slow
def test_comparison_explains_each_difference(example):
    keep, forget = example
    text = format_comparison(example)
    assert "why policy-forget-faster differs from policy-keep-longer:" in text
    pct = round(100 * (keep.hot_mean - forget.hot_mean) / keep.hot_mean)
    assert f"hot footprint: {pct} % smaller hot tier" in text
    assert f"archived: policy-forget-faster archives {forget.archived - keep.archived} more" in text
    assert f"stale hits: the same ({keep.stale_hits}/{keep.labelled_searches})" in text
    assert "live recall:" in text and "reactivations:" in text
    hot_line = next(line for line in text.splitlines() if line.strip().startswith("hot footprint:"))
    assert "fact half-life 30 d → 2 d" in hot_line
    assert "policy-forget-faster forgets sooner" in text


@pytest.mark.slow
def test_query_time_resolution_cuts_the_stale_hits_of_the_trace_as_automatic_supersession_did(tmp_path):
    """The same trace: the default policy (query-time resolution, no
    automatic supersession), the former default (automatic supersession of
    facts at 0.7, nothing resolved) and neither: without both the stale
    answers come back, nothing else that is scored changes, and the
    explanation names what differs."""
    auto = tmp_path / "auto-supersession.toml"
    auto.write_text(
        "[types.fact]\nsupersede_above = 0.7\nsupersede_above_shared_tag = 0.6\n[scoring]\ncold_estimate = false\n"
        "[supersession]\nresolve_margin = false\nresolve_margin_shared_tag = false\n"
        "superseded_factor = 1.0\n"
    )
    neither = tmp_path / "neither.toml"
    neither.write_text("[supersession]\nresolve_margin = false\nresolve_margin_shared_tag = false\n")
    default, former, none = simulate(TRACE, [Policy.default(), auto, neither])
    assert none.stale_hits > 20 and default.stale_hits == 0 and former.stale_hits == 0
    assert default.live_recall == former.live_recall == none.live_recall == 1.0
    text = format_comparison([default, none])
    stale_line = next(line for line in text.splitlines() if line.strip().startswith("stale hits:"))
    assert stale_line.startswith(f"  stale hits: {none.stale_hits} more searches answered first by a superseded")
    assert "supersession resolution margin 0.1 → off" in stale_line


@pytest.mark.slow
def test_cli_simulate_prints_the_comparison(capsys):
    assert main(["simulate", "--trace", str(TRACE), "--policy", str(KEEP), "--policy", str(FORGET)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert "policy-keep-longer" in header and "policy-forget-faster" in header
    hot = re.search(r"hot memories, mean\s+([\d.]+)\s+([\d.]+)", out)
    assert hot and float(hot.group(1)) != float(hot.group(2))
    for line in ("hot footprint:", "archived:", "reactivations:", "stale hits:", "live recall:", "survival of fact:"):
        assert "\n  " + line in out, line


# ---------------------------------------------------------------- by hand


def _home_script(store, clock):
    store.add("u", "lives in Lisbon", unit_vec(0), memory_type="fact", id="old")
    clock.advance(DAY)
    store.add("u", "moved to Berlin", unit_vec(1), memory_type="fact", id="new")
    clock.advance(HOUR)
    store.search("u", unit_vec(0), k=1, record_access=False)


def unit_vec(i: int):
    import numpy as np

    v = np.zeros(DIM, np.float32)
    v[i] = 1.0
    v[(i + 2) % DIM] = 0.1
    return v / np.linalg.norm(v)


def test_stale_hit_and_live_recall_by_hand(tmp_path):
    trace = record(tmp_path, _home_script, {0: {"stale": ["old"], "live": ["new"]}})
    # A keeps facts 30 d: the old home is still there and is the query's nearest: a stale hit, new not found.
    # B archives facts after 12 h: by the search (25 h) only the new home is hot. Both search hot and warm
    # only: the query matches nothing but the old home, so "auto" would reach the archive and find it there.
    hot_only = {"scoring": {"include_cold": False}}
    short = Policy.from_dict(
        {"types": {"fact": {"ttl": "12h", "refresh_on_read": False}}, "confidence": {"ttl_floor": 1.0}, **hot_only}
    )
    a, b = simulate(trace, [Policy.from_dict(hot_only), short], sweep_interval_s=HOUR)
    assert (a.name, b.name) == ("policy 1", "policy 2")
    assert (a.labelled_searches, a.stale_hits, a.live_recall) == (1, 1, 0.0)
    assert (b.labelled_searches, b.stale_hits, b.live_recall) == (1, 0, 1.0)
    assert (a.archived, b.archived) == (0, 1)
    assert a.sweeps == 25 + 1 and a.hot_samples[:24] == [1] * 24 and a.hot_final == 2
    assert b.hot_samples[11] == 0 and b.hot_final == 1  # old archived by the 12 h sweep
    assert (b.dim, b.hot_bytes_final) == (DIM, DIM * 4)
    text = format_comparison([a, b])
    assert (
        "stale hits: 1 fewer searches answered first by a superseded memory (0/1 vs 1/1) - fact TTL 30 d → 12 h" in text
    )
    assert "live recall: 1.000 higher (1.000 vs 0.000)" in text


def _forgotten_script(store, clock):
    store.add("u", "a short-lived fact", unit_vec(0), memory_type="fact", ttl_seconds=600, id="m")
    store.add("u", "another", unit_vec(1), memory_type="fact", id="keep")
    clock.advance(2 * HOUR)
    store.touch("u", ["m", "keep", "m"])
    store.feedback("u", "m", positive=True)
    store.pin("u", "m")
    store.restore("u", ids=["m"])
    store.delete("u", "m")


def test_operations_on_memories_the_policy_forgot_are_skipped_and_counted(tmp_path):
    trace = record(tmp_path, _forgotten_script)
    # B deletes what expires (confidence 0.8 is below its 0.9 bar, and B's sweep deletes facts); A archives it.
    deleting = Policy.from_dict(
        {"thresholds": {"delete_below_confidence": 0.9}, "types": {"fact": {"sweep_deletes": True}}}
    )
    a, b = simulate(trace, [Policy.default(), deleting], sweep_interval_s=600)
    assert a.skipped == {} and a.archived == 1 and a.explicit_deletes == 1
    # touch names m twice (2 skipped ids; keep is still touched), then feedback, pin, restore, delete of m
    assert b.skipped == {"touch": 2, "feedback": 1, "pin": 1, "restore": 1, "delete": 1}
    assert b.skipped_types == {"fact": 6}
    assert b.deleted == 1 and b.explicit_deletes == 0
    assert b.replayed["touch"] == 1 and b.replayed["add"] == 2
    text = format_comparison([a, b])
    assert re.search(r"skipped operations\s+0\s+6", text)
    assert "skipped: 6 vs 0 replayed operations named a memory the policy had already deleted" in text
    assert "delete below confidence threshold 0.3 → 0.9" in text
    assert "fact now deleted by the sweep" in text


def test_gzip_trace_and_json_cli(tmp_path, capsys):
    trace = record(tmp_path, _home_script, {0: {"stale": ["old"], "live": ["new"]}})
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(trace.read_bytes()))
    pol = tmp_path / "short.toml"
    pol.write_text('[types.fact]\nttl = "12h"\nrefresh_on_read = false\n[scoring]\ninclude_cold = false\n')
    assert main(["simulate", "--trace", str(gz), "--policy", str(pol), "--sweep-interval", "3600", "--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    assert res["name"] == "short" and res["source"] == str(pol)
    assert (res["stale_hits"], res["labelled_searches"], res["records"]) == (0, 1, 3)
    assert res["lifecycle"]["events"]["by_kind"]["create"] == 2


def test_bad_inputs(tmp_path):
    trace = record(tmp_path, _home_script)
    with pytest.raises(InvalidInputError, match="no trace file"):
        simulate(tmp_path / "missing.jsonl", [Policy.default()])
    with pytest.raises(InvalidInputError, match="at least one policy"):
        simulate(trace, [])
    with pytest.raises(InvalidInputError, match="sweep_interval_s"):
        simulate(trace, [Policy.default()], sweep_interval_s=0)
    with pytest.raises(PolicyError, match="cannot read policy file"):
        simulate(trace, [tmp_path / "nope.toml"])
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(CorruptDataError, match="gzip"):
        simulate(bad, [Policy.default()])
    # a record the replay cannot make sense of names its position
    broken = tmp_path / "broken.jsonl"
    broken.write_text(trace.read_text() + json.dumps({"op": "touch", "t": T0 + 2 * DAY, "ns": "u"}) + "\n")
    with pytest.raises(CorruptDataError, match="record 4 \\(touch\\)"):
        simulate(broken, [Policy.default()])
    # a trace whose memory type the policy lacks
    typed = tmp_path / "typed.jsonl"
    typed.write_text(trace.read_text().replace('"memory_type": "fact"', '"memory_type": "note"', 1))
    with pytest.raises(PolicyError, match="cannot replay record 1"):
        simulate(typed, [Policy.default()])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InvalidInputError, match="no records"):
        simulate(empty, [Policy.default()])


def test_policy_changes_directions():
    a = Policy.default()
    b = Policy.from_dict({"types": {"fact": {"ttl": "7d", "half_life": "20d"}}, "thresholds": {"demote": 0.4}})
    got = {(c.category, c.text, c.direction) for c in policy_changes(a, b)}
    assert got == {
        ("ttl", "fact TTL 30 d → 7 d", -1),
        ("half_life", "fact half-life 10 d → 20 d", 1),
        ("demote", "demote threshold 0.3 → 0.4", -1),
    }
    assert policy_changes(a, b, {"task"}) == [c for c in policy_changes(a, b) if c.memory_type is None]


def test_policy_changes_name_supersession_and_dedupe():
    a = Policy.default()
    b = Policy.from_dict(
        {"dedupe": "off", "types": {"preference": {"supersede_above": 0.5}}, "supersession": {"confidence_margin": 0.3}}
    )
    texts = {c.text: c.direction for c in policy_changes(a, b)}
    bar = a.types["preference"].supersede_above
    assert texts[f"preference automatic supersession bar {'off' if bar is None else bar} → 0.5"] == -1
    assert texts["dedupe exact → off"] == 0 and "supersession confidence margin 0.1 → 0.3" in texts
    assert policy_changes(a, b, types={"fact"}) == [c for c in policy_changes(a, b) if c.memory_type is None]


def test_policy_changes_name_ranking_by_use():
    a = Policy.default()
    b = Policy.from_dict({"types": {"fact": {"ranked_by_use": True}, "preference": {"ranked_by_use": False}}})
    got = {(c.category, c.text, c.direction, c.memory_type) for c in policy_changes(a, b)}
    assert got == {
        ("ranked_by_use", "fact now ranked by use in search", 0, "fact"),
        ("ranked_by_use", "preference no longer ranked by use in search", 0, "preference"),
    }

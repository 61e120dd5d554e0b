"""tierstore report (HTML + PNG plots), stats --json with lifecycle metrics.

The plots are checked through the matplotlib figures the report builds (axis
limits, legends, lines), not by reading PNGs; tests/analytics/test_report_render.py
loads the page in a browser.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import shutil
import sys

import numpy as np
import pytest
from helpers import DIM
from test_lifecycle_metrics import D0, DAY, POLICY, D, script

from tierstore import ManualClock, TierStore
from tierstore.analytics.lifecycle import lifecycle_metrics
from tierstore.analytics.report import (
    PLOTS,
    access_figure,
    decay_figure,
    duration,
    no_data,
    reactivation_figure,
    survival_figure,
    tier_counts,
    tiers_figure,
    type_fate,
    weight_curve,
    when,
    write_report,
)
from tierstore.errors import InvalidInputError, MissingDependencyError
from tierstore.tools.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FIGURES = {
    "decay": decay_figure,
    "survival": survival_figure,
    "tiers": tiers_figure,
    "reactivation": reactivation_figure,
    "access": access_figure,
}


@pytest.fixture(scope="module")
def scripted_master(tmp_path_factory):
    """The scripted lifecycle, run once per module (it takes seconds); tests get copies."""
    clock = ManualClock(D0)
    path = tmp_path_factory.mktemp("report") / "scripted-store"
    with TierStore.open(path, dim=DIM, policy=POLICY, clock=clock) as store:
        script(store, clock, np.random.default_rng(5))
        metrics = json.loads(json.dumps(lifecycle_metrics(store)))  # a JSON round trip, like a saved dict
    return path, metrics


@pytest.fixture
def scripted_path(scripted_master, tmp_path):
    """A closed copy of the scripted store (the CLI opens it itself; a test may change it)."""
    path = tmp_path / "scripted-store"  # not "store": the conftest fixture of that name lives there
    shutil.copytree(scripted_master[0], path)
    return path


@pytest.fixture
def scripted_metrics(scripted_master):
    """The scripted store's metrics at 20 d."""
    return copy.deepcopy(scripted_master[1])


def check_report(out, drawn=PLOTS):
    """The page links exactly the ``drawn`` plots, each a real PNG; the others say why not."""
    page = out / "index.html"
    text = page.read_text()
    for name in PLOTS:
        png = out / f"{name}.png"
        if name in drawn:
            assert f'src="{name}.png"' in text
            data = png.read_bytes()
            assert data[:8] == PNG_MAGIC and len(data) > 1024, name
        else:
            assert f'src="{name}.png"' not in text and not png.exists(), name
    assert text.count('class="nodata"') == len(PLOTS) - len(drawn)
    return text


def day_num(day: float) -> float:
    """matplotlib's date number of a POSIX day number (what a date axis's limits are in)."""
    from matplotlib.dates import date2num

    return float(date2num(dt.datetime.fromtimestamp(day * DAY, dt.UTC)))


@pytest.mark.slow
def test_cli_report_writes_html_and_pngs(scripted_path, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(scripted_path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    text = check_report(out)
    assert "<h2>Survival</h2>" in text and "Reactivation" in text
    # the scripted answers appear in the tables: facts' median survival 2 d, reactivation 2 of 6
    # fact: 4 memories, 3 first lives ended, 1 not yet, 2 archived, 1 deleted, ..., 1 hot or warm now (f3)
    assert (
        "<td>fact</td><td>4</td><td>3</td><td>1</td><td>2</td><td>1</td><td>2 days</td><td>n/a</td><td>1</td>" in text
    )
    assert "<td>all</td><td>2</td><td>6</td><td>33.3 %</td>" in text
    # The CLI draws a store at its own time (the scripted store ran on a 2023 ManualClock),
    # not at the wall clock years later: no idle gap up to "now" to explain.
    assert "No tier changed after" not in text


def test_report_from_a_metrics_dict(scripted_metrics, tmp_path):
    page = write_report(scripted_metrics, tmp_path / "r", boost_every_s=86400)
    text = check_report(tmp_path / "r")
    assert page == tmp_path / "r" / "index.html"
    assert "used every 24 hours: lowest weight" in text
    with pytest.raises(InvalidInputError, match="now applies to a store"):
        write_report(scripted_metrics, tmp_path / "r", now=D0)


def test_report_of_an_empty_store(store, tmp_path):
    """Nothing to draw but the policy: each plot says why instead of drawing empty axes."""
    text = check_report(write_report(store, tmp_path / "r").parent, drawn=("decay",))
    m = lifecycle_metrics(store)
    for name in ("survival", "tiers", "reactivation", "access"):
        assert FIGURES[name](m) is None
        assert html_escaped(no_data(name, m)) in text and no_data(name, m).startswith("No data yet")
    # the counts table: every policy type, all zero, no negative count
    rows, total = tier_counts(m)
    assert [r[0] for r in rows] == list(store.policy.types) and total == ["all types", 0, 0, 0, 0]
    assert "<td>all types</td><td>0</td><td>0</td><td>0</td><td>0</td>" in text
    assert "0 lifecycle events." in text and "No history yet." in text


def html_escaped(s: str) -> str:
    import html

    return html.escape(s)


@pytest.mark.slow
def test_a_plot_without_data_leaves_no_stale_png(scripted_path, store, tmp_path):
    out = tmp_path / "r"
    with TierStore.open(scripted_path, policy=POLICY, clock=ManualClock(D0 + 20 * DAY)) as scripted:
        check_report(write_report(scripted, out).parent)
    check_report(write_report(store, out).parent, drawn=("decay",))  # the same folder, now empty


def test_report_of_a_one_day_store(tmp_path, rng):
    """A day of history: survival and accesses are drawn (hours), the tier series is one
    point, so the page points at the counts table instead of drawing it."""
    from helpers import unit

    t0 = 1_764_633_600.0 + 8 * 3600  # 2025-12-02 08:00 UTC
    clock = ManualClock(t0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        for hour in range(10):
            store.add("u", f"chat {hour}", unit(rng), memory_type="conversation")
            store.add("u", f"fact {hour}", unit(rng), memory_type="fact")
            clock.set(t0 + (hour + 1) * 3600)
            store.sweep()
        m = lifecycle_metrics(store)
        text = check_report(write_report(store, tmp_path / "r").parent, drawn=("decay", "survival", "access"))
    assert len(m["tiers"]["days"]) == 1 and tiers_figure(m) is None
    assert "One day of history so far (2025-12-02)" in text and "History: 2025-12-02 (one day)." in text
    # conversations expire after 60 minutes: the survival axis is in hours and ends with the data
    ax = survival_figure(m).axes[0]
    assert ax.get_xscale() == "linear" and ax.get_xlabel() == "hours since creation"
    assert ax.get_xlim() == pytest.approx((0, m["survival"]["all"]["longest_s"] / 3600))
    assert "<td>conversation</td><td>0</td><td>0</td><td>" in text  # none left hot


def test_tier_axis_spans_the_stores_days(scripted_metrics):
    fig = tiers_figure(scripted_metrics)
    top, bottom = fig.axes
    # days D .. D + 20 (the last one holds "now"), from the empty day before the first event;
    # each day's step spans [d, d + 1)
    assert bottom.get_xlim() == pytest.approx((day_num(D - 1), day_num(D + 21)))
    assert top.get_xlim() == bottom.get_xlim()
    for ax in (top, bottom):
        assert ax.get_ylim()[0] == 0
        for steps in ax.patches:  # each tier's counts rise from 0, the store before its first memory
            assert steps.get_data().values[0] == 0
    assert [list(p.get_data().values[:2]) for p in top.patches] == [[0, 6], [0, 0]]  # hot, warm
    assert top.get_ylim()[1] == pytest.approx(6 * 1.08)  # six hot memories on day 0
    assert bottom.get_ylim()[1] == pytest.approx(3 * 1.08)


def test_tier_axis_cuts_a_long_idle_tail(scripted_path):
    """Drawn 1000 days after its last transition (day 10), the plot ends a day after it."""
    with TierStore.open(scripted_path, policy=POLICY, clock=ManualClock(D0 + 1000 * DAY)) as store:
        m = lifecycle_metrics(store)
    assert len(m["tiers"]["days"]) == 1001
    assert tiers_figure(m).axes[1].get_xlim() == pytest.approx((day_num(D - 1), day_num(D + 12)))


def test_survival_axis_ends_with_the_data(scripted_metrics):
    # ends at 1, 2, 5, 10 days; the longest life observed is f3's 20 days (alive)
    ax = survival_figure(scripted_metrics).axes[0]
    assert ax.get_xscale() == "linear" and ax.get_xlabel() == "days since creation"
    assert ax.get_xlim() == pytest.approx((0, 20))
    assert ax.get_ylim() == pytest.approx((0, 1.02))
    # lives from ten minutes to 20 days: a log axis, in seconds, labelled in readable durations
    m = copy.deepcopy(scripted_metrics)
    m["survival"]["by_type"]["note"]["curve"] = [[0.0, 1.0], [600.0, 0.5]]
    ax = survival_figure(m).axes[0]
    assert ax.get_xscale() == "log"
    assert ax.get_xlim() == pytest.approx((300, 20 * DAY))
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["10 min", "1 h", "6 h", "1 day", "1 week"]


def test_reactivation_axis_fits_the_bars(scripted_metrics):
    # tallest bar: notes, 1 of 2 demotions promoted back (50 %); room above it for its label
    ax = reactivation_figure(scripted_metrics).axes[0]
    assert ax.get_ylim() == pytest.approx((0, 0.5 * 1.25))
    # the case: bars of 13 % get an axis to about 16 %, not 0-110 %
    m = copy.deepcopy(scripted_metrics)
    for part in m["reactivation"]["by_type"].values():
        for kind in part["by_kind"].values():
            if kind["denominator"]:
                kind["rate"] = min(kind["rate"], 0.13)
    ax = reactivation_figure(m).axes[0]
    assert ax.get_ylim() == pytest.approx((0, 0.13 * 1.25))
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["0%", "5%"]


def test_no_axis_goes_negative_and_legends_sit_outside_the_data(scripted_metrics):
    for name, make in FIGURES.items():
        fig = make(scripted_metrics)
        fig.canvas.draw()
        legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
        for ax in fig.axes:
            assert ax.get_ylim()[0] >= 0, name
            box = ax.get_window_extent()
            for legend in legends:
                assert not legend.get_window_extent().overlaps(box), name
        if name != "access":  # one series: no legend needed
            assert legends, name


def test_decay_shows_what_differs_between_types(scripted_metrics):
    """One time axis for every type: the curves end at different times (their TTL or the
    archive threshold), instead of one curve per panel relabelled."""
    types = scripted_metrics["policy"]["types"]
    fig = decay_figure(scripted_metrics)
    top, bottom = fig.axes
    assert top.get_xscale() == "log" and top.get_ylim()[0] == 0
    curves = [line for line in top.get_lines() if len(line.get_xdata()) > 2]
    assert len(curves) == len(types)
    ends = {round(float(line.get_xdata()[-1])) for line in curves}
    assert len(ends) >= 4  # task and opinion share a half-life but not a TTL
    # by hand: a conversation (W0 1, half-life 20 min) falls to demote 0.3 after
    # 20·log2(1/0.3) = 34.7 min; archive 0.1 would take 66 min, its 60 min TTL comes first
    th = scripted_metrics["policy"]["thresholds"]
    fate = type_fate(types["conversation"], th, types["conversation"]["half_life_s"])
    assert fate["leaves_hot_s"] == pytest.approx(1200 * np.log2(1 / 0.3))
    assert fate["archived_s"] == 3600 and fate["by_ttl"]
    # used once per half-life the troughs are boost·q/(1-q) = 0.5 (q = 1/2): stays hot,
    # but the TTL is not refreshed on read: archived at 60 min anyway
    assert fate["used_low"] == pytest.approx(0.5) and fate["used_archived_s"] == 3600
    assert type_fate(types["fact"], th, DAY)["used_archived_s"] is None  # no TTL


def test_decay_of_unusual_policies(scripted_metrics):
    """A TTL far shorter than every half-life and a type archived at birth still draw."""
    m = copy.deepcopy(scripted_metrics)
    m["policy"]["types"] = {
        "blink": {"ttl_s": 60.0, "half_life_s": 3600.0, "boost": 0.5, "initial_weight": 1.0, "refresh_on_read": False},
        "stillborn": {
            "ttl_s": None,
            "half_life_s": 3600.0,
            "boost": 0.0,
            "initial_weight": 0.05,
            "refresh_on_read": False,
        },
    }
    top, _ = decay_figure(m).axes
    assert top.get_xlim()[0] <= 15 and top.get_ylim()[0] == 0
    drawn = [line for line in top.get_lines() if len(line.get_xdata()) > 2]
    assert len(drawn) == 1 and drawn[0].get_xdata()[-1] == pytest.approx(60)  # blink, to its TTL
    th = m["policy"]["thresholds"]
    assert type_fate(m["policy"]["types"]["stillborn"], th, 3600.0)["archived_s"] == 0


def test_counts_table_per_tier_and_type(scripted_metrics, tmp_path):
    rows, total = tier_counts(scripted_metrics)
    by_name = {r[0]: r[1:] for r in rows}
    assert by_name["fact"] == [1, 0, 2, 3] and by_name["note"] == [1, 0, 1, 2]
    assert by_name["task"] == [0, 0, 0, 0]  # a policy type with no memories is listed
    assert total == ["all types", 2, 0, 3, 5]
    text = write_report(scripted_metrics, tmp_path / "r").read_text()
    assert "<h2>Memories now</h2>" in text
    assert "<td>fact</td><td>1</td><td>0</td><td>2</td><td>3</td>" in text
    assert '<tr class="total"><td>all types</td><td>2</td><td>0</td><td>3</td><td>5</td></tr>' in text


def test_readable_times(scripted_metrics, tmp_path):
    assert when(D0) == "2023-11-15 00:00 UTC" and when(D0 + 14 * 3600 + 5 * 60 + 7.25) == "2023-11-15 14:05 UTC"
    assert [duration(s) for s in (1, 30, 150, 3600, 5.5 * 3600, DAY, 3.2 * DAY, 23.4 * DAY, 1000 * DAY)] == [
        "1 second",
        "30 seconds",
        "2.5 minutes",
        "60 minutes",
        "5.5 hours",
        "24 hours",
        "3.2 days",
        "23 days",
        "2.7 years",
    ]
    assert duration(None) == "n/a"
    text = write_report(scripted_metrics, tmp_path / "r").read_text()
    assert "As of <strong>2023-12-05 00:00 UTC</strong>" in text
    assert "History from 2023-11-15 to 2023-12-05 (21 days)." in text
    assert not re.search(r"\d{2}:\d{2}:\d{2}|T\d{2}:\d{2}|\+00:00", text)  # no ISO stamps, no seconds
    assert not re.search(r"<td>[0-9.]+ (d|h|min|s)</td>", text)  # durations spelt out


def test_write_report_now_draws_the_store_at_its_own_time(scripted_path, tmp_path):
    # The store's clock says year 3000; now = 4 d draws it as it was then.
    with TierStore.open(scripted_path, policy=POLICY, clock=ManualClock(32_503_680_000.0)) as store:
        text = write_report(store, tmp_path / "r", now=D0 + 4 * DAY).read_text()
    assert "As of <strong>2023-11-19 00:00 UTC</strong>" in text
    assert "<td>fact</td><td>3</td><td>0</td><td>0</td><td>3</td>" in text  # f1 deleted; f4 restored by 3 d
    assert "History from 2023-11-15 to 2023-11-19 (5 days)." in text


def test_report_bad_input(tmp_path):
    with pytest.raises(InvalidInputError, match="missing"):
        write_report({"survival": {}}, tmp_path / "r")


def test_missing_matplotlib_says_which_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    with pytest.raises(MissingDependencyError, match=re.escape("pip install '.[report]' in a clone of tierstore")):
        write_report({}, tmp_path / "r")


def test_weight_curve_by_hand():
    # W0 = 1, half-life 1, boost 0.5 at t = 1, 2, ...: W(1) = 0.5 + 0.5 = 1, W(1.5) = 2^-0.5
    ts = [0.0, 0.5, 1.0, 1.5, 2.0]
    assert weight_curve(1.0, 1.0, 0.5, None, ts) == pytest.approx([1, 2**-0.5, 0.5, 2**-1.5, 0.25])
    assert weight_curve(1.0, 1.0, 0.5, 1.0, ts) == pytest.approx([1, 2**-0.5, 1.0, 2**-0.5, 1.0])


def test_cli_stats_json_includes_lifecycle(scripted_path, capsys):
    assert main(["stats", str(scripted_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    life = data["lifecycle"]
    assert data["by_tier"] == {"hot": 2, "warm": 0, "cold": 3}
    assert life["survival"]["by_type"]["fact"]["median_s"] == 2 * 86400
    assert life["reactivation"]["numerator"] == 2
    assert main(["stats", str(scripted_path)]) == 0
    text = capsys.readouterr().out
    assert "median survival: fact" in text and "reactivated within 7 d" in text


def test_tier_counts_by_type_at_now(scripted_path):
    """The counts table's source: per type and tier at ``now``, rebuilt from the events
    (and from what compaction folded), equal to the catalog at the store's time."""
    from test_lifecycle_metrics import DAY

    from tierstore.analytics.lifecycle import compact_events

    with TierStore.open(scripted_path, policy=POLICY, clock=ManualClock(D0 + 20 * DAY)) as store:
        m = lifecycle_metrics(store)
        assert (
            m["tiers"]["by_type"]
            == store.stats().by_type
            == {"fact": {"hot": 1, "warm": 0, "cold": 2}, "note": {"hot": 1, "warm": 0, "cold": 1}}
        )
        # at 4 d: f1 deleted, f2 f3 hot, f4 restored to hot; n1 promoted back, n2 pinned
        early = lifecycle_metrics(store, now=D0 + 4 * DAY)["tiers"]["by_type"]
        assert early == {"fact": {"hot": 3, "warm": 0, "cold": 0}, "note": {"hot": 2, "warm": 0, "cold": 0}}
        # every tier transition before 8 d compacted away: the per-type counts are folded, not lost
        compact_events(store, older_than_s=12 * DAY, keep_kinds=())
        assert lifecycle_metrics(store)["tiers"]["by_type"] == m["tiers"]["by_type"]


def test_folded_tiers_from_before_per_type_folding_count_as_unknown():
    from tierstore.analytics.lifecycle import _parse_folded

    old = json.dumps({"cutoff": 1.0, "events": {"create": 3}, "tiers": {"hot": 2, "warm": 0, "cold": 1}})
    assert _parse_folded(old)["tiers_by_type"] == {"unknown": {"hot": 2, "warm": 0, "cold": 1}}
    assert _parse_folded(None)["tiers_by_type"] == {}

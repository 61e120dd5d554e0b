"""tierstore report (HTML + PNG plots), stats --json with lifecycle metrics."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from test_lifecycle_metrics import D0, POLICY, script
from tierstore import ManualClock, TierStore
from tierstore.cli import main
from tierstore.errors import InvalidInputError, MissingDependencyError
from tierstore.lifecycle import lifecycle_metrics
from tierstore.report import weight_curve, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("decay.png", "survival.png", "tiers.png", "reactivation.png", "access.png")


@pytest.fixture
def scripted_path(tmp_path):
    """A closed store holding the scripted lifecycle (the CLI opens it itself)."""
    clock = ManualClock(D0)
    path = tmp_path / "store"
    with TierStore.open(path, dim=16, policy=POLICY, clock=clock) as store:
        script(store, clock, np.random.default_rng(5))
    return path


def check_report(out):
    page = out / "index.html"
    text = page.read_text()
    for name in PLOTS:
        assert f'src="{name}"' in text
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1024, name
    return text


def test_cli_report_writes_html_and_pngs(scripted_path, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(scripted_path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    text = check_report(out)
    assert "<h2>Survival</h2>" in text and "Reactivation" in text
    # the scripted answers appear in the tables: facts' median survival 2 d, reactivation 2 of 6
    assert "<td>fact</td><td>4</td><td>3</td><td>1</td><td>2</td><td>1</td><td>2 d</td><td>n/a</td>" in text
    assert "<td>all</td><td>2</td><td>6</td><td>33.3 %</td>" in text


def test_report_from_a_metrics_dict(scripted_path, tmp_path):
    with TierStore.open(scripted_path, policy=POLICY) as store:
        metrics = json.loads(json.dumps(lifecycle_metrics(store, now=D0 + 20 * 86400)))  # as a JSON round trip
    page = write_report(metrics, tmp_path / "r", boost_every_s=86400)
    text = check_report(tmp_path / "r")
    assert page == tmp_path / "r" / "index.html" and "one access every 24 h" in text


def test_report_of_an_empty_store(store, tmp_path):
    check_report(write_report(store, tmp_path / "r").parent)


def test_report_bad_input(tmp_path):
    with pytest.raises(InvalidInputError, match="missing"):
        write_report({"survival": {}}, tmp_path / "r")


def test_missing_matplotlib_says_which_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    with pytest.raises(MissingDependencyError, match=re.escape("pip install tierstore[report]")):
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

    from tierstore.lifecycle import compact_events

    with TierStore.open(scripted_path, policy=POLICY, clock=ManualClock(D0 + 20 * DAY)) as store:
        m = lifecycle_metrics(store)
        assert m["tiers"]["by_type"] == store.stats().by_type == {
            "fact": {"hot": 1, "warm": 0, "cold": 2}, "note": {"hot": 1, "warm": 0, "cold": 1}}
        # at 4 d: f1 deleted, f2 f3 hot, f4 restored to hot; n1 promoted back, n2 pinned
        early = lifecycle_metrics(store, now=D0 + 4 * DAY)["tiers"]["by_type"]
        assert early == {"fact": {"hot": 3, "warm": 0, "cold": 0}, "note": {"hot": 2, "warm": 0, "cold": 0}}
        # every tier transition before 8 d compacted away: the per-type counts are folded, not lost
        compact_events(store, older_than_s=12 * DAY, keep_kinds=())
        assert lifecycle_metrics(store)["tiers"]["by_type"] == m["tiers"]["by_type"]


def test_folded_tiers_from_before_per_type_folding_count_as_unknown():
    from tierstore.lifecycle import _parse_folded

    old = json.dumps({"cutoff": 1.0, "events": {"create": 3}, "tiers": {"hot": 2, "warm": 0, "cold": 1}})
    assert _parse_folded(old)["tiers_by_type"] == {"unknown": {"hot": 2, "warm": 0, "cold": 1}}
    assert _parse_folded(None)["tiers_by_type"] == {}

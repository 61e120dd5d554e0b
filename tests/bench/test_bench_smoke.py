"""Smoke test of ``tierstore bench`` on toy sizes (no peer packages needed).

The real benchmarks take minutes and are not part of ``make test``; this
checks that the machinery runs end to end and prints ratios, and that the
forgetting-quality workload and the peer formulas behave."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import numpy as np
import pytest

from tierstore.bench import forgetting as fq
from tierstore.bench import main, parse_suites
from tierstore.bench.seedref import DictCollection, cleanup_dicts, seed_metadata


@pytest.mark.slow
def test_bench_runs_and_prints_ratios(tmp_path, capsys):
    out_json = tmp_path / "bench.json"
    rc = main(
        [
            "--suite",
            "a,e",
            "--no-progress",
            "--json",
            str(out_json),
            "--workdir",
            str(tmp_path / "work"),
            "--set",
            "a.n=2200",
            "--set",
            "a.queries=40",
            "--set",
            "a.rounds=2",
            "--set",
            "e.n=600",
            "--set",
            "e.due=40",
            "--set",
            "e.rounds=2",
            "--set",
            "e.namespaces=4",
            "--set",
            "e.no_chroma=true",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "ratio" in out and "store.search" in out and "store.sweep()" in out
    data = json.loads(out_json.read_text())
    rows = [r for s in data["suites"] for r in s["rows"]]
    assert {r["suite"] for r in rows} == {"a", "e"}
    for r in rows:
        assert math.isfinite(r["ratio"]) and r["ratio"] > 0
        assert r["cand_s"] > 0 and r["base_s"] > 0
    assert data["environment"]["cores"] >= 1 and "hnswlib" in data["environment"]["versions"]
    e = next(s for s in data["suites"] if s["suite"] == "e")
    assert e["extra"]["acted_per_round"]["sweep"] == [40, 40]  # the same number due on both sides
    assert e["extra"]["acted_per_round"]["dicts"] == [40, 40]


def test_suite_selection():
    assert parse_suites("forgetting,a", quick=True) == ["g", "a"]
    assert parse_suites(None, quick=False) == list("abcdefghi")
    assert parse_suites("relations", quick=True) == ["i"]
    assert parse_suites("conversation", quick=True) == ["h"]


def test_seed_cleanup_over_dicts():
    t0 = datetime(2024, 1, 1)
    metas = [
        seed_metadata("old", memory_type="conversation", created=t0, last_access=t0, confidence=0.8, tags=[], ttl=None),
        seed_metadata(
            "stale", memory_type="fact", created=t0, last_access=t0, confidence=0.2, tags=["a"], ttl=None, weight=0.005
        ),
        seed_metadata("fresh", memory_type="fact", created=t0, last_access=t0, confidence=0.9, tags=[], ttl=None),
    ]
    coll = DictCollection(["old", "stale", "fresh"], metas)
    archived, deleted = cleanup_dicts(coll, t0 + timedelta(hours=2))
    assert (archived, deleted) == (1, 1)  # conversation past its 1 h TTL; weight < 0.01 with confidence < 0.3
    assert [m["id"] for m in coll.get_not_archived()["metadatas"]] == ["fresh"]


def test_drift_workload_ground_truth():
    wl = fq.drift_workload(users=2, days=20, seed=3)
    ids = {m.id: m for m in wl.mems}
    assert wl.queries and all(q.live in ids for q in wl.queries)
    for q in wl.queries:
        live = ids[q.live]
        assert live.user == q.user and live.t <= q.t
        for s in q.stale:  # superseded statements: same user, same slot, older than the live one
            assert ids[s].slot == live.slot and ids[s].t < live.t and ids[s].user == q.user
    assert any(q.stale for q in wl.queries)
    assert [e[0] for e in wl.events] == sorted(e[0] for e in wl.events)


def test_peer_formulas_and_scores():
    um = fq.UserMemory(4)
    e = np.eye(4, dtype=np.float32)
    um.add("old", e[0], 0.0, 7)
    um.add("new", (0.9 * e[0] + 0.436 * e[1]) / np.linalg.norm(0.9 * e[0] + 0.436 * e[1]), 10 * fq.DAY, 7)
    now = 11 * fq.DAY
    # Redis AMS: 0.8*sim + 0.2*(0.6*fresh + 0.4*novelty) with 7 d / 30 d half-lives
    top = fq.redis_ams(um, e[0], now, 1)
    s_old = 0.8 * 1.0 + 0.2 * (0.6 * 0.5 ** (11 / 7) + 0.4 * 0.5 ** (11 / 30))
    s_new = 0.8 * 0.9 + 0.2 * (0.6 * 0.5 ** (1 / 7) + 0.4 * 0.5 ** (1 / 30))
    assert um.ids[top[0]] == ("old" if s_old > s_new else "new")
    wl = fq.drift_workload(users=2, days=12, seed=5)
    emb = fq.Hashing()
    mv, qv = fq.embed_workload(wl, emb)
    scores = fq.score_peers(wl, mv, qv)
    for sc in scores.values():
        row = sc.row()
        assert 0.0 <= row["stale_hit_at_1"] <= 1.0 and 0.0 <= row["live_recall_at_5"] <= 1.0
        assert row["hot_end"] == len(wl.mems) and len(sc.footprint) == 12


@pytest.mark.slow
def test_search_scripts_run_on_a_kept_store(tmp_path):
    """benchmarks/search_ratio.py, search_steps.py and search_cold.py (issue 2's measurements)
    still run against the current code: build and keep a small indexed store,
    reopen it, print their figures."""
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    store = tmp_path / "s"

    def run(script: str, *args: str) -> str:
        out = subprocess.run([sys.executable, str(bench / script), *args], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        return out.stdout

    built = run("search_ratio.py", "--n", "3000", "--rounds", "2", "--block", "20", "--keep", str(store))
    assert "3000 x 384" in built and "median of per-round ratios" in built
    again = run("search_ratio.py", "--store", str(store), "--rounds", "2", "--block", "20", "--shuffled", "--read-hits")
    assert "shuffled calls" in again and "reads every hit" in again
    steps = run("search_steps.py", "--store", str(store), "--rounds", "1")
    assert "rank_and_record" in steps and "overhead" in steps
    cold = run("search_cold.py", "--store", str(store), "--rounds", "1", "--queries", "20")
    assert "3000 x 384" in cold and "after the walk" in cold and "no-op, no arguments" in cold


@pytest.mark.slow
def test_cluster_take_script_times_both_readings(tmp_path):
    """benchmarks/cluster_take.py (issue 31, failover) runs against the current
    code: both readings of the log, at each latency, in its JSON; bad sizes refused."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "cluster_take.py"
    out = tmp_path / "take.json"
    args = ["--records", "2", "--get-ms", "0,5", "--rounds", "1", "--json", str(out)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert {(r["get_ms"], r["reading"]) for r in rows} == {
        (ms, reading) for ms in (0.0, 5.0) for reading in ("one at a time", "read ahead")
    }
    assert all(r["takes"] == 8 and r["take_ms_p50"] > 0 for r in rows)
    bad = subprocess.run([sys.executable, str(script), "--records", "100"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--records in 1..90" in bad.stderr


@pytest.mark.slow
def test_cold_exact_stage_script_compares_both_modes(tmp_path):
    """benchmarks/cold_exact_stage.py (issues 31 and 32): on a small local store the
    int8 stage reads no more objects than reading every candidate, and both
    modes are reported with their recall; bad sizes refused."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "cold_exact_stage.py"
    out = tmp_path / "stage.json"
    args = ["--local", "--n", "2000", "--queries", "8", "--json", str(out)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    rows = {r["stage"]: r for r in report["rows"]}
    assert set(rows) == {"off", "on"} and report["where"] == "local directory, as swept"
    assert rows["on"]["objects_mean"] <= rows["off"]["objects_mean"]
    assert 0.0 <= rows["on"]["recall_at_10"] <= 1.0 and 0 <= report["same"] <= 8
    bad = subprocess.run([sys.executable, str(script), "--n", "10"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--n in 1000..1000000" in bad.stderr


def test_sweep_scaling_script_sweeps_what_is_due(tmp_path):
    """benchmarks/sweep_scaling.py (issue 3; the sweep's cost, issue 32): on two small stores each
    sweep archives and demotes exactly its due batch, and the report says so."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sweep_scaling.py"
    out = tmp_path / "sweep.json"
    args = ["--sizes", "3000", "6000", "--due", "400", "--batches", "2", "--json", str(out)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [r["size"] for r in report] == [3000, 6000]
    for r in report:
        assert [c[:3] for c in r["counts"]] == [[400, 200, 200], [400, 200, 200]]
        assert all(not c[3] for c in r["counts"])  # no errors
        assert len(r["sweep_s"]) == 2 and all(s > 0 for s in r["sweep_s"])


def test_sweep_cost_script_reports_per_due_memory(tmp_path):
    """benchmarks/sweep_cost.py: a small round archives every memory (or, with --phase delete, deletes
    them from the archive) and reports the wall time, the process's and the catalog writer's CPU per
    due memory; bad sizes refused."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sweep_cost.py"
    out = tmp_path / "cost.json"
    args = ["--namespaces", "6", "--per", "10", "--dim", "16", "--rounds", "2", "--json", str(out)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [r["due"] for r in report["rounds"]] == [60, 60]
    for r in report["rounds"]:
        assert r["wall_us"] > 0 and r["cpu_us"] > 0
        assert r["writer_us"] is None or r["writer_us"] >= 0
    deletes = subprocess.run(
        [sys.executable, str(script), *args[:-2], "--rounds", "1", "--phase", "delete", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert deletes.returncode == 0, deletes.stderr
    assert "all due to delete" in deletes.stdout
    report = json.loads(out.read_text())
    assert report["args"]["phase"] == "delete" and [r["due"] for r in report["rounds"]] == [60]
    bad = subprocess.run([sys.executable, str(script), "--dim", "1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--dim in 2..4096" in bad.stderr


def test_ingest_ratio_script_interleaves_both_sides(tmp_path):
    """benchmarks/ingest_ratio.py: both sides take every vector (the script checks both counts and
    fails otherwise), the report holds both times and their ratio; bad sizes refused."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "ingest_ratio.py"
    out = tmp_path / "ingest.json"
    for extra in ([], ["--no-ids"]):
        args = ["--n", "3000", "--batch", "500", "--dim", "16", "--json", str(out), *extra]
        done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        report = json.loads(out.read_text())
        assert report["add_batch_us"] > 0 and report["add_items_us"] > 0
        assert report["ratio"] == pytest.approx(report["add_batch_us"] / report["add_items_us"])
        assert report["args"]["no_ids"] is bool(extra)
        assert report["writer_cpu_us"] is None or report["writer_cpu_us"] > 0
    bad = subprocess.run(
        [sys.executable, str(script), "--n", "1000", "--batch", "300"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "multiple of --batch" in bad.stderr

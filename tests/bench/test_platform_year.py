"""benchmarks/platform_year.py (issue 32): the stream, the parameters, a
``--quick`` run of both systems, a clean stop and its resume, and a run that
cannot be resumed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "platform_year.py"


def _module():
    spec = importlib.util.spec_from_file_location("platform_year", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["platform_year"] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


py = _module()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600)


def _digest(p, days: int) -> tuple[str, list[tuple[int, str, str, tuple[str, ...]]]]:
    stream = py.Stream(p)
    h = __import__("hashlib").sha256()
    questions = []
    for d in range(days):
        adds, queries = stream.day(d)
        for _, items in adds:
            for it in items:
                h.update(it["id"].encode() + it["content"].encode() + it["embedding"].tobytes())
        questions += [(q.user, q.kind, q.live, tuple(sorted(q.stale))) for q in queries]
        for q in queries:
            h.update(q.vector.tobytes())
    return h.hexdigest(), questions


def test_stream_is_a_function_of_the_seed():
    p = py.Params(users=6, days=12, dim=16, topics=8).validate()
    a, qa = _digest(p, 12)
    b, qb = _digest(p, 12)
    assert a == b and qa == qb and qa
    c, _ = _digest(py.Params(users=6, days=12, dim=16, topics=8, seed=1).validate(), 12)
    assert c != a
    # a replay without vectors reaches the same state
    full, replay = py.Stream(p), py.Stream(p)
    for d in range(12):
        full.day(d)
        replay.day(d, build=False)
    assert full.fingerprint() == replay.fingerprint() and full.added == replay.added


def test_stream_shape():
    """What the docs say the stream is: slot questions name the live value and
    the superseded ones; a slot question's vector is about the slot (about as
    near to every value), a memory question's is near its target."""
    p = py.Params(users=20, days=60, dim=64, topics=16, q_slot=1.0, q_long=1.0, q_chat=1.0).validate()
    stream = py.Stream(p)
    vec: dict[str, np.ndarray] = {}
    kinds: dict[str, int] = {}
    for d in range(p.days):
        adds, queries = stream.day(d)
        for _, items in adds:
            for it in items:
                vec[it["id"]] = it["embedding"]
                assert abs(float(np.linalg.norm(it["embedding"])) - 1.0) < 1e-4
        for q in queries:
            kinds[q.kind] = kinds.get(q.kind, 0) + 1
            assert q.live in vec and all(s in vec for s in q.stale) and q.live not in q.stale
            near = float(vec[q.live] @ q.vector)
            assert near > 0.6, (q.kind, near)
            if q.kind == "slot":
                for s in q.stale:  # the same slot's earlier values: u3-home_city0, u3-home_city1, ...
                    assert s.rstrip("0123456789") == q.live.rstrip("0123456789") and s < q.live or len(s) < len(q.live)
                    assert abs(float(vec[s] @ q.vector) - near) < 0.25
    assert set(kinds) == {"slot", "long", "pinned", "chat"}
    assert stream.by_kind["task-end"] > 0 and stream.by_kind["chat"] > 10 * stream.by_kind["slot"] / 8


@pytest.mark.parametrize(
    "args, message",
    [
        (["--users", "0"], "--users must be an integer in [1, 1000000], got 0"),
        (["--days", "-3"], "--days must be an integer in [1, 3650], got -3"),
        (["--chat-rate", "nan"], "--chat-rate must be a finite number"),
        (["--q-slot", "1.5"], "--q-slot must be a finite number in [0.0, 1.0], got 1.5"),
        (["--fact-change", "-0.1"], "--fact-change must be a finite number in [0.0, 1.0]"),
        (["--q-slot", "0", "--q-long", "0", "--q-chat", "0"], "the run would ask nothing"),
        (["--dim", "3"], "--dim must be an integer in [8, 4096], got 3"),
    ],
)
def test_parameters_are_checked(tmp_path, args, message):
    out = run("--quick", "--out", str(tmp_path / "r"), *args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (tmp_path / "r").exists()  # nothing created for a refused run


def test_missing_or_used_directories_are_refused(tmp_path):
    out = run("--quick")
    assert out.returncode == 2 and "--out DIR is required" in out.stderr
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("")
    out = run("--quick", "--out", str(used))
    assert out.returncode == 2 and "exists and is not empty" in out.stderr and "--resume" in out.stderr
    out = run("--resume", str(tmp_path / "nothing"))
    assert out.returncode == 2 and "no run there" in out.stderr


@pytest.mark.slow
def test_quick_run_stop_resume_and_report(tmp_path):
    """--quick, stopped cleanly after day 9 and resumed: both systems got the
    same memories; the report has every sample; the resumed run holds what a
    straight run holds."""
    r = tmp_path / "r"
    out = run("--quick", "--out", str(r), "--stop-after-day", "9")
    assert out.returncode == 3, out.stderr
    assert "stopped cleanly" in out.stdout and f"--resume {r}" in out.stdout
    for s in ("tierstore", "baseline"):
        state = json.loads((r / s / "state.json").read_text())
        assert state["clean"] and not state["finished"] and state["day_done"] == 9
    # the baseline's saved indexes are the size its disk figure says (within 5 %)
    saved = sum(f.stat().st_size for f in (r / "baseline-store").glob("*.hnsw"))
    estimate = json.loads((r / "baseline" / "state.json").read_text())["stop_info"]["index_estimate"]
    assert saved > 0 and abs(estimate - saved) / saved < 0.05, (estimate, saved)
    rows = [json.loads(x) for x in (r / "baseline" / "samples.jsonl").read_text().splitlines()]
    assert [row["day"] for row in rows] == [7]
    out = run("--resume", str(r), "--plots", str(tmp_path / "plots"))
    assert out.returncode == 0, out.stderr
    report = json.loads((r / "report.json").read_text())
    assert report["finished"] and report["same_stream"]
    assert report["memories_added"]["tierstore"] == report["memories_added"]["baseline"] > 500
    days = py.QUICK["days"]
    for s in ("tierstore", "baseline"):
        got = [row["day"] for row in report["rows"][s]]
        assert got == sorted(py.sample_days(py.Params(**report["params"])))
        assert got == list(range(7, days + 1, 7))
        for row in report["rows"][s]:
            assert row["queries"] > 0 and row["rss_bytes"] > 0 and row["search_p99_ms"] >= row["search_p50_ms"]
    # tierstore says what it holds in memory by part, within its RSS; the searching thread's CPU is logged
    held = report["rows"]["tierstore"][-1]["memory_bytes"]
    assert set(held) == {"hot", "warm_cache", "cold_codes", "vector_cache"}
    assert 0 < held["hot"] and sum(held.values()) < report["rows"]["tierstore"][-1]["rss_bytes"]
    assert "| the rest MiB |" in out.stdout
    assert all(len(q) == 8 and 0 <= q[7] for q in py.load_queries(r, "tierstore"))
    assert report["latency"]["tierstore"]["last_month_thread_p99_ms"] > 0
    # keep-everything holds every memory; tierstore holds each in one tier (or deleted it)
    end_b = report["rows"]["baseline"][-1]
    assert end_b["tiers"]["hot"] == end_b["memories_added"] == report["memories_added"]["baseline"]
    end_t = report["rows"]["tierstore"][-1]
    assert sum(end_t["tiers"].values()) <= end_t["memories_added"] and end_t["tiers"]["cold"] > 0
    # the same questions, in the same order, to both
    logs = {s: py.load_queries(r, s) for s in ("tierstore", "baseline")}
    assert [q[:4] for q in logs["tierstore"]] == [q[:4] for q in logs["baseline"]]
    # a straight run of the same stream: the same memories, the same questions
    straight = tmp_path / "straight"
    assert run("--quick", "--out", str(straight)).returncode == 0
    again = json.loads((straight / "report.json").read_text())
    assert again["digest"] == report["digest"]
    assert [q[:4] for q in py.load_queries(straight, "baseline")] == [q[:4] for q in logs["baseline"]]
    assert [q[4] for q in py.load_queries(straight, "baseline")] == [q[4] for q in logs["baseline"]]
    assert "| 21 | tierstore |" in out.stdout and "targets:" in out.stdout
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        f"scale_{n}.png" for n in ("disk", "latency", "memory", "quality", "sweep")
    ]
    # resuming a finished run changes nothing and says so by finishing at once
    assert run("--resume", str(r)).returncode == 0


@pytest.mark.slow
def test_a_killed_run_cannot_be_resumed(tmp_path):
    r = tmp_path / "r"
    assert run("--quick", "--out", str(r), "--stop-after-day", "3").returncode == 3
    # what a SIGKILL mid-day leaves: the state the child wrote when it started, never closed
    state = json.loads((r / "tierstore" / "state.json").read_text())
    (r / "tierstore" / "state.json").write_text(json.dumps({**state, "clean": False, "pid": 4242}))
    out = run("--resume", str(r))
    assert out.returncode == 2
    assert "not stopped cleanly" in out.stderr and "cannot be resumed" in out.stderr and "day 4" in out.stderr
    # an unreadable replay (another version of the stream) is refused as clearly
    state["stream_fingerprint"] = "0" * 64
    (r / "tierstore" / "state.json").write_text(json.dumps(state))
    out = run("--resume", str(r))
    assert out.returncode == 2 and "differs from the one the run saved" in out.stderr


def test_resume_takes_the_runs_own_parameters(tmp_path):
    r = tmp_path / "r"
    r.mkdir()
    (r / "params.json").write_text(json.dumps(py.asdict(py.Params(**py.QUICK))))
    out = run("--resume", str(r), "--users", "5")
    assert out.returncode == 2 and "--resume takes the run's own parameters" in out.stderr

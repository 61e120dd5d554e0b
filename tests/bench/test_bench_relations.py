"""Suite (i), relations: the generator's ground truth and the scorer's arithmetic.

No MiniLM here: the scorer is checked on hand-made rankings, and the store run
on a tiny workload with the synthetic hashing embedder."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tierstore.bench import parse_suites
from tierstore.bench import relations as rel
from tierstore.bench.common import BenchConfig
from tierstore.bench.relations_workload import MULTI, SINGLE, T0, RelationsWorkload, RMem, RQuestion, relations_workload


def test_generator_is_deterministic_for_a_seed():
    a = relations_workload(4, 60, seed=7)
    b = relations_workload(4, 60, seed=7)
    c = relations_workload(4, 60, seed=8)
    assert a.mems == b.mems and a.questions == b.questions
    assert [m.content for m in a.mems] != [m.content for m in c.mems]
    # time order, unique ids, one namespace per household
    assert [m.t for m in a.mems] == sorted(m.t for m in a.mems)
    assert len({m.id for m in a.mems}) == len(a.mems)
    assert a.namespaces() == ["h0", "h1", "h2", "h3"]


def test_templates_vary():
    for spec in [*MULTI.values(), *SINGLE.values()]:
        assert len(spec["say"]) >= 3 and len(spec["ask"]) >= 3
        assert len(set(spec["say"])) == len(spec["say"])
    for spec in SINGLE.values():
        assert len(spec["history"]) >= 2


def test_multi_valued_relations_have_several_values_all_live():
    wl = relations_workload(6, 90, seed=1)
    by_id = {m.id: m for m in wl.mems}
    multi_q = [q for q in wl.questions if q.kind == "multi" and q.phase == "end"]
    assert len(multi_q) >= 6 * 3
    statements: dict[tuple[str, str, str], set[str]] = {}
    for m in wl.mems:
        if m.relation in MULTI:
            statements.setdefault((m.ns, m.subject, m.relation), set()).add(m.id)  # type: ignore[arg-type]
    for q in multi_q:
        assert q.relation in MULTI and not q.stale
        assert len(q.live) >= 2  # 2-4 values
        # every statement of the relation answers the question: all values stay true
        assert q.live_ids == statements[(q.ns, q.subject, q.relation)]
        values = {by_id[i].value for i in q.live_ids}
        assert len(values) == len(q.live)
        for g in q.live:  # a group is one value: a first statement and its restatements in other words
            ms = [by_id[i] for i in g]
            assert len({m.value for m in ms}) == 1 and ms[0].kind == "multi"
            assert all(m.kind == "restate" for m in ms[1:])
            assert len({m.content for m in ms}) == len(ms)
            assert all(m.t < q.t and m.subject == q.subject and m.ns == q.ns for m in ms)
        # the values were stated on different days
        firsts = [int((by_id[g[0]].t - T0) // 86400) for g in q.live]
        assert len(set(firsts)) == len(firsts)


def test_drift_questions_have_stale_ids_older_than_live():
    wl = relations_workload(6, 90, seed=2)
    by_id = {m.id: m for m in wl.mems}
    cur = [q for q in wl.questions if q.kind == "current" and q.phase == "end"]
    hist = {(q.ns, q.subject, q.relation): q for q in wl.questions if q.kind == "history" and q.phase == "end"}
    assert cur and all(q.stale for q in cur)  # drift=True: every single-valued relation changes 1-3 times
    for q in cur:
        assert q.relation in SINGLE and len(q.live) == 1 and 1 <= len(q.stale) <= 3
        first_live = min(by_id[i].t for i in q.live[0])
        assert max(by_id[i].t for i in q.stale_ids) < first_live
        assert len({by_id[i].value for i in q.live_ids}) == 1
        assert by_id[q.live[0][0]].value not in {by_id[i].value for i in q.stale_ids}
        h = hist[(q.ns, q.subject, q.relation)]  # the history question asks for the stale values
        assert h.live == q.stale and not h.stale
    # midpoint questions know only what was said by then
    for q in wl.questions:
        assert all(by_id[i].t < q.t for i in q.live_ids | q.stale_ids)
    assert {q.phase for q in wl.questions} == {"mid", "end"}


def test_hint_variants():
    plain = relations_workload(3, 60, seed=4)
    tagged = relations_workload(3, 60, seed=4, hints="tags")
    keyed = relations_workload(3, 60, seed=4, hints="key")
    assert all(m.tags == () and m.key is None for m in plain.mems)  # the "no agent hints" condition
    for a, t, k in zip(plain.mems, tagged.mems, keyed.mems):
        assert a.content == t.content == k.content and a.t == t.t == k.t and a.id == t.id == k.id
        assert t.tags == ((a.relation,) if a.relation else ()) and t.key is None
        assert k.tags == ()
        assert k.key == (f"{a.subject}:{a.relation}" if a.relation in SINGLE else None)
    assert plain.questions == tagged.questions == keyed.questions
    with pytest.raises(ValueError):
        relations_workload(1, 10, hints="supersedes")


def test_safety_variant_has_no_drift():
    wl = relations_workload(5, 90, seed=3, drift=False)
    by_id = {m.id: m for m in wl.mems}
    assert not any(q.kind == "history" for q in wl.questions)
    for q in wl.questions:
        assert not q.stale
        if q.kind == "current":
            assert len({by_id[i].value for i in q.live_ids}) == 1
    values: dict[tuple[str, str, str], set[str]] = {}
    for m in wl.mems:
        if m.relation in SINGLE:
            values.setdefault((m.ns, m.subject, m.relation), set()).add(m.value)  # type: ignore[arg-type]
    assert values and all(len(v) == 1 for v in values.values())


# ------------------------------------------------------------------ the scorer on a hand-made workload


def _tiny() -> RelationsWorkload:
    def m(mid, day, rel_=None, value=None, kind="chatter", subject="Frank"):
        return RMem(
            mid,
            "h0",
            T0 + day * 86400,
            f"text {mid}",
            "fact",
            kind=kind,
            subject=subject if rel_ else None,
            relation=rel_,
            value=value,
        )

    mems = [
        m("a1", 1, "allergy", "peanuts", "multi"),
        m("a2", 2, "allergy", "shellfish", "multi"),
        m("a2r", 5, "allergy", "shellfish", "restate"),
        m("e1", 3, "employer", "Acme", "single"),
        m("e2", 6, "employer", "Globex", "single"),
        m("c1", 4),
        m("h1", 2, "home", "Oslo", "single", "Ana"),
        m("h2", 7, "home", "Bergen", "single", "Ana"),
    ]
    end = T0 + 10 * 86400

    def q(qid, kind, relation, live, stale=(), subject="Frank"):
        return RQuestion(qid, "h0", end, f"question {qid}", kind, subject, relation, "end", live, stale)

    questions = [
        q("qa", "multi", "allergy", (("a1",), ("a2", "a2r"))),
        q("qe", "current", "employer", (("e2",),), (("e1",),)),
        q("qh", "current", "home", (("h2",),), (("h1",),), "Ana"),
        q("qeh", "history", "employer", (("e1",),)),
    ]
    return RelationsWorkload(1, 10, 0, True, "none", mems, questions)


RANKINGS = {
    "qa": ["a2r", "c1", "e1", "e2", "h1"],
    "qe": ["e1", "e2", "c1"],
    "qh": ["h2", "h1"],
    "qeh": ["e2", "c1", "a1"],
}
PLAIN = {"qa": ["a1", "a2", "c1"], "qe": ["e2", "e1"], "qh": ["h1", "h2"], "qeh": ["e1", "e2"]}
STATE = {"a1": "superseded", "a2": "cold", "a2r": "hot", "e1": "superseded", "e2": "hot", "h1": "hot", "c1": "hot"}
# h2 is absent from STATE: deleted


def test_metrics_on_hand_computed_rankings():
    out = rel.metrics(_tiny(), RANKINGS, PLAIN, STATE)
    assert out["stale@1"] == 0.5  # qe's first hit is the old employer, qh's the new home
    assert out["live@1"] == pytest.approx(2 / 3)  # qa (a restatement counts), qh; not qe
    assert out["multi live@5"] == 0.5  # shellfish found (through its restatement), peanuts not
    assert out["current live@5"] == 1.0
    assert out["live@5"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert out["kept@5"] == 0.5  # plain has both allergies in its top 5, the candidate one
    assert out["history@5"] == 0.0  # the old employer is not among qeh's hits
    assert out["retired"] == 0.5  # peanuts: its only statement superseded; shellfish: a2 cold but a2r live
    assert out["retired by mark"] == 0.5  # peanuts again; shellfish's a2 is archived, not marked
    assert out["marked"] == pytest.approx(1 / 3)  # a1 of a1, a2, a2r
    assert out["stale marked"] == 0.5  # e1 marked, h1 not
    assert out["live marked"] == 0.0  # e2 live; h2 deleted, not marked
    assert (out["households"], out["memories"], out["questions"]) == (1, 8, 4)
    assert (out["drift_questions"], out["history_questions"], out["kept_pairs"]) == (2, 1, 2)


def test_metrics_of_the_baseline_and_with_aliases():
    wl = _tiny()
    base = rel.metrics(wl, PLAIN)  # no plain given: the rankings are the baseline; no state: nothing retired
    assert base["kept@5"] == 1.0 and base["retired"] == 0.0 and base["marked"] == 0.0
    assert base["stale@1"] == 0.5 and base["multi live@5"] == 1.0 and base["history@5"] == 1.0
    # the store deduplicated a2r into a2: a hit on a2 is a hit on the value; state is keyed by the store's id
    out = rel.metrics(wl, {**RANKINGS, "qa": ["a2", "a1"]}, PLAIN, {**STATE, "a2": "hot"}, {"a2r": "a2"})
    assert out["multi live@5"] == 1.0 and out["kept@5"] == 1.0 and out["retired"] == 0.5
    # a missing ranking is a miss, not an error; mid-phase metrics of a workload without mid questions are NaN
    empty = rel.metrics(wl, {}, PLAIN, STATE)
    assert empty["live@1"] == 0.0 and empty["kept@5"] == 0.0
    assert math.isnan(rel.metrics(wl, RANKINGS, phase="mid")["live@5"])


def test_plain_rankings_exact_cosine_over_what_was_said_before():
    wl = _tiny()
    vecs = {f"text {m.id}": np.eye(8, dtype=np.float32)[i] for i, m in enumerate(wl.mems)}
    # each question points at two memories, the first more strongly
    wanted = {"qa": ("a1", "a2r"), "qe": ("e2", "e1"), "qh": ("h1", "h2"), "qeh": ("c1", "e1")}
    idx = {m.id: i for i, m in enumerate(wl.mems)}
    for q in wl.questions:
        a, b = wanted[q.id]
        v = np.zeros(8, np.float32)
        v[idx[a]], v[idx[b]] = 0.8, 0.6
        vecs[q.text] = v
    late = RMem("late", "h0", T0 + 20 * 86400, "text late", "fact")  # said after the questions
    vecs["text late"] = vecs["question qa"]
    wl.mems.append(late)
    r = rel.plain_rankings(wl, vecs.__getitem__, k=3)
    for q in wl.questions:
        assert r[q.id][:2] == list(wanted[q.id]) and len(r[q.id]) == 3 and "late" not in r[q.id]


def test_store_run_on_a_tiny_workload(tmp_path):
    """The real store, the default policy, a few simulated days (synthetic embedder: seconds)."""
    wl = relations_workload(1, 20, seed=5)
    vec = rel.workload_vectors(wl, "hashing")
    run = rel.store_rankings(wl, vec, BenchConfig(progress=False, workdir=tmp_path))
    assert set(run.rankings) == {q.id for q in wl.questions}
    assert all(0 < len(h) <= 5 for h in run.rankings.values())
    known = {m.id for m in wl.mems}
    assert all(i in known for h in run.rankings.values() for i in h)
    assert set(run.state) <= known and set(run.state.values()) <= {"hot", "warm", "cold", "superseded"}
    out = rel.metrics(wl, run.rankings, rel.plain_rankings(wl, vec), run.state, run.alias)
    for key in ("stale@1", "live@1", "live@5", "kept@5", "history@5", "retired", "marked"):
        assert 0.0 <= out[key] <= 1.0


@pytest.mark.slow
def test_suite_registered_and_runs(tmp_path):
    assert parse_suites("relations", quick=True) == ["i"]
    cfg = BenchConfig(
        progress=False, workdir=tmp_path, sizes={"i.households": 1, "i.days": 12, "i.embedder": "hashing"}
    )
    res = rel.run(cfg)
    names = [r["row"] for r in res.data["rows"]]
    assert names == [
        "plain similarity, drift",
        "default policy, drift, no hints",
        "default policy, drift, tags=[relation]",
        "default policy, drift, key=subject:relation",
        "diagnostic: automatic supersession off, drift, no hints",
        "plain similarity, safety (no drift)",
        "default policy, safety (no drift), no hints",
        "diagnostic: automatic supersession off, safety (no drift), no hints",
    ]
    assert all(r["households"] == 1 and r["memories"] > 0 and r["questions"] > 0 for r in res.data["rows"])
    title, header, cells = res.tables[0]
    assert header == rel.HEADER and len(cells) == 8 and "relations" in title
    assert all(len(c) == len(header) for c in cells)
    off = res.data["rows"][4]  # automatic supersession off: nothing is marked
    assert off["marked"] == 0.0 and off["retired by mark"] == 0.0 and off["stale marked"] == 0.0

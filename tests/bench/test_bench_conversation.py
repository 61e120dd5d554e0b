"""Suite (h), forgetting quality on logged conversations: the workload's ground truth.

Small sizes and the synthetic embedder only: a few seconds."""

from __future__ import annotations

from collections import Counter

import pytest

from tierstore.bench import conversation as cv


@pytest.fixture(scope="module")
def wl() -> cv.ConversationWorkload:
    return cv.conversation_workload(users=3, days=60, seed=5)


def test_workload_is_reproducible_and_users_are_independent(wl):
    again = cv.conversation_workload(users=3, days=60, seed=5)
    assert again.turns == wl.turns and again.questions == wl.questions and again.events == wl.events
    # user u is the same whatever the number of users: --quick is a prefix of the full run
    fewer = cv.conversation_workload(users=2, days=60, seed=5)
    assert fewer.turns == [t for t in wl.turns if t.user < 2]
    other = cv.conversation_workload(users=3, days=60, seed=6)
    assert [t.text for t in other.turns] != [t.text for t in wl.turns]


def test_turns_read_like_sessions(wl):
    assert len({t.id for t in wl.turns}) == len(wl.turns)
    per_session = Counter((t.user, t.session) for t in wl.turns)
    assert min(per_session.values()) >= 6
    for u in range(wl.users):
        sessions = {s for (uu, s) in per_session if uu == u}
        assert len(sessions) >= 10
        mine = [t for t in wl.turns if t.user == u]
        assert max(t.t for t in mine) < cv.T0 + wl.days * cv.DAY  # every session before the end questions
    # user and assistant alternate within a session, in time order
    by_session: dict[tuple[int, int], list[cv.Turn]] = {}
    for t in wl.turns:
        by_session.setdefault((t.user, t.session), []).append(t)
    for turns in by_session.values():
        assert [t.speaker for t in turns] == ["user", "assistant"] * (len(turns) // 2)
        assert all(a.t < b.t for a, b in zip(turns, turns[1:]))
    assert [e[0] for e in wl.events] == sorted(e[0] for e in wl.events)


def test_question_ground_truth(wl):
    turns = {t.id: t for t in wl.turns}
    cats = Counter(q.category for q in wl.questions)
    assert cats["current"] == 5 * wl.users and cats["old"] == 4 * wl.users and cats["passing"] == 3 * wl.users
    assert any(len(q.evidence) == 2 for q in wl.questions)  # the pet and the diagnosis need two turns
    for q in wl.questions:
        assert q.evidence and all(q.evidence)
        ev = set().union(*q.evidence)
        for tid in ev | q.stale:  # every id is a stored turn of this user, said before the question
            t = turns[tid]
            assert t.user == q.user and t.t < q.t
        assert not ev & q.stale  # a stale turn is never evidence
        # ... nor does it say the same words as one (a duplicate would make the metric meaningless)
        assert not {turns[i].text for i in ev} & {turns[i].text for i in q.stale}
        if q.category in ("current", "current_mid"):
            assert q.stale  # every asked attribute has changed by then
            cur = {turns[i].version for i in ev}
            assert len(cur) == 1 and all(turns[i].version < min(cur) for i in q.stale)
            assert all(turns[i].attribute == q.attribute for i in ev | q.stale)
            # the evidence is the newest value: a later-said turn of the attribute is never stale
            assert min(turns[i].t for i in ev) > max(turns[i].t for i in q.stale)
        if q.category == "old":
            assert all(turns[i].t < cv.T0 + 25 * cv.DAY for i in ev)  # in the first weeks: long before the question


@pytest.mark.slow
def test_suite_h_runs_and_scores(tmp_path):
    """The suite end to end through ``tierstore bench`` at a toy size, synthetic embedder."""
    import json

    from tierstore.bench import main

    out = tmp_path / "h.json"
    rc = main(
        [
            "--suite",
            "h",
            "--no-progress",
            "--json",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
            "--set",
            "h.users=2",
            "--set",
            "h.days=40",
            "--set",
            "h.embedder=hashing",
        ]
    )
    assert rc == 0
    suite = json.loads(out.read_text())["suites"][0]
    assert suite["suite"] == "h" and not suite["skipped"]
    rows = {r["scorer"]: r for r in suite["data"]["rows"]}
    assert set(rows) == {"plain similarity (no forgetting)", *(v.name for v in cv.TIERSTORE_ROWS)}
    turns = suite["extra"]["turns"]
    for r in rows.values():
        assert r["questions"] == suite["extra"]["questions"]
        for key, v in r.items():
            if key.startswith(("recall", "evidence_at", "stale_hit", "all_evidence")):
                assert v is None or 0.0 <= v <= 1.0, (r["scorer"], key, v)
        # every stored memory is in exactly one tier, unless a sweep deleted it; a re-said turn is
        # deduplicated into the memory of its first saying (not when the policy turns dedupe off)
        assert r["hot"] + r["warm"] + r["cold"] == r["memories"] - r.get("sweeps", {}).get("deleted", 0)
        assert (
            r["memories"] == turns if "dedupe off" in r["scorer"] or "plain" in r["scorer"] else r["memories"] < turns
        )
        misses = sum(sum(m.values()) for m in r["misses_by_tier"].values())
        assert misses == round(r["questions"] * (1 - r["recall_at_10"]))
    plain = rows["plain similarity (no forgetting)"]
    assert plain["recall_at_10"] > 0.1 and plain["hot"] == turns  # finds evidence; keeps everything
    per_q = suite["data"]["per_question"]["plain similarity (no forgetting)"]
    assert all(p["rank"] is None or 1 <= p["rank"] <= 10 for p in per_q)


@pytest.mark.slow
def test_tierstore_variant_passes_search_kwargs(tmp_path):
    """Extra rows are data: a policy dict and search keywords go to the store as they are."""
    from tierstore.bench.common import BenchConfig

    wl = cv.conversation_workload(users=1, days=38, seed=2)
    emb = cv.Hashing()
    tv, qv = cv.embed_conversations(wl, emb)
    cfg = BenchConfig(progress=False, workdir=tmp_path)
    v = cv.TierVariant(
        "no warm, long conversations",
        policy={"types": {"conversation": {"ttl": 90 * cv.DAY}}},
        search_kwargs={"include_warm": False},
    )
    sc = cv.score_tierstore(wl, tv, qv, cfg, v)
    assert sum(sc.n.values()) == len(wl.questions) and sc.row()["recall_at_10"] is not None
    with pytest.raises(TypeError):  # a keyword the store does not have is not emulated
        cv.score_tierstore(wl, tv, qv, cfg, cv.TierVariant("bogus", search_kwargs={"no_such_option": 1}))

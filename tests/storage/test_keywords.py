"""Issue 28: find by words as well as by meaning. The keyword index
(``memory_text``) stays in step with every write and tier move, survives a
SIGKILL, is checked by verify and rebuilt by repair; search(text=) fuses
BM25 with the cosine; user text is never FTS5 syntax."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import DIM, T0, unit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierstore import ManualClock, Policy, TierStore
from tierstore.errors import DuplicateIdError
from tierstore.remote.client import RemoteStore
from tierstore.remote.server.app import build_app
from tierstore.remote.server.auth import Principal, TokenTable
from tierstore.storage import keyword_index
from tierstore.testing.embedders import hash_embed
from tierstore.testing.live_server import ThreadedServer

HOUR = 3600.0
DAY = 86400.0


def indexed(store) -> set[int]:
    return {r[0] for r in store.engine.catalog.query("SELECT id FROM memory_text_docsize")}


def rids(store) -> set[int]:
    return {r[0] for r in store.engine.catalog.query("SELECT rid FROM memories")}


def in_step(store) -> None:
    assert indexed(store) == rids(store)
    assert keyword_index.check_index(store.engine.catalog) == {"missing": [], "extra": []}


def word_ids(store, ns, text):
    return [mid for _, mid, _, _ in keyword_index.keyword_candidates(store.engine.catalog, ns, text, 100)]


def at_cos(q: np.ndarray, c: float, rng) -> np.ndarray:
    """A unit vector whose cosine with the unit vector ``q`` is ``c``."""
    v = rng.normal(size=q.shape[0])
    v -= (v @ q) * q
    v /= np.linalg.norm(v)
    return (c * q + np.sqrt(1.0 - c * c) * v).astype(np.float32)


def away(q: np.ndarray, rng) -> np.ndarray:
    """A unit vector orthogonal to ``q``."""
    return at_cos(q, 0.0, rng)


# -- the index in step -------------------------------------------------------------------------


def test_the_index_follows_adds_deletes_supersession_and_every_tier_move(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        fact = store.add("u", "Alice keeps her passport in the blue drawer", unit(rng), memory_type="fact")
        chat = store.add("u", "we chatted about the Kilimanjaro trek", unit(rng), memory_type="conversation")
        gone = store.add("u", "the gym locker code is 4471", unit(rng))
        old = store.add("u", "Alice works at Globex", unit(rng), key="employer")
        in_step(store)
        assert word_ids(store, "u", "passport") == [fact]
        store.delete("u", gone)
        in_step(store)
        assert word_ids(store, "u", "locker") == []
        new = store.add("u", "Alice works at Initech", unit(rng), key="employer")  # supersedes old
        assert store.get("u", old).superseded_by == new
        in_step(store)  # the superseded memory keeps its entry (it is still a memory) ...
        assert new in word_ids(store, "u", "Alice works") and old not in word_ids(store, "u", "Alice works")
        assert word_ids(store, "u", "Globex") == []  # ... but is no keyword candidate: its successor is
        # an update (upsert: the old version deleted, the new inserted, one transaction)
        store.upsert_batch("u", [{"id": gone + "x", "content": "the bike lock code is 9913", "embedding": unit(rng)}])
        store.upsert_batch(
            "u", [{"id": gone + "x", "content": "the bike lock code is now 2207", "embedding": unit(rng)}]
        )
        in_step(store)
        assert word_ids(store, "u", "2207") == [gone + "x"] and word_ids(store, "u", "9913") == []
        # dedupe: the same content again inserts nothing
        assert store.add("u", "alice keeps her passport in the blue drawer.", unit(rng), memory_type="fact") == fact
        in_step(store)
        clock.advance(2 * HOUR)
        store.sweep()  # the chat goes cold
        assert store.get("u", chat).tier == "cold"
        in_step(store)
        assert word_ids(store, "u", "kilimanjaro") == [chat]
        clock.advance(20 * DAY)
        store.sweep()  # the fact, unused, goes warm, then cold
        clock.advance(12 * DAY)
        store.sweep()
        assert store.get("u", fact).tier in ("warm", "cold")
        in_step(store)
        assert word_ids(store, "u", "passports") == [fact]  # stemmed
        assert store.restore("u", text="kilimanjaro") == [chat]  # restore(text=) reads the same index
        assert store.get("u", chat).tier == "hot"
        in_step(store)
        assert word_ids(store, "u", "kilimanjaro") == [chat]
        ns2 = store.add("v", "Bob keeps his passport at work", unit(rng))
        assert word_ids(store, "u", "passport") == [fact] and word_ids(store, "v", "passport") == [ns2]


def test_the_index_follows_a_warm_tier(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        q = unit(rng)
        ids = [store.add("u", f"note {i} about the Oslo office", at_cos(q, 0.4, rng)) for i in range(5)]
        clock.advance(20 * DAY)
        store.sweep()
        assert {store.get("u", i).tier for i in ids} == {"warm"}
        in_step(store)
        target = store.add("u", "lunch with Ingrid at the harbour", away(q, rng))
        for i in range(30):
            store.add("u", f"filler {i}", unit(rng))
        hits = store.search("u", q, text="office in Oslo", k=5, record_access=False)
        assert {h.id for h in hits} & set(ids) and all(h.memory.tier in ("hot", "warm") for h in hits)
        assert {h.memory.tier for h in hits if h.id in ids} == {"warm"}
        assert target not in {h.id for h in hits}


CHILD = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    from tierstore import ManualClock, TierStore
    store = TierStore.open(sys.argv[1], clock=ManualClock(float(sys.argv[2])))
    rng = np.random.default_rng(1)
    for i in range(40):
        v = rng.normal(size=store.dim).astype(np.float32)
        store.add("k", f"entry {i} mentions the Zebulon project", v, memory_type="conversation")
        if i == 20:
            store.delete("k", store.memories("k")[0].id)
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.slow
def test_the_index_survives_sigkill(tmp_path, rng):
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)) as store:
        store.add("k", "before the crash: the Zebulon kickoff", unit(rng))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), repr(T0 + 10)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    clock = ManualClock(T0 + 2 * HOUR)
    with TierStore.open(path, clock=clock) as store:
        in_step(store)
        n = len(store.memories("k"))
        assert n == 40  # 41 added, one deleted: every committed write, and the index with it
        assert len(word_ids(store, "k", "zebulon")) == n
        store.sweep()  # the conversations go cold: the index keeps them
        in_step(store)
        assert len(word_ids(store, "k", "zebulon")) == n
        assert store.verify().ok


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", ["archive.after_intent", "archive.after_commit"])
def test_the_index_is_in_step_after_a_sigkill_mid_archive(tmp_path, rng, crash_at):
    from crash_store import run_child, seed_store

    path = tmp_path / "s"
    chats, facts, _ = seed_store(path, rng)
    proc = run_child(path, "sweep", T0 + 2 * HOUR, crash_at)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 2 * HOUR)) as store:
        store.sweep()
        in_step(store)
        assert set(word_ids(store, "crash", "chat")) == set(chats)
        assert set(word_ids(store, "crash", "fact")) == set(facts)


def test_verify_finds_a_missing_and_an_extra_entry_and_repair_rebuilds(tmp_path, rng):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        a = store.add("u", "the spare key is under the mat", unit(rng))
        store.add("u", "the wifi password is on the fridge", unit(rng))
        assert store.verify().ok
        rid, content = store.engine.catalog.query_one("SELECT rid, content FROM memories WHERE id = ?", (a,))

        def damage(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO memory_text (memory_text, rowid, content) VALUES ('delete', ?, ?)", (rid, content)
            )
            conn.execute("INSERT INTO memory_text (rowid, content) VALUES (999999, 'a ghost entry')")

        store.engine.catalog.write(damage)
        report = store.verify()
        bad = [p for p in report.problems if p.kind == "keyword_index"]
        assert len(bad) == 2 and all(p.repairable for p in bad)
        assert any("missing" in p.message and str(rid) in p.message for p in bad)
        assert any("without a memory" in p.message and "999999" in p.message for p in bad)
        assert word_ids(store, "u", "spare key") == []
        fixed = store.repair()
        assert fixed.ok and any("keyword index" in r for r in fixed.repaired)
        in_step(store)
        assert word_ids(store, "u", "spare key") == [a]


# -- hybrid search -----------------------------------------------------------------------------


def test_a_rare_name_that_cosine_ranks_low_is_found_by_its_words(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        q = unit(rng)
        for i in range(60):  # memories about as related to the question as each other
            store.add("u", f"a note about the weekly meeting number {i}", at_cos(q, 0.35, rng))
        rare = store.add("u", "Dinner with Thorvald at Smorgasburg on Friday", at_cos(q, 0.2, rng))
        plain = [h.id for h in store.search("u", q, k=10, record_access=False)]
        assert rare not in plain
        hits = store.search("u", q, text="where is dinner with Thorvald?", k=10, record_access=False, explain=True)
        assert hits[0].id == rare
        e = hits[0].explain
        assert e.raw["keywords"] > 0 and e.normalised["keywords"] == pytest.approx(1.0)
        assert e.raw["similarity"] == pytest.approx(0.2, abs=1e-4)  # the cosine, shown as it is
        assert sum(e.terms.values()) == pytest.approx(e.score, abs=1e-6)
        assert sum(e.weights.values()) == pytest.approx(1.0)
        w = store.policy.scoring.keyword_weight
        assert e.weights["keywords"] == pytest.approx(w * store.engine.compiled_policy.weights["similarity"])
        # a keyword-less hit of the same search says keywords 0
        others = [h for h in hits if h.id != rare]
        assert others and all(h.explain.raw["keywords"] == 0.0 for h in others if "Thorvald" not in h.memory.content)


def test_a_vector_candidate_below_the_keyword_cut_keeps_its_own_keyword_term(tmp_path, rng):
    """Sixty short notes share the query's words; the keyword list keeps the
    best 50 by BM25 (short texts first), so the long statement that answers
    best by meaning is outside it. Its keyword term is still what its words
    earn, as the catalog scores them."""
    from tierstore.core.hybrid import MIN_KEYWORD_CANDIDATES

    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        q = unit(rng)
        for i in range(MIN_KEYWORD_CANDIDATES + 10):
            store.add("u", f"Gael hospital note {i}", at_cos(q, 0.3, rng))
        for i in range(100):  # the rest of the namespace: the query's words stay rare enough to count
            store.add("u", f"weather report {i}", away(q, rng))
        long_text = "Gael is now employed as a nurse at the big hospital across the river in the old town centre"
        mid = store.add("u", long_text, at_cos(q, 0.9, rng))
        text = "what does Gael do at the hospital?"
        listed = word_ids(store, "u", text)[:MIN_KEYWORD_CANDIDATES]
        assert mid not in listed  # outside the cut the search asks for
        rid = store.engine.catalog.query("SELECT rid FROM memories WHERE id = ?", (mid,))[0][0]
        bm = keyword_index.keyword_scores(store.engine.catalog, "u", text, [rid])[rid]
        best = keyword_index.keyword_candidates(store.engine.catalog, "u", text, 1)[0][3]
        assert 0.1 * best < bm < best
        hits = store.search("u", q, text=text, k=1, record_access=False, explain=True)
        assert hits[0].id == mid
        e = hits[0].explain
        assert e.raw["keywords"] == pytest.approx(bm)
        assert e.normalised["keywords"] == pytest.approx(bm / best)
        # a superseded statement or another namespace's earns nothing
        assert keyword_index.keyword_scores(store.engine.catalog, "v", text, [rid]) == {}
        assert keyword_index.keyword_scores(store.engine.catalog, "u", "", [rid]) == {}


def test_keyword_candidates_in_the_cold_tier_are_found(tmp_path, rng):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        q = unit(rng)
        chat = store.add(
            "u", "the locksmith Ferdinand comes on Tuesday", at_cos(q, 0.5, rng), memory_type="conversation"
        )
        clock.advance(2 * HOUR)
        store.sweep()
        for i in range(30):  # hot memories that answer the vector well enough: "auto" does not reach the cold tier
            store.add("u", f"unrelated fact {i}", at_cos(q, 0.62, rng))
        assert chat not in {h.id for h in store.search("u", q, k=5, record_access=False)}
        hits = store.search("u", q, text="when does Ferdinand come", k=5, record_access=False, explain=True)
        top = [h for h in hits if h.id == chat]
        assert top and top[0].memory.tier == "cold" and "keyword" in top[0].explain.reached_because
        assert store.get("u", chat).tier == "cold"  # record_access=False: not reactivated
        assert chat not in {h.id for h in store.search("u", q, text="Ferdinand", k=5, include_cold=False)}


def test_a_text_query_with_an_embedder_uses_its_own_words(tmp_path):
    with TierStore.open(tmp_path / "s", embedder=hash_embed, clock=ManualClock(T0)) as store:
        for i in range(40):
            store.add("u", f"the weekly standup notes {i} standup")
        rare = store.add("u", "Priyanka's birthday is on the ninth of March")
        hits = store.search("u", "when is the birthday of priyanka?", k=3, explain=True, record_access=False)
        assert hits[0].id == rare and hits[0].explain.raw["keywords"] > 0
        off = store.search("u", "when is the birthday of priyanka?", k=3, explain=True, record_access=False, text="")
        assert "keywords" not in off[0].explain.raw  # an empty text: meaning alone


@pytest.mark.parametrize(
    "text", ["", "   ", "the and of is it", "?!…—", "東京に住んでいます", "\u0301\u0301", "Ω" * 5000]
)
def test_text_without_usable_words_answers_by_meaning(tmp_path, rng, text):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        q = unit(rng)
        for i in range(20):
            store.add("u", f"memory {i} in the store", unit(rng))
        plain = [(h.id, h.score) for h in store.search("u", q, k=5, record_access=False)]
        got = [(h.id, h.score) for h in store.search("u", q, k=5, record_access=False, text=text)]
        assert got == plain


def test_a_text_that_is_not_a_string_is_refused(tmp_path, rng):
    from tierstore.errors import InvalidInputError

    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        store.add("u", "x", unit(rng))
        with pytest.raises(InvalidInputError):
            store.search("u", unit(rng), text=b"bytes")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    rng = np.random.default_rng(3)
    clock = ManualClock(T0)
    store = TierStore.open(tmp_path_factory.mktemp("fuzz") / "s", dim=DIM, clock=clock)
    for i, words in enumerate(
        [
            "NEAR AND OR NOT",
            'quote " here',
            "col: content",
            "star * and caret ^",
            "plain words",
            "(parens) {braces}",
            "Zoë's café",
            "- minus + plus",
        ]
    ):
        store.add("u", words, rng.normal(size=DIM).astype(np.float32), memory_type="conversation" if i % 2 else "fact")
    clock.advance(2 * HOUR)
    store.sweep()
    yield store
    store.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=300))
def test_fts_syntax_in_user_text_is_never_interpreted(fuzz_store, text):
    q = np.ones(DIM, np.float32)
    hits = fuzz_store.search("u", q, text=text, k=4, record_access=False)
    assert 1 <= len(hits) <= 4
    words = keyword_index.query_words(text)
    expr = keyword_index.fts_query(text)
    assert (expr is None) == (not words)
    if expr is not None:  # every word a quoted phrase, joined by OR, in the text column: nothing else
        phrases = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        assert expr == f"content : ({phrases})"
        assert keyword_index.fts_query(text, "u") == f'ns : ^"u" AND content : ({phrases})'
        assert keyword_index.fts_query(text, "_.-") == expr  # a namespace without words: by the join alone
        assert all(w and all(ch.isalnum() for ch in w) for w in words)
    found = keyword_index.keyword_candidates(fuzz_store.engine.catalog, "u", text, 10)
    assert all(bm > 0 for *_, bm in found)


@pytest.mark.parametrize("text", ["NEAR(a b)", "content: plain", '"quote', "star*", "NOT plain", "^caret", "a OR"])
def test_fts_operators_are_words(fuzz_store, text):
    got = {mid for _, mid, _, _ in keyword_index.keyword_candidates(fuzz_store.engine.catalog, "u", text, 10)}
    contents = {m.id: m.content.lower() for m in fuzz_store.memories("u")}
    for mid in got:  # every match shares a word with the text, as words
        assert set(keyword_index.query_words(contents[mid])) & set(keyword_index.query_words(text))


# -- the policy ----------------------------------------------------------------------------------


def test_keyword_weight_is_validated():
    from tierstore.errors import PolicyError

    assert Policy.from_dict({"scoring": {"keyword_weight": 0.3}}).scoring.keyword_weight == 0.3
    for bad in (-0.1, 1.5, "0.5", True, float("nan")):
        with pytest.raises(PolicyError, match="keyword_weight"):
            Policy.from_dict({"scoring": {"keyword_weight": bad}})


def test_a_store_with_a_policy_stored_before_keywords_keeps_ranking_by_meaning(tmp_path, rng):
    path = tmp_path / "s"
    q = unit(rng)
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)) as store:
        for i in range(20):
            store.add("u", f"filler memory {i}", at_cos(q, 0.15, rng))
        rare = store.add("u", "Ulrike's flight lands at Tegel", away(q, rng))
        assert store.search("u", q, text="Ulrike flight", k=1, record_access=False)[0].id == rare
    with sqlite3.connect(path / "catalog.sqlite") as conn:  # the policy as the code before issue 28 stored it
        (text,) = conn.execute("SELECT value FROM meta WHERE key = 'policy'").fetchone()
        old = json.loads(text)
        del old["scoring"]["keyword_weight"]
        conn.execute("UPDATE meta SET value = ? WHERE key = 'policy'", (json.dumps(old),))
    with TierStore.open(path, clock=ManualClock(T0 + 10)) as store:
        assert store.policy.scoring.keyword_weight == 0.0
        plain = [h.id for h in store.search("u", q, k=5, record_access=False)]
        assert [h.id for h in store.search("u", q, text="Ulrike flight", k=5, record_access=False)] == plain
    with TierStore.open(path, clock=ManualClock(T0 + 20), policy=Policy.default()) as store:  # asked for
        assert store.search("u", q, text="Ulrike flight", k=1, record_access=False)[0].id == rare
    with TierStore.open(path, clock=ManualClock(T0 + 30)) as store:  # and stored since
        assert store.policy.scoring.keyword_weight == Policy.default().scoring.keyword_weight


# -- over HTTP -----------------------------------------------------------------------------------

TOKEN = "keywords-token-0123456789abcdef"


def test_text_search_over_http_and_remote_store(tmp_path):
    with TierStore.open(tmp_path / "s", embedder=hash_embed, clock=ManualClock(T0)) as store:
        for i in range(40):
            store.add("u", f"the weekly standup notes {i} standup")
        rare = store.add("u", "Priyanka's birthday is on the ninth of March")
        vec = -hash_embed(["the weekly standup notes standup"])[0]  # against the fillers, nothing for the rare one
        local = store.search("u", vec, text="Priyanka birthday", k=3, record_access=False)
        assert rare in [h.id for h in local]
        app = build_app(store, tokens=TokenTable([(TOKEN, Principal("t"))]))
        with ThreadedServer(app) as url, RemoteStore(url, token=TOKEN) as remote:
            hits = remote.search("u", vec, text="Priyanka birthday", k=3, record_access=False, explain=True)
            assert [h.id for h in hits] == [h.id for h in local]
            assert {h.id: h.explain.raw["keywords"] for h in hits}[rare] > 0
            by_text = remote.search("u", "when is priyanka's birthday", k=3, record_access=False)
            assert by_text[0].id == rare
            assert remote.search("u", vec, text="", k=3, record_access=False)  # empty: by meaning
            from tierstore.errors import InvalidInputError

            with pytest.raises(InvalidInputError):
                remote._post("/v1/search", {"ns": "u", "query": vec.tolist(), "text": 5})


def test_an_index_written_without_the_namespace_is_made_again_with_it(tmp_path, rng):
    """A store whose keyword index predates its namespace column is rebuilt
    with it at the next open, and a text search reads one namespace's rows."""
    q = unit(rng)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        mine = store.add("u", "Dinner with Thorvald at Smorgasburg", at_cos(q, 0.2, rng))
        store.add("v", "Dinner with Thorvald at Smorgasburg too", at_cos(q, 0.2, rng))
        for i in range(5):
            store.add("u", f"a note about the weekly meeting number {i}", at_cos(q, 0.3, rng))
    conn = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    with conn:  # the index as the code before it had the namespace wrote it
        for trigger in ("memory_text_add", "memory_text_forget", "memory_text_edit"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE memory_text")
        conn.execute(
            "CREATE VIRTUAL TABLE memory_text USING fts5(content, content = 'memories', content_rowid = 'rid',"
            " tokenize = 'porter unicode61')"
        )
        conn.execute(
            "CREATE TRIGGER memory_text_add AFTER INSERT ON memories"
            " BEGIN INSERT INTO memory_text (rowid, content) VALUES (NEW.rid, NEW.content); END"
        )
        conn.execute("INSERT INTO memory_text (memory_text) VALUES ('rebuild')")
    assert "ns" not in {r[1] for r in conn.execute("PRAGMA table_info(memory_text)")}
    conn.close()
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        cols = {r[1] for r in store.engine.catalog.query("PRAGMA table_info(memory_text)")}
        assert "ns" in cols
        in_step(store)
        triggers = {r[0] for r in store.engine.catalog.query("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
        assert {"memory_text_add", "memory_text_forget", "memory_text_edit"} <= triggers
        assert word_ids(store, "u", "Thorvald") == [mine]
        hits = store.search("u", q, text="dinner with Thorvald", k=1, record_access=False)
        assert hits[0].id == mine
        later = store.add("u", "Thorvald called about the dinner", at_cos(q, 0.1, rng))  # the new triggers index it
        assert set(word_ids(store, "u", "Thorvald")) == {mine, later}
        in_step(store)


def test_the_namespace_filter_in_the_index_changes_no_answer(tmp_path, rng):
    """Narrowed to the namespace in the index or not, a namespace's keyword
    candidates and their BM25 are the same, for a namespace whose words begin
    another's too; the index's own row count is the store's."""
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        names = ["u1", "u1-2", "x.u1", "___"]
        for ns in names:
            for i in range(12):
                store.add(ns, f"dinner with Thorvald number {i} in {ns} {'and cake' * (i % 3)}", unit(rng))
        cat = store.engine.catalog
        assert keyword_index.indexed_rows(cat) == 12 * len(names)
        for ns in names:
            for text in ("cake", "dinner Thorvald", "nothing matches this"):
                scoped = keyword_index.keyword_candidates(cat, ns, text, 100)
                plain = keyword_index.keyword_candidates(cat, ns, text, 100, scoped=False)
                assert [r[:3] for r in scoped] == [r[:3] for r in plain]
                assert [r[3] for r in scoped] == pytest.approx([r[3] for r in plain])
                assert all(r[1] in {m.id for m in store.memories(ns)} for r in scoped)
                assert len(scoped) == {"cake": 8, "dinner Thorvald": 12}.get(text, 0)


# -- rows indexed at the end of their transaction (keyword_pending) ---------------------------


def fts_consistent(store) -> None:
    """FTS5's own check of the index against the memories' text: raises on a mismatch."""
    store.engine.catalog.execute("INSERT INTO memory_text (memory_text) VALUES ('integrity-check')")


def pending(store) -> int:
    return store.engine.catalog.query("SELECT count(*) FROM keyword_pending")[0][0]


def test_rows_added_edited_and_deleted_in_one_transaction_are_indexed_as_they_end(tmp_path, rng):
    """The triggers only take notes; the commit applies them. A noted row
    edited before the commit is indexed with its new text, one deleted is
    never indexed (an FTS5 'delete' of a row never indexed would corrupt the
    index), an indexed row edited loses its old words."""
    from dataclasses import replace

    from tierstore.storage.catalog import INSERT_SQL, insert_params

    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        first = store.add("u", "Brunhilde plays the oboe", unit(rng))
        assert pending(store) == 0 and word_ids(store, "u", "oboe") == [first]
        row = store.engine.catalog.select_rows(" WHERE m.ns = ? AND m.id = ?", ("u", first))[0]

        def write(conn):
            for mid, text in (
                ("kept", "Siegfried plays the tuba"),
                ("edited", "Gunther plays the lute"),
                ("gone", "Hagen plays the harp"),
            ):
                conn.execute(INSERT_SQL, insert_params(replace(row, id=mid, content=text)))
            conn.execute("UPDATE memories SET content = 'Gunther plays the viola' WHERE ns = 'u' AND id = 'edited'")
            conn.execute("DELETE FROM memories WHERE ns = 'u' AND id = 'gone'")
            conn.execute(
                "UPDATE memories SET content = 'Brunhilde plays the cello' WHERE ns = 'u' AND id = ?", (first,)
            )
            notes = [conn.execute(f"SELECT rid FROM keyword_{t}").fetchall() for t in ("pending", "gone")]
            return [len(n) for n in notes]

        # noted during the transaction: "gone" left its note, the indexed first memory's old text is to go
        assert store.engine.catalog.write(write) == [3, 1]
        assert pending(store) == 0 and store.engine.catalog.query("SELECT count(*) FROM keyword_gone")[0][0] == 0
        in_step(store)
        fts_consistent(store)
        assert word_ids(store, "u", "tuba") == ["kept"]
        assert word_ids(store, "u", "viola") == ["edited"] and word_ids(store, "u", "lute") == []
        assert word_ids(store, "u", "harp") == []
        assert word_ids(store, "u", "cello") == [first] and word_ids(store, "u", "oboe") == []


def test_a_batch_refused_part_way_leaves_no_row_note_or_index_entry(tmp_path, rng):
    """Inserts run without a statement journal (INSERT OR FAIL): the batch's
    savepoint undoes the rows before the refused one, their notes and events."""
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        store.add("u", "Kriemhild keeps bees", unit(rng), id="taken")
        cat = store.engine.catalog
        before = [cat.query(f"SELECT count(*) FROM {t}")[0][0] for t in ("memories", "events", "memory_text_docsize")]
        items = [{"content": f"Etzel keeps goat number {i}", "embedding": unit(rng), "id": f"g{i}"} for i in range(5)]
        items.insert(3, {"content": "Etzel keeps bees", "embedding": unit(rng), "id": "taken"})
        with pytest.raises(DuplicateIdError):
            store.add_batch("u", items)
        after = [cat.query(f"SELECT count(*) FROM {t}")[0][0] for t in ("memories", "events", "memory_text_docsize")]
        assert after == before and pending(store) == 0
        assert word_ids(store, "u", "goat") == [] and store.get("u", "g0") is None
        in_step(store)
        fts_consistent(store)
        store.add_batch("u", [it for it in items if it["id"] != "taken"])  # the same ids go in afterwards
        assert len(word_ids(store, "u", "goat")) == 5
        in_step(store)


OLD_TRIGGERS = (  # the keyword triggers as the code before keyword_pending wrote them
    "CREATE TRIGGER memory_text_add AFTER INSERT ON memories"
    " BEGIN INSERT INTO memory_text (rowid, content, ns) VALUES (NEW.rid, NEW.content, NEW.ns); END",
    "CREATE TRIGGER memory_text_forget AFTER DELETE ON memories BEGIN INSERT INTO memory_text"
    " (memory_text, rowid, content, ns) VALUES ('delete', OLD.rid, OLD.content, OLD.ns); END",
    "CREATE TRIGGER memory_text_edit AFTER UPDATE OF content ON memories BEGIN"
    " INSERT INTO memory_text (memory_text, rowid, content, ns) VALUES ('delete', OLD.rid, OLD.content, OLD.ns);"
    " INSERT INTO memory_text (rowid, content, ns) VALUES (NEW.rid, NEW.content, NEW.ns); END",
)


def test_a_store_with_the_old_triggers_gets_the_new_ones_and_stays_in_step(tmp_path, rng):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        a = store.add("u", "Alberich hoards gold", unit(rng))
        b = store.add("u", "Mime forges a sword", unit(rng))
    conn = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    with conn:
        for trigger in ("memory_text_add", "memory_text_forget", "memory_text_edit"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE keyword_pending")
        conn.execute("DROP TABLE keyword_gone")
        for sql in OLD_TRIGGERS:
            conn.execute(sql)
    conn.close()
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        sql = store.engine.catalog.query_one("SELECT sql FROM sqlite_master WHERE name = 'memory_text_add'")[0]
        assert "keyword_pending" in sql
        store.delete("u", b)  # indexed by the old trigger: its entry is deleted, not left
        c = store.add("u", "Wotan loses an eye", unit(rng))
        assert word_ids(store, "u", "gold") == [a] and word_ids(store, "u", "sword") == []
        assert word_ids(store, "u", "eye") == [c]
        in_step(store)
        fts_consistent(store)


def test_rows_noted_by_another_connection_are_indexed_at_the_next_open(tmp_path, rng):
    """Rows inserted and deleted outside the store's writer (a tool with a
    connection of its own) are noted by the triggers, and the notes applied
    when the store next opens."""
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        store.add("u", "Fafner guards the hoard", unit(rng), id="f")
    conn = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    with conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(memories)") if r[1] != "rid"]
        picked = ["id || '2'" if c == "id" else "'Fasolt builds the hall'" if c == "content" else c for c in cols]
        conn.execute(
            f"INSERT INTO memories ({', '.join(cols)}) SELECT {', '.join(picked)} FROM memories WHERE id = 'f'"
        )
        conn.execute("DELETE FROM memories WHERE id = 'f'")
    assert conn.execute("SELECT count(*) FROM keyword_pending").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM keyword_gone").fetchone()[0] == 1
    conn.close()
    with TierStore.open(tmp_path / "s", dim=DIM, clock=ManualClock(T0)) as store:
        assert pending(store) == 0
        assert word_ids(store, "u", "hall") == ["f2"] and word_ids(store, "u", "hoard") == []
        in_step(store)
        fts_consistent(store)

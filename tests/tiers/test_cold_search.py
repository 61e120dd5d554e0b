"""Archived memories stay findable by meaning (issue 15): search reaches the
cold tier, a used cold hit comes back hot, restore by meaning and by loose
keywords, and the cold index's codes follow every memory in and out of the
cold tier (archive, restore, delete, restart, rebuild, verify, repair)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from tierstore import ManualClock, Policy, PolicyError, TierStore
from tierstore.analytics.lifecycle import lifecycle_metrics
from tierstore.errors import InvalidInputError
from tierstore.storage.objectstore import LocalObjectStore
from tierstore.tiers.cold_index import CODES_COMPLETE, ColdIndex

DIM = 16
T0 = 1_700_000_000.0
HOUR = 3600.0
DAY = 86400.0


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


class CountingStore(LocalObjectStore):
    """A local object store that counts ranged reads (``get``, and each range of ``read_ranges``)."""

    gets = 0

    def get(self, key, start=None, end=None):  # type: ignore[override]
        CountingStore.gets += 1
        return super().get(key, start, end)

    def read_ranges(self, key, ranges):  # type: ignore[override]
        CountingStore.gets += len(ranges)
        return super().read_ranges(key, ranges)


@pytest.fixture
def world(tmp_path):
    """A store with 40 archived conversations (random directions) and one hot fact."""
    rng = np.random.default_rng(7)
    clock = ManualClock(T0)
    vecs = [unit(rng.normal(size=DIM)) for _ in range(40)]
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids = store.add_batch(
        "u",
        [
            {
                "content": f"chat {i} about topic {i % 5}",
                "embedding": v,
                "memory_type": "conversation",
                "tags": [f"t{i % 3}"],
            }
            for i, v in enumerate(vecs)
        ],
    )
    clock.advance(2 * HOUR)
    assert store.sweep().archived == 40
    hot_vec = unit(rng.normal(size=DIM))
    hot_id = store.add("u", "a hot fact", hot_vec, memory_type="fact")
    yield store, clock, ids, vecs, hot_id, hot_vec
    store.close()


def _codes(store) -> int:
    return store.engine.catalog.query_one("SELECT count(*) FROM cold_codes")[0]


def test_a_weak_hot_answer_reaches_the_cold_tier_and_says_why(world):
    store, clock, ids, vecs, hot_id, _ = world
    hits = store.search("u", vecs[7], k=3, record_access=False, explain=True)
    assert hits[0].id == ids[7] and hits[0].memory.tier == "cold"
    assert abs(hits[0].explain.raw["similarity"] - 1.0) < 1e-5  # the exact cosine, from the archived vector
    assert "answered weakly" in hits[0].explain.reached_because
    assert "cold" in str(hits[0].explain)
    assert store.get("u", ids[7]).tier == "cold"  # found, not used: still archived
    assert store.search("u", vecs[7], k=3, record_access=False, include_cold=False)[0].id != ids[7]


def test_auto_leaves_the_cold_tier_alone_when_hot_answers_well(world, monkeypatch):
    store, clock, ids, vecs, hot_id, hot_vec = world
    calls = []
    real = store.engine.cold_index.candidates
    monkeypatch.setattr(store.engine.cold_index, "candidates", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    hits = store.search("u", hot_vec, k=1, record_access=False)
    assert hits[0].id == hot_id and calls == []  # k hits, similarity 1.0 >= the bar: hot answered
    store.search("u", hot_vec, k=1, record_access=False, include_cold=True)
    assert len(calls) == 1  # asked for: searched anyway
    store.search("u", hot_vec, k=3, record_access=False)
    assert len(calls) == 2  # hot holds one memory: fewer than the k asked for is a weak answer
    near = unit(hot_vec + 0.2 * np.ones(DIM, np.float32))  # similar, but not 1
    store.engine.policy = Policy.from_dict({"scoring": {"cold_similarity_bar": 1.0}})  # the bar is policy data
    hits = store.search("u", near, k=1, record_access=False, explain=True)
    assert len(calls) == 3


def test_a_used_cold_hit_is_reactivated(world):
    store, clock, ids, vecs, hot_id, _ = world
    before = store.get("u", ids[3])
    hits = store.search("u", vecs[3], k=1, record_access=True)  # asked for: cold hits too
    assert hits[0].id == ids[3] and hits[0].memory.tier == "cold"  # the hit shows where it was found
    after = store.get("u", ids[3])
    assert after.tier == "hot" and after.access_count == before.access_count + 1
    assert after.embedding.tobytes() == before.embedding.tobytes() if before.embedding is not None else True
    kinds = [k for (k,) in store.engine.catalog.query("SELECT kind FROM events WHERE id = ? ORDER BY seq", (ids[3],))]
    assert kinds[-1] == "reactivate"
    m = lifecycle_metrics(store)
    assert m["events"]["by_kind"]["reactivate"] == 1
    assert m["reactivation"]["by_kind"]["archive"]["numerator"] == 1
    assert _codes(store) == 39  # its code left with it


def test_touch_reactivates_a_cold_memory_bit_identical(world):
    store, clock, ids, vecs, hot_id, _ = world
    store.touch("u", [ids[5], ids[6]])
    for i in (5, 6):
        m = store.get("u", ids[i])
        assert m.tier == "hot" and m.access_count == 1
        np.testing.assert_array_equal(m.embedding, vecs[i])
    assert store.engine.catalog.query_one("SELECT count(*) FROM events WHERE kind = 'reactivate'")[0] == 2


def test_codes_follow_memories_in_and_out_of_the_cold_tier(world, tmp_path):
    store, clock, ids, vecs, hot_id, _ = world
    assert _codes(store) == 40
    store.restore("u", ids=[ids[0]])
    store.delete("u", ids[1])
    assert _codes(store) == 38
    path = store.path
    store.close()
    with TierStore.open(path, clock=clock) as again:  # they survive a restart
        assert again.search("u", vecs[9], k=1, record_access=False)[0].id == ids[9]
        assert again.verify().ok
    # and a catalog rebuilt from the bucket alone has them (39: the restored memory's archived copy is
    # all the bucket knows of it; the deleted one stays out, by its tombstone)
    with TierStore.open(tmp_path / "rebuilt", dim=DIM, clock=clock, cold=path / "cold", take_over_cold=True) as fresh:
        assert fresh.rebuild_catalog()["forgotten"] == 1
        assert _codes(fresh) == 39
        assert fresh.search("u", vecs[9], k=1, record_access=False)[0].id == ids[9]
        assert fresh.verify().ok


def test_verify_and_repair_cover_the_codes(world):
    store, clock, ids, vecs, hot_id, _ = world
    rid = store.engine.catalog.get_row("u", ids[2]).rid
    other = store.engine.catalog.get_row("u", ids[4]).rid
    store.engine.catalog.write(lambda c: c.execute("DELETE FROM cold_codes WHERE rid = ?", (rid,)))
    wrong = bytes(8 * store.engine.cold_index.words)
    store.engine.catalog.write(lambda c: c.execute("UPDATE cold_codes SET code = ? WHERE rid = ?", (wrong, other)))
    store.engine.cold_index.invalidate()
    assert store.search("u", vecs[2], k=1, record_access=False)[0].id != ids[2]  # without a code: unfindable
    report = store.verify()
    kinds = {(p.kind, "no cold-index code" in p.message, "do not match" in p.message) for p in report.problems}
    assert ("cold_index", True, False) in kinds and ("cold_index", False, True) in kinds
    assert any(f"u/{ids[4]}" in p.memories for p in report.problems)
    fixed = store.repair()
    assert fixed.ok, fixed.problems
    assert store.search("u", vecs[2], k=1, record_access=False)[0].id == ids[2]
    assert store.search("u", vecs[4], k=1, record_access=False)[0].id == ids[4]


def test_a_store_archived_before_the_index_gets_its_codes_from_sweeps(world):
    store, clock, ids, vecs, hot_id, _ = world
    store.engine.catalog.write(lambda c: c.execute("DELETE FROM cold_codes"))
    store.engine.catalog.write(lambda c: c.execute("DELETE FROM meta WHERE key = 'cold_codes'"))
    store.engine.cold_index.invalidate()
    report = store.verify()
    assert report.ok and any("archived before the cold index" in p.message for p in report.in_flight)
    assert store.sweep().errors == []
    assert _codes(store) == 40 and store.engine.catalog.get_meta("cold_codes") == CODES_COMPLETE
    assert store.search("u", vecs[11], k=1, record_access=False)[0].id == ids[11]
    assert store.verify().in_flight == []


def test_restore_by_meaning(world):
    store, clock, ids, vecs, hot_id, _ = world
    q = unit(vecs[12] + 0.3 * vecs[13])
    sims = [float(np.dot(q, v)) for v in vecs]
    expected = [ids[i] for i in np.argsort(sims)[::-1][:3]]
    assert store.restore("u", query=q, k=3) == expected
    assert all(store.get("u", i).tier == "hot" for i in expected)
    # narrowed by a filter: only among the memories tagged t0
    tagged = [i for i in range(40) if i % 3 == 0 and ids[i] not in expected]
    best = max(tagged, key=lambda i: float(np.dot(q, vecs[i])))
    assert store.restore("u", query=q, k=1, where={"tags": ["t0"]}) == [ids[best]]
    with pytest.raises(InvalidInputError, match="k= goes with query="):
        store.restore("u", text="chat", k=2)


def test_restore_by_any_keyword_with_stemming_ranked_by_bm25(tmp_path):
    clock = ManualClock(T0)
    rng = np.random.default_rng(1)
    texts = [
        "renew the passport before the summer trip",
        "passport photos were taken",
        "the cat likes tuna",
        "book a table for dinner",
        "passports and visas for the family",
    ]
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        ids = store.add_batch(
            "u", [{"content": t, "embedding": rng.normal(size=DIM), "memory_type": "conversation"} for t in texts]
        )
        clock.advance(2 * HOUR)
        store.sweep()
        got = store.restore("u", text="renewing passports", limit=3)  # stems; any word; best first
        assert got[0] == ids[0] and set(got) == {ids[0], ids[1], ids[4]}
        assert store.restore("u", text="dinner tuna") and store.get("u", ids[3]).tier == "hot"


def make_store_before_memory_text(path) -> tuple[str, str]:
    """A store as the version before the keyword index left it: archived text
    in ``cold_text`` alone, no ``memory_text``, none of its triggers."""
    clock = ManualClock(T0)
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        cold = store.add("u", "renewal of passports", np.ones(DIM), memory_type="conversation")
        clock.advance(2 * HOUR)
        store.sweep()
        hot = store.add("u", "the passport office opens at nine", -np.ones(DIM), memory_type="fact")
    with sqlite3.connect(path / "catalog.sqlite") as conn:
        for trigger in ("memory_text_add", "memory_text_forget", "memory_text_edit"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE memory_text")
        conn.execute("DELETE FROM meta WHERE key = 'memory_text'")
        conn.execute("CREATE VIRTUAL TABLE cold_text USING fts5(content, tokenize = 'porter unicode61')")
        conn.execute("INSERT INTO cold_text (rowid, content) SELECT rid, content FROM memories WHERE tier = 2")
    return cold, hot


def test_the_keyword_index_of_an_older_store_is_built_at_open(tmp_path):
    cold, hot = make_store_before_memory_text(tmp_path / "s")
    clock = ManualClock(T0 + 3 * HOUR)
    with TierStore.open(tmp_path / "s", clock=clock) as store:
        with sqlite3.connect(tmp_path / "s" / "catalog.sqlite") as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            assert "cold_text" not in tables and "memory_text" in tables
        report = store.verify()
        assert report.ok and report.checked["keyword_index"] == 2
        assert store.restore("u", text="passport") == [cold]  # restore: cold rows only, stemmed
        hits = store.search("u", np.ones(DIM), text="passport office", k=2, record_access=False)
        assert {h.id for h in hits} == {cold, hot}


def test_a_missing_archive_object_costs_its_candidates_not_the_search(world):
    store, clock, ids, vecs, hot_id, hot_vec = world
    key = store.engine.catalog.get_row("u", ids[8]).cold_key
    store.engine.cold.store.delete(key)  # lost outside tierstore
    hits = store.search("u", vecs[8], k=3, record_access=False)
    assert hits and all(h.id != ids[8] for h in hits)
    assert store.cold_search_errors >= 1
    assert f"tierstore_cold_search_errors_total {store.cold_search_errors}" in store.metrics_text()


def test_the_vector_cache_saves_reads_on_a_repeated_cold_search(tmp_path):
    clock = ManualClock(T0)
    rng = np.random.default_rng(3)
    objects = CountingStore(tmp_path / "cold")
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock, cold=objects) as store:
        vecs = [unit(rng.normal(size=DIM)) for _ in range(30)]
        store.add_batch(
            "u", [{"content": f"c{i}", "embedding": v, "memory_type": "conversation"} for i, v in enumerate(vecs)]
        )
        clock.advance(2 * HOUR)
        store.sweep()
        CountingStore.gets = 0
        store.search("u", vecs[0], k=3, record_access=False)
        first = CountingStore.gets
        CountingStore.gets = 0
        store.search("u", vecs[0], k=3, record_access=False)
        assert first >= 1 and CountingStore.gets == 0


def test_k_counts_the_cold_tier(world):
    store, clock, ids, vecs, hot_id, _ = world
    hits = store.search("u", vecs[0], k=10**9, record_access=False, include_cold=True)
    assert len(hits) == 41


def test_bad_include_cold_values(world, tmp_path):
    store = world[0]
    with pytest.raises(InvalidInputError, match="include_cold"):
        store.search("u", np.ones(DIM), include_cold="sometimes")
    with pytest.raises(PolicyError, match="scoring.include_cold"):
        Policy.from_dict({"scoring": {"include_cold": "yes"}})
    with pytest.raises(PolicyError, match="scoring.cold_similarity_bar"):
        Policy.from_dict({"scoring": {"cold_similarity_bar": 2}})
    assert Policy.from_dict({"scoring": {"include_cold": False}}).scoring.include_cold is False


def test_an_archived_memory_that_matches_better_than_anything_hot_ranks_first(tmp_path):
    """similar_first: recent hot hits that match worse do not bury an archived
    memory that matches better (recency and weight would, by the score alone)."""
    rng = np.random.default_rng(11)
    target = unit(rng.normal(size=DIM))
    query = unit(target + 0.25 * unit(rng.normal(size=DIM)))
    for similar_first in (True, False):
        clock = ManualClock(T0)
        policy = Policy.from_dict({"scoring": {"similar_first": similar_first}})
        with TierStore.open(tmp_path / f"s{similar_first}", dim=DIM, clock=clock, policy=policy) as store:
            old = store.add("u", "the archived detail", target, memory_type="conversation")
            clock.advance(30 * DAY)
            store.sweep()
            assert store.get("u", old).tier == "cold"
            # recent memories, each a weaker match than the archived one
            recent = [unit(query + 0.6 * unit(rng.normal(size=DIM))) for _ in range(5)]
            store.add_batch(
                "u", [{"content": f"recent {i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(recent)]
            )
            hits = store.search("u", query, k=3, record_access=False, include_cold=True, explain=True)
            best_hot = max(h.explain.raw["similarity"] for h in hits if h.memory.tier == "hot")
            cold = [
                h
                for h in store.search("u", query, k=6, record_access=False, include_cold=True, explain=True)
                if h.id == old
            ][0]
            assert cold.explain.raw["similarity"] > best_hot
            if similar_first:
                assert hits[0].id == old
            else:
                assert hits[0].id != old and cold.score < hits[0].score  # by the score alone, it loses


def test_archived_memories_are_ordered_by_relevance_not_by_their_last_use(tmp_path):
    """cold_order: among archived memories, a greeting re-said every day (its
    last use recent) does not outrank the detail said once that matches the
    question better; with cold_order = "fused" the use factors decide."""
    e = np.eye(DIM, dtype=np.float32)
    query = e[0]
    detail = unit(0.6 * e[0] + 0.8 * e[1])  # cosine 0.6 with the query
    greeting = unit(0.45 * e[0] + 0.893 * e[2])  # cosine 0.45
    for order in ("relevance", "fused"):
        clock = ManualClock(T0)
        # recency weighs 0.15 here (the default weighed it so before issue 15's second round), so that
        # the whole score prefers the greeting
        policy = Policy.from_dict({"scoring": {"cold_order": order, "weights": {"similarity": 0.55, "recency": 0.15}}})
        with TierStore.open(tmp_path / order, dim=DIM, clock=clock, policy=policy) as store:
            d = store.add("u", "parked on level 3", detail, memory_type="conversation")
            g = store.add("u", "good morning!", greeting, memory_type="conversation")
            for _ in range(30):  # said again every day after it was archived: dedupe brings it back
                clock.advance(DAY)
                store.sweep()
                assert store.add("u", "good morning!", greeting, memory_type="conversation") == g
            clock.advance(2 * HOUR)
            store.sweep()
            assert store.get("u", d).tier == store.get("u", g).tier == "cold"
            hits = store.search("u", query, k=1, record_access=False, explain=True)
            sims = {
                h.id: h.explain.raw["similarity"]
                for h in store.search("u", query, k=2, record_access=False, explain=True)
            }
            assert sims[d] > sims[g]  # the detail matches better...
            if order == "relevance":
                assert hits[0].id == d
            else:  # ...but the greeting's recent use outweighs it in the whole score
                assert hits[0].id == g


def test_cold_hits_come_back_hot_when_used_not_when_returned(world, tmp_path):
    """record_access_cold: off by default, a search that records accesses
    (the policy's record_access) leaves its cold hits archived; touch brings
    one back; with the policy's record_access_cold on, the search does."""
    store, clock, ids, vecs = world[0], world[1], world[2], world[3]
    assert store.policy.scoring.record_access and not store.policy.scoring.record_access_cold
    hits = store.search("u", vecs[3], k=2)
    assert hits[0].id == ids[3] and hits[0].memory.tier == "cold"
    assert store.get("u", ids[3]).tier == "cold" and store.get("u", ids[3]).access_count == 0
    store.touch("u", ids[3])  # used: back hot
    assert store.get("u", ids[3]).tier == "hot"
    policy = Policy.from_dict({"scoring": {"record_access_cold": True}})
    assert Policy.from_dict(policy.to_dict()).scoring.record_access_cold is True
    with pytest.raises(PolicyError, match="scoring.record_access_cold"):
        Policy.from_dict({"scoring": {"record_access_cold": "no"}})
    with pytest.raises(PolicyError, match="scoring.cold_order"):
        Policy.from_dict({"scoring": {"cold_order": "newest"}})
    store.close()
    with TierStore.open(tmp_path / "s", clock=clock, policy=policy) as s2:
        hits = s2.search("u", vecs[5], k=2)
        assert hits[0].id == ids[5] and hits[0].memory.tier == "cold"
        assert s2.get("u", ids[5]).tier == "hot"  # the search counted it: reactivated


def test_a_sweep_adds_its_codes_to_those_loaded_without_reading_the_namespace_again(tmp_path):
    """The night's archive into a namespace whose codes are loaded adds the
    new codes to them (a platform archives into most namespaces every night:
    each one's next search read all its codes back); the result is what a
    load from the catalog gives, and a search finds the new memories."""
    rng = np.random.default_rng(5)
    clock = ManualClock(1_700_000_000.0)
    with TierStore.open(tmp_path / "s", dim=16, clock=clock) as store:
        X = rng.normal(size=(40, 16)).astype(np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)

        def tell(lo: int, hi: int) -> None:
            store.add_batch(
                "u",
                [
                    {"content": f"t{i}", "embedding": X[i], "id": f"t{i}", "memory_type": "conversation"}
                    for i in range(lo, hi)
                ],
            )
            clock.advance(2 * 3600.0)
            assert store.sweep().archived == hi - lo

        tell(0, 25)
        index = store.engine.cold_index
        assert index.count("u") == 25  # loaded
        reads = []
        real = index._query
        index._query = lambda sql, params: reads.append(sql) or real(sql, params)
        tell(25, 40)
        assert index.count_if_loaded("u") == 40 and reads == []  # taken in, not read back
        kept = index._loaded.peek("u")
        fresh = index._load("u")
        for name in ("rids", "codes", "vector_at", "vector_crc"):
            assert np.array_equal(getattr(kept, name), getattr(fresh, name)), name
        hit = store.search("u", X[33], k=1, include_cold=True, record_access=False)[0]
        assert hit.id == "t33" and store.get("u", "t33").tier == "cold"


def test_codes_of_memories_that_left_the_cold_tier_are_read_again_after_a_search_meets_them(tmp_path):
    """Loaded codes only grow between loads (a sweep's archive adds to them):
    a memory deleted or restored since leaves its code there, taking a
    candidate's place. A search that meets such codes drops them from the
    loaded ones (what a load from the catalog gives), without a read."""
    rng = np.random.default_rng(6)
    clock = ManualClock(1_700_000_000.0)
    with TierStore.open(tmp_path / "s", dim=16, clock=clock) as store:
        X = rng.normal(size=(30, 16)).astype(np.float32)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        store.add_batch(
            "u",
            [{"content": f"t{i}", "embedding": X[i], "id": f"t{i}", "memory_type": "conversation"} for i in range(30)],
        )
        clock.advance(2 * 3600.0)
        assert store.sweep().archived == 30
        index = store.engine.cold_index
        assert index.count("u") == 30  # loaded
        store.delete("u", "t7")
        store.restore("u", ids=["t8"])
        assert store.get("u", "t8").tier != "cold"
        assert index.count_if_loaded("u") == 30  # still loaded, with the two codes that left
        reads = []
        real = index._query
        index._query = lambda sql, params: reads.append(sql) or real(sql, params)
        hits = store.search("u", X[7], k=3, include_cold=True, record_access=False)
        assert "t7" not in [h.id for h in hits]
        sign_code_reads = [
            sql for sql in reads if "code8" not in sql
        ]  # (the candidates' int8 codes are read per search)
        assert index.count_if_loaded("u") == 28 and sign_code_reads == []  # it met them: dropped, nothing read again
        kept, fresh = index._loaded.peek("u"), index._load("u")
        for name in ("rids", "codes", "vector_at", "vector_crc"):
            assert np.array_equal(getattr(kept, name), getattr(fresh, name)), name
        hits = store.search("u", X[9], k=3, include_cold=True, record_access=False)
        assert hits[0].id == "t9" and index.count_if_loaded("u") == 28  # nothing left to drop: kept


def test_a_discard_is_ignored_once_the_codes_changed_since_the_search_read_them():
    """discard() takes the token of the codes the search read: if an archive
    added codes since (the rid may have been archived again), nothing is
    dropped."""
    rows = [(i, np.uint64(i).tobytes() * 2, 0, 0) for i in range(1, 6)]
    index = ColdIndex(lambda sql, params: rows, 128)
    assert index.count("n") == 5
    token = index.generation("n")
    index.add("n", [(9, rows[0][1], 0, 0)])
    index.discard("n", [2], token)
    assert index.count_if_loaded("n") == 6  # ignored: the codes changed since the token
    index.discard("n", [2, 3], index.generation("n"))
    assert index.count_if_loaded("n") == 4 and 2 not in index._loaded.peek("n").rids

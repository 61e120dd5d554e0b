"""TierStore.search_in_memory (a search the hot tier answers without
waiting, or None) and the server's use of it: such searches are answered on
the event loop, everything else in a worker."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tierstore import ManualClock, TierStore
from tierstore.errors import InvalidInputError
from tierstore.remote.client import RemoteStore
from tierstore.remote.server.app import build_app
from tierstore.testing.embedders import hash_embed
from tierstore.testing.live_server import ThreadedServer

DIM = 16
T0 = 1_700_000_000.0


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def world(tmp_path):
    clock = ManualClock(T0)
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    vecs = unit(np.random.default_rng(1), 40)
    ids = store.add_batch(
        "u", [{"content": f"fact {i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(vecs)]
    )
    yield store, clock, vecs, ids
    store.close()


def _counts(store: TierStore, ids: list[str]) -> list[int]:
    return [store.get("u", i).access_count for i in ids]


def test_it_answers_what_search_answers_and_records_the_same_accesses(world):
    store, _, vecs, ids = world
    for j in (0, 7, 19):
        fast = store.search_in_memory("u", vecs[j], k=5, record_access=False)
        slow = store.search("u", vecs[j], k=5, record_access=False)
        assert fast is not None and [(h.id, h.score) for h in fast] == [(h.id, h.score) for h in slow]
    before = _counts(store, ids)
    fast = store.search_in_memory("u", vecs[3], k=3, record_access=True)
    assert fast is not None and fast[0].id == ids[3]
    after = _counts(store, ids)
    assert [b - a for a, b in zip(before, after)] == [1 if i in {h.id for h in fast} else 0 for i in ids]


def test_it_declines_what_may_wait_and_changes_nothing(world, tmp_path):
    store, clock, vecs, ids = world
    before = _counts(store, ids)
    assert store.search_in_memory("u", vecs[0], k=3, include_cold=True, record_access=True) is None
    assert store.search_in_memory("u", vecs[0], k=41, record_access=True) is None  # more than the hot tier holds
    weak = -vecs[0]  # nothing hot is similar: "auto" would go to the cold tier ...
    # ... which is known to hold nothing of "u" (read at open): the answer is the hot hits
    fast = store.search_in_memory("u", weak, k=3, include_cold="auto", record_access=False)
    assert [h.id for h in fast] == [h.id for h in store.search("u", weak, k=3, record_access=False)]
    store.engine.cold_index.invalidate("u")  # as an archive of "u" would: its codes are to be read
    assert store.search_in_memory("u", weak, k=3, include_cold="auto", record_access=True) is None
    assert store.search_in_memory("other", vecs[0], k=1) is None  # a namespace not loaded
    hot = store.engine.hot.get("u")
    with hot.lock.write():  # a writer holds the index: a reader would wait
        got: list = []
        t = threading.Thread(target=lambda: got.append(store.search_in_memory("u", vecs[0], k=1)))
        t.start()
        t.join(60)
        assert got == [None]
    assert _counts(store, ids) == before
    with pytest.raises(InvalidInputError):
        store.search_in_memory("u", vecs[0], k=0)


def test_it_declines_text_and_a_warm_tier(tmp_path):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "t", embedder=hash_embed, clock=clock) as store:
        store.add("u", "lisbon is sunny", memory_type="fact")
        assert store.search_in_memory("u", "lisbon", k=1) is None
        assert store.search("u", "lisbon", k=1)[0].content == "lisbon is sunny"
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "w", dim=DIM, clock=clock) as store:
        vecs = unit(np.random.default_rng(2), 10)
        store.add_batch(
            "u", [{"content": f"c{i}", "embedding": v, "memory_type": "conversation"} for i, v in enumerate(vecs)]
        )
        store.add("u", "a fact", vecs[0], memory_type="fact")
        clock.advance(40 * 60)  # past the conversations' demotion: the warm tier holds them
        store.sweep()
        assert store.stats().by_tier.get("warm", 0) > 0
        assert store.search_in_memory("u", vecs[0], k=1) is None
        assert store.search_in_memory("u", vecs[0], k=1, include_warm=False)[0].content == "a fact"


def test_the_server_answers_hot_searches_on_its_loop(world):
    """With every worker stuck, a search the hot tier answers still comes
    back (it never reaches a worker); one that needs the cold tier waits for
    a worker."""
    store, _, vecs, ids = world
    release = threading.Event()
    entered = threading.Event()
    plain = store.search

    def stuck_search(*args, **kwargs):  # what a worker runs for /v1/search
        entered.set()
        release.wait(30)
        return plain(*args, **kwargs)

    app = build_app(store, tokens=None, workers=1)
    with ThreadedServer(app) as url, RemoteStore(url) as remote, ThreadPoolExecutor(2) as pool:
        store.search = stuck_search  # type: ignore[method-assign]
        try:
            waiting = pool.submit(remote.search, "u", vecs[5], k=3, include_cold=True, record_access=False)
            assert entered.wait(10)  # the only worker is taken
            t = time.monotonic()
            hits = remote.search("u", vecs[2], k=3, record_access=False)
            assert time.monotonic() - t < 20 and hits[0].id == ids[2]  # not behind the stuck one (30 s)
            assert not waiting.done()
            release.set()
            assert waiting.result(10)[0].id == ids[5]
        finally:
            release.set()
            store.search = plain  # type: ignore[method-assign]


def test_a_namespace_the_hot_tier_could_not_answer_goes_to_workers_for_a_while(world):
    store, _, vecs, ids = world
    app = build_app(store, tokens=None, workers=2)
    calls = []
    plain = store.search_in_memory

    def counted(*args, **kwargs):
        calls.append(args[0])
        return plain(*args, **kwargs)

    store.search_in_memory = counted  # type: ignore[method-assign]
    try:
        with ThreadedServer(app) as url, RemoteStore(url) as remote:
            assert remote.search("u", vecs[1], k=2, record_access=False)[0].id == ids[1]
            assert calls == ["u"]
            store.engine.cold_index.invalidate("u")  # "u" may have archived memories now (codes unread)
            weak = -vecs[1]  # "auto" goes cold: declined, then answered by a worker
            remote.search("u", weak, k=2, record_access=False)
            assert calls == ["u", "u"]
            for _ in range(16):  # the namespace's next searches skip the loop
                assert remote.search("u", vecs[1], k=2, record_access=False)[0].id == ids[1]
            assert calls == ["u", "u"]
            remote.search("u", vecs[1], k=2, record_access=False)
            assert calls == ["u", "u", "u"]  # then it is tried again
            remote.search("u", vecs[1], k=2, include_cold=True, record_access=False)
            assert calls == ["u", "u", "u"]  # asked for the cold tier: straight to a worker, nothing remembered
            remote.search("u", vecs[1], k=2, record_access=False)
            assert calls == ["u", "u", "u", "u"]
    finally:
        store.search_in_memory = plain  # type: ignore[method-assign]


def test_a_weak_answer_is_final_when_nothing_is_archived(world):
    """ "auto" would go to the cold tier, which holds nothing of the
    namespace (once its codes are known): the hot hits are the answer, in
    the order search gives; with one memory archived it declines."""
    store, clock, vecs, ids = world
    weak = -vecs[4]
    slow = store.search("u", weak, k=4, record_access=False)  # goes cold: the namespace's codes are read
    fast = store.search_in_memory("u", weak, k=4, record_access=False)
    assert fast is not None and [(h.id, h.score) for h in fast] == [(h.id, h.score) for h in slow]
    store.add("u", "a passing remark", vecs[4], memory_type="conversation")
    clock.advance(2 * 3600)  # past a conversation's TTL: archived
    assert store.sweep().archived >= 1
    store.search("u", weak, k=4, record_access=False)
    assert store.engine.cold_index.count("u") >= 1
    assert store.search_in_memory("u", weak, k=4, record_access=False) is None

"""TierStore.upsert_batch: replacing a memory under its id in one transaction
(issue 18: the adapters' updates were a delete then an add)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers import DIM, SUPPORT, T0, unit

from tierstore import ManualClock, TierStore
from tierstore.errors import DuplicateIdError, InvalidInputError, InvalidVectorError
from tierstore.tiers.tombstones import TOMBSTONE_PREFIX

HOUR = 3600.0
DAY = 86400.0
CHILD = SUPPORT / "crash_child.py"


def _one(store: TierStore, ns: str, mid: str) -> int:
    """How many catalog rows hold ``mid`` (a replace must leave exactly one)."""
    return store.engine.catalog.query_one("SELECT count(*) FROM memories WHERE ns = ? AND id = ?", (ns, mid))[0]


def test_upsert_replaces_content_vector_and_metadata_under_the_same_id(store, rng):
    old_v, new_v = unit(rng), unit(rng)
    store.add("u", "old text", old_v, id="doc", metadata={"v": 1}, tags=["a"])
    other = store.add("u", "unrelated", unit(rng))
    ids = store.upsert_batch(
        "u",
        [
            {"content": "new text", "embedding": new_v, "id": "doc", "metadata": {"v": 2}},
            {"content": "brand new", "embedding": unit(rng), "id": "fresh"},
        ],
    )
    assert ids == ["doc", "fresh"]
    m = store.get("u", "doc")
    assert (m.content, m.metadata, m.tags, m.tier) == ("new text", {"v": 2}, (), "hot")
    assert np.allclose(m.embedding, new_v, atol=1e-6)
    assert _one(store, "u", "doc") == 1 and store.get("u", "fresh").content == "brand new"
    hot = store.engine.hot.ensure("u")
    assert hot.live == 3 and set(hot.slot_of) == {"doc", "fresh", other}
    # found by its new vector, and the old vector no longer leads to it
    assert store.search("u", new_v, k=1, record_access=False)[0].id == "doc"
    hits = store.search("u", old_v, k=3, record_access=False, explain=True)
    assert all(h.id != "doc" or h.explain.raw["similarity"] < 0.5 for h in hits)
    # the events say what happened: the old version deleted (replaced), the new one created
    kinds = store.engine.catalog.query("SELECT kind, reason FROM events WHERE ns = 'u' AND id = 'doc' ORDER BY seq")
    assert kinds == [("create", "add"), ("delete", "replaced"), ("create", "add")]


def test_upsert_without_existing_ids_is_an_add_and_keeps_every_item_under_its_id(store, rng):
    """dedupe is on by default, yet an upsert stores each item under its own id."""
    store.add("u", "same words", unit(rng), id="first")
    ids = store.upsert_batch("u", [{"content": "same words", "embedding": unit(rng), "id": "second"}])
    assert ids == ["second"] and store.get("u", "second").content == "same words"
    assert store.get("u", "first") is not None


def test_a_later_upsert_survives_a_reopen(tmp_path, clock, rng):
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        store.add_batch("u", [{"content": f"m{i}", "embedding": unit(rng), "id": f"m{i}"} for i in range(3000)])
        store.checkpoint()  # an hnswlib namespace with a checkpoint that still names the old version
        v = unit(rng)
        store.upsert_batch("u", [{"content": "m7 again", "embedding": v, "id": "m7"}])
    with TierStore.open(tmp_path / "s", clock=clock) as store:
        assert store.get("u", "m7").content == "m7 again"
        assert store.search("u", v, k=1, record_access=False)[0].id == "m7"
        hot = store.engine.hot.ensure("u")
        assert hot.live == 3000 and _one(store, "u", "m7") == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"content": "", "embedding": None},  # empty content
        {"content": "ok", "embedding": np.zeros(DIM)},  # zero vector
        {"content": "ok", "embedding": "rubbish", "memory_type": "no-such-type"},
    ],
)
def test_bad_input_changes_nothing(store, rng, bad):
    v = unit(rng)
    store.add("u", "kept", v, id="doc", metadata={"v": 1})
    before = store.engine.catalog.query("SELECT rid, id, content FROM memories ORDER BY rid")
    item = {"id": "other", **bad}
    if item["embedding"] is None:
        item["embedding"] = unit(rng)
    with pytest.raises((InvalidInputError, InvalidVectorError)):
        store.upsert_batch("u", [{"content": "replacement", "embedding": unit(rng), "id": "doc"}, item])
    with pytest.raises(DuplicateIdError):  # the same id twice in one batch: refused, as add_batch does
        store.upsert_batch(
            "u",
            [
                {"content": "a", "embedding": unit(rng), "id": "doc"},
                {"content": "b", "embedding": unit(rng), "id": "doc"},
            ],
        )
    with pytest.raises(InvalidInputError):
        store.upsert_batch("u", [{"content": "a", "embedding": unit(rng), "id": "doc", "nonsense": 1}])
    assert store.engine.catalog.query("SELECT rid, id, content FROM memories ORDER BY rid") == before
    assert store.get("u", "doc").content == "kept"
    assert store.search("u", v, k=1, record_access=False)[0].id == "doc"


def test_upsert_replaces_a_warm_memory(store, clock, rng):
    vecs = [unit(rng) for _ in range(4)]
    ids = store.add_batch("w", [{"content": f"fact {i}", "embedding": v, "id": f"w{i}"} for i, v in enumerate(vecs)])
    clock.advance(20 * DAY)  # unused facts decay below the demote threshold
    assert store.sweep().demoted == 4
    new_v = unit(rng)
    store.upsert_batch("w", [{"content": "fact 1, revised", "embedding": new_v, "id": ids[1]}])
    m = store.get("w", ids[1])
    assert (m.content, m.tier) == ("fact 1, revised", "hot") and _one(store, "w", ids[1]) == 1
    assert store.search("w", new_v, k=1, record_access=False)[0].id == ids[1]
    # the warm shard's old row is dead: the old vector finds the other warm ones, not a second ids[1]
    hits = store.search("w", vecs[1], k=4, record_access=False)
    assert [h.id for h in hits].count(ids[1]) == 1
    assert store.verify().ok


def test_upsert_replaces_an_archived_memory_and_a_rebuild_keeps_the_new_one(tmp_path, clock, rng):
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    store.add_batch(
        "c",
        [
            {"content": t, "embedding": unit(rng), "memory_type": "conversation", "id": mid}
            for t, mid in (("old text", "chat"), ("a neighbour", "other"))
        ],
    )
    clock.advance(2 * HOUR)
    assert store.sweep().archived == 2 and store.get("c", "chat").tier == "cold"
    clock.advance(1.0)
    store.upsert_batch(
        "c", [{"content": "new text", "embedding": unit(rng), "id": "chat", "memory_type": "conversation"}]
    )
    assert store.get("c", "chat").content == "new text" and store.get("c", "chat").tier == "hot"
    # the old record is in its archive object until a sweep rewrites it: a tombstone names it meanwhile
    assert store.engine.cold.store.list(TOMBSTONE_PREFIX + "/")
    store.close()
    fresh = TierStore.open(tmp_path / "rebuilt", dim=DIM, clock=clock, cold=store.path / "cold", take_over_cold=True)
    counts = fresh.rebuild_catalog()
    # the object still holds the old version's record (its neighbour is archived there): it stays forgotten
    assert counts["forgotten"] == 1 and counts["inserted"] == 1
    assert fresh.get("c", "chat") is None and fresh.get("c", "other").content == "a neighbour"
    fresh.close()


def test_concurrent_readers_never_see_the_id_missing(tmp_path, clock, rng):
    """Replacing one memory over and over while threads read it by get and by
    search: every read finds it (old version or new), never neither. With a
    delete then an add (the adapters before), readers see gaps."""
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    v = unit(rng)
    store.add_batch("r", [{"content": f"filler {i}", "embedding": unit(rng)} for i in range(50)])
    store.add("r", "version 0", v, id="doc")
    stop = threading.Event()
    missing: list[str] = []
    reads = [0, 0]

    def by_get() -> None:
        while not stop.is_set():
            m = store.get("r", "doc")
            if m is None or not m.content.startswith("version"):
                missing.append("get")
            reads[0] += 1

    def by_search() -> None:
        while not stop.is_set():
            hits = store.search("r", v, k=1, record_access=False, include_cold=False)
            if not hits or hits[0].id != "doc":
                missing.append("search")
            reads[1] += 1

    readers = [threading.Thread(target=by_get), threading.Thread(target=by_search)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 30  # both readers under way before the upserts begin
    while not (reads[0] and reads[1]) and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        for i in range(1, 150):
            # the same vector, slightly moved: the memory stays the best match for v
            w = v + 0.01 * unit(rng)
            store.upsert_batch("r", [{"content": f"version {i}", "embedding": w, "id": "doc"}])
    finally:
        stop.set()
        for t in readers:
            t.join()
    store.close()
    assert reads[0] > 0 and reads[1] > 0
    assert missing == []


def test_sigkill_after_the_replace_commit_keeps_the_new_version_once(tmp_path, rng):
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)) as store:
        store.add_batch("crash", [{"content": f"m{i}", "embedding": unit(rng), "id": f"m{i}"} for i in range(20)])
        store.add("crash", "the old version", unit(rng), id="late")
    env = dict(os.environ, TIERSTORE_CRASH_AT="replace.after_commit")
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(path), "upsert", repr(T0 + 60)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    with TierStore.open(path, clock=ManualClock(T0 + 60)) as store:
        m = store.get("crash", "late")
        assert m.content == "replaced just before the crash" and _one(store, "crash", "late") == 1
        q = np.ones(DIM) / np.sqrt(DIM)
        assert store.search("crash", q, k=1, record_access=False)[0].id == "late"
        hot = store.engine.hot.ensure("crash")
        assert hot.live == 21 and "late" in hot.slot_of

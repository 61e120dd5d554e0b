"""SlotTexts: a hot namespace's texts in one UTF-8 buffer."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tierstore import TierStore
from tierstore.tiers.slot_texts import SlotTexts


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.text(max_size=30)), max_size=60))
def test_reads_what_was_set_at_each_slot_in_any_order(writes):
    texts = SlotTexts()
    expected: dict[int, str] = {}
    for slot, text in writes:
        texts.reserve(slot + 1)
        if slot in expected:
            continue  # a slot is set once (the hot tier never sets one twice)
        texts[slot] = text
        expected[slot] = text
    for slot in range(texts.capacity):
        assert texts[slot] == expected.get(slot, "")


def test_of_growth_and_unset_slots():
    texts = SlotTexts.of(["a", "ünï", "", "日本語 🙂"])
    assert [texts[i] for i in range(4)] == ["a", "ünï", "", "日本語 🙂"]
    texts.reserve(2)  # smaller: nothing changes
    assert texts.capacity == 4
    texts.reserve(10)
    assert texts.capacity == 10 and texts[3] == "日本語 🙂" and texts[9] == ""
    texts[9] = "last"
    assert texts[9] == "last" and texts.nbytes() == len("aünï日本語 🙂last".encode()) + 10 * 12
    lone = "\ud800x"  # a lone surrogate round-trips as it came
    texts[5] = lone
    assert texts[5] == lone


def test_a_reader_sees_set_slots_unchanged_while_slots_are_added():
    texts = SlotTexts(1)
    texts[0] = "first"
    stop = threading.Event()
    reading = threading.Event()  # the reader has read once: the writes start while it runs
    seen: list[str] = []

    def read() -> None:
        while not stop.is_set():
            seen.append(texts[0])
            reading.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert reading.wait(30)
    try:
        for slot in range(1, 20_000):
            if slot >= texts.capacity:
                texts.reserve(2 * slot)  # each growth copies the starts and lengths
            texts[slot] = f"memory {slot}"
    finally:
        stop.set()
        reader.join()
    assert seen and set(seen) == {"first"}
    assert texts[19_999] == "memory 19999"


def test_hot_hits_and_gets_return_the_texts_through_growth_and_compaction(tmp_path):
    store = TierStore.open(tmp_path / "s", dim=8)
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(300, 8)).astype(np.float32)
    texts = [f"note {i} · ünïcode {'x' * (i % 7)}" for i in range(300)]
    store.add_batch("ns", [{"content": t, "embedding": v, "id": f"m{i}"} for i, (t, v) in enumerate(zip(texts, vecs))])
    hot = store.engine.hot.ensure("ns")
    before = hot.contents
    for i in list(range(0, 300, 2)) + [1]:  # past half dead: a compaction renumbers the live slots
        store.delete("ns", f"m{i}")
    assert hot.n == hot.live == 149 and hot.contents is not before
    for i in (3, 151, 299):
        assert store.get("ns", f"m{i}").content == texts[i]
        hit = store.search("ns", vecs[i], k=1)[0]
        assert hit.id == f"m{i}" and hit.content == texts[i] and hit.memory.content == texts[i]
    assert store.get("ns", "m0") is None
    assert before[1] == texts[1]  # a snapshot holding the old texts still reads them
    store.close()

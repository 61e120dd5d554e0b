"""LocalObjectStore.read_ranges: archive objects kept open between reads
(tierstore/storage/objectstore/_open_files.py), and the vector-only record decode a
cold search uses (archive.decode_vector)."""

from __future__ import annotations

import os
import threading
import zlib
from pathlib import Path

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierstore.errors import CorruptDataError, InvalidInputError, ObjectNotFoundError
from tierstore.storage.objectstore import LocalObjectStore
from tierstore.storage.objectstore._open_files import OpenFiles
from tierstore.tiers.archive import decode_record, decode_vector, encode_batch, frame
from tierstore.tiers.cold import ColdTier, Location


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")


def test_read_ranges_reads_what_get_reads(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    data = bytes(range(256)) * 40
    store.put("a/b", data)
    ranges = [(0, 10), (100, 100), (5000, 5100), (10_000, 10_300), (20_000, 20_010), (7, 9)]
    assert store.read_ranges("a/b", ranges) == [store.get("a/b", s, e) for s, e in ranges]
    assert store.read_ranges("a/b", ranges[:1]) == [data[:10]]  # again, from the open file


def test_put_and_delete_through_the_store_close_the_open_file(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("k", b"old contents")
    assert store.read_ranges("k", [(0, 3)]) == [b"old"]
    store.put("k", b"new contents")  # a rename: the open file would still read the old inode
    assert store.read_ranges("k", [(0, 3)]) == [b"new"]
    assert store.delete("k")
    with pytest.raises(ObjectNotFoundError):
        store.read_ranges("k", [(0, 3)])


def test_missing_objects_and_bad_input(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("k", b"x" * 10)
    with pytest.raises(ObjectNotFoundError):
        store.read_ranges("nope", [(0, 1)])
    for bad in ([(3, 1)], [(-1, 2)], [(0,)], [[0, 1]], [(0, None)], [(0.5, 2)]):
        with pytest.raises(InvalidInputError):
            store.read_ranges("k", bad)  # type: ignore[arg-type]
    for key in ("../x", "", "/abs", 3):
        with pytest.raises(InvalidInputError):
            store.read_ranges(key, [(0, 1)])  # type: ignore[arg-type]
    store.put("dir/inner", b"y")
    with pytest.raises(ObjectNotFoundError):
        store.read_ranges("dir", [(0, 1)])  # a directory is no object
    assert len(store._open) == 0  # bad input opened nothing
    assert store.read_ranges("k", [(8, 20)]) == [b"xx"] and len(store._open) == 1


@needs_proc
def test_open_files_are_bounded_and_closed(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store._open = OpenFiles(3)
    for i in range(10):
        store.put(f"o{i}", bytes([i]) * 8)
    before = _fds()
    for i in range(10):
        assert store.read_ranges(f"o{i}", [(0, 2)]) == [bytes([i]) * 2]
    assert len(store._open) == 3 and _fds() == before + 3
    store.close_open_files()
    assert len(store._open) == 0 and _fds() == before
    assert store.read_ranges("o4", [(2, 4)]) == [b"\x04\x04"]  # still usable


@needs_proc
def test_concurrent_readers_never_read_another_objects_bytes(tmp_path: Path) -> None:
    """Eviction under a reader must not close its descriptor (a reused
    descriptor number would read another file)."""
    store = LocalObjectStore(tmp_path)
    store._open = OpenFiles(2)
    n = 12
    for i in range(n):
        store.put(f"o{i}", bytes([i]) * 4096)
    before = _fds()
    wrong: list[tuple[int, bytes]] = []
    start = threading.Barrier(4)

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        start.wait()
        for _ in range(400):
            i = int(rng.integers(n))
            for got in store.read_ranges(f"o{i}", [(0, 16), (4000, 4096)]):
                if got != bytes([i]) * len(got) or not got:
                    wrong.append((i, got))

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
    assert _fds() <= before + 2


def _record(mid: str, content: str, vec: np.ndarray, **extra: object) -> dict:
    rec = {
        "ns": "alice",
        "id": mid,
        "content": content,
        "embedding": vec.astype("<f4").tobytes(),
        "memory_type": "fact",
        "source": "user",
        "tags": ["t"],
        "created_at": 1.0,
        "last_accessed_at": 1.0,
        "access_count": 0,
        "conf_llm": None,
        "conf_rule": None,
        "conf_feedback": None,
        "confidence": 1.0,
        "t_conf": 1.0,
        "ttl_seconds": None,
        "pinned": False,
        "w_ref": 1.0,
        "t_ref": 1.0,
        "half_life": 10.0,
        "ttl": None,
        "ttl_anchor": 1.0,
        "ctx_mult": 1.0,
        "archived_at": 2.0,
        "metadata": None,
    }
    rec.update(extra)
    return rec


@settings(max_examples=60, deadline=None)
@given(
    mid=st.text(min_size=1, max_size=40),
    content=st.text(max_size=300),
    vec=st.lists(st.floats(-1, 1, width=32), min_size=8, max_size=8),
)
def test_decode_vector_agrees_with_the_full_decode(mid: str, content: str, vec: list[float]) -> None:
    data, entries = encode_batch("k", "alice", 8, 0.0, [_record(mid, content, np.asarray(vec, np.float32))])
    e = entries[0]
    framed = data[e.offset : e.offset + e.length]
    full = decode_record(framed, "here", 8)
    assert decode_vector(framed, "here", 8) == (full["id"], full["embedding"])


def test_decode_vector_refuses_damage() -> None:
    vec = np.arange(8, dtype=np.float32)
    data, entries = encode_batch("k", "alice", 8, 0.0, [_record("m1", "hello", vec)])
    e = entries[0]
    good = data[e.offset : e.offset + e.length]
    flipped = bytearray(good)
    flipped[-3] ^= 0x40
    with pytest.raises(CorruptDataError, match="checksum"):
        decode_vector(bytes(flipped), "here", 8)
    with pytest.raises(CorruptDataError, match="trailing"):
        decode_vector(good + b"x", "here", 8)
    with pytest.raises(CorruptDataError, match="embedding"):
        decode_vector(good, "here", 16)  # the dimension the store expects differs
    no_id = frame(msgpack.packb({"embedding": vec.tobytes()}, use_bin_type=True))
    with pytest.raises(CorruptDataError, match="id or embedding"):
        decode_vector(no_id, "here", 8)
    with pytest.raises(CorruptDataError, match="not a map"):
        decode_vector(frame(msgpack.packb([1, 2], use_bin_type=True)), "here", 8)


def _vectors(cold: ColdTier, locs: list, places: list | None = None) -> list:
    """``ColdTier.vectors_by_object``'s pairs in the order of ``locs`` (the first error raised)."""
    out: list = [None] * len(locs)
    for idxs, found in cold.vectors_by_object(locs, places):
        if isinstance(found, BaseException):
            raise found
        for i, pair in zip(idxs, found):
            out[i] = pair
    return out


def test_cold_tier_vectors_by_object_matches_fetch(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    cold = ColdTier(LocalObjectStore(tmp_path), 8)
    vecs = rng.normal(size=(30, 8)).astype(np.float32)
    recs = [_record(f"m{i}", "x" * int(rng.integers(0, 90_000 if i % 7 == 0 else 50)), v) for i, v in enumerate(vecs)]
    entries, _ = cold.write_records("archive/alice/000000000001-abcd.tsa", "alice", recs, 0.0)
    # out of order, far apart (separate ranges) and near (one range)
    order = [29, 0, 3, 2, 14, 7, 28, 1]
    locs = [Location("archive/alice/000000000001-abcd.tsa", entries[i].offset, entries[i].length) for i in order]
    got = _vectors(cold, locs)
    assert got == [(r["id"], r["embedding"]) for r in cold.fetch(locs)]
    assert [mid for mid, _ in got] == [f"m{i}" for i in order]
    # with the vectors' places: each read alone, its id not read
    places = [(entries[i].vector_at, zlib.crc32(recs[i]["embedding"])) for i in order]
    assert _vectors(cold, locs, places) == [(None, emb) for _, emb in got]
    assert [at for _, at in cold.fetch_placed(locs)] == [p[0] for p in places]


def test_a_store_closes_the_archive_files_its_cold_searches_opened(tmp_path: Path) -> None:
    from tierstore import ManualClock, TierStore

    clock = ManualClock(1_700_000_000.0)
    store = TierStore.open(tmp_path / "s", dim=8, clock=clock)
    rng = np.random.default_rng(5)
    vecs = rng.normal(size=(20, 8)).astype(np.float32)
    store.add_batch(
        "u", [{"content": f"c{i}", "embedding": v, "memory_type": "conversation"} for i, v in enumerate(vecs)]
    )
    clock.advance(2 * 3600)
    assert store.sweep().archived == 20
    objects = store.engine.cold.store
    hits = store.search("u", vecs[3], k=3, include_cold=True, record_access=False)
    assert hits[0].content == "c3" and hits[0].memory.tier == "cold"
    assert len(objects._open) >= 1
    store.close()
    assert len(objects._open) == 0

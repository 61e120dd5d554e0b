"""Damaged bytes on disk or in the bucket: detected by their checksums, named in
the error, contained (the rest of the store keeps serving), and rebuilt from
the catalog where the catalog has what is needed.

* warm shards: SHA-256 of each file in ``manifest.json``; rebuilt from the
  catalog's vectors (``tierstore.core.integrity.repair``);
* hot checkpoints: SHA-256 in ``<ns>.json``; rebuilt automatically at load;
* archive objects: CRC32 per frame; a damaged record cannot be restored (the
  object holds the only copy of the embedding): restore raises CorruptDataError
  naming the key and changes nothing.
"""

from __future__ import annotations

import json
import re
import struct

import msgpack
import numpy as np
import pytest
from helpers import DIM, T0, unit

from tierstore import CorruptDataError, HotSettings, ManualClock, Settings, TierStore
from tierstore.core import integrity
from tierstore.tiers.archive import END, MAGIC, RECORD_FIELDS, decode_batch, decode_record, encode_batch, frame
from tierstore.tiers.warm import WarmSettings

HOUR = 3600.0
DAY = 86400.0


def flip(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def change_digest(manifest_path, digest: str) -> None:
    """Change one hex digit of ``digest`` in a JSON manifest (the JSON stays valid)."""
    data = bytearray(manifest_path.read_bytes())
    pos = data.index(digest.encode())
    data[pos] = ord("0") if data[pos] != ord("0") else ord("1")
    manifest_path.write_bytes(bytes(data))


def snapshot(store: TierStore) -> list:
    cat = store.engine.catalog
    return (
        cat.query("SELECT * FROM memories ORDER BY rid")
        + cat.query("SELECT * FROM archives ORDER BY batch")
        + cat.query("SELECT count(*) FROM events")
        + cat.query("SELECT id, sz FROM memory_text_docsize ORDER BY id")
    )


# -- warm shards ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
@pytest.mark.parametrize("target", ["vectors", "rids.i64", "manifest.json"])
def test_damaged_warm_shard_is_detected_contained_and_rebuilt(tmp_path, rng, kind, target):
    clock = ManualClock(T0)
    settings = Settings(warm=WarmSettings(flat_threshold=4 if kind == "hnsw" else 4096))
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock, settings=settings)
    try:
        vecs = {ns: [unit(rng) for _ in range(10)] for ns in ("w", "other")}
        ids = {
            ns: store.add_batch(
                ns,
                [{"content": f"{ns} fact {i}", "embedding": v, "memory_type": "fact"} for i, v in enumerate(vecs[ns])],
            )
            for ns in vecs
        }
        emb = {(ns, i): store.get(ns, i).embedding.tobytes() for ns in ids for i in ids[ns]}
        clock.advance(20 * DAY)
        assert store.sweep().demoted == 20
        for ns in ids:
            store.add(ns, f"{ns}: a hot one", unit(rng))
        (info,) = store.engine.warm.shards("w")
        assert info.kind == kind
        shard_dir = store.path / "warm" / info.name
        if target == "manifest.json":
            manifest = json.loads((shard_dir / "manifest.json").read_text())
            change_digest(shard_dir / "manifest.json", manifest["sha256"]["rids.i64"])
        else:
            name = target if target != "vectors" else ("index.hnsw" if kind == "hnsw" else "vectors.f32")
            path = shard_dir / name
            flip(path, path.stat().st_size // 2)
        store.engine.warm.forget(info.shard)

        with pytest.raises(CorruptDataError, match=re.escape(str(shard_dir))):
            store.engine.warm.load(info)
        # The rest keeps serving: the namespace's hot tier, the other namespace's warm tier.
        hits = store.search("w", vecs["w"][3], k=5, record_access=False)
        assert hits and all(h.memory.tier == "hot" for h in hits)
        assert any(str(shard_dir) in e for e in store.engine.warm.errors)
        top = store.search("other", vecs["other"][3], k=1, record_access=False)[0]
        assert top.id == ids["other"][3] and top.memory.tier == "warm"
        # reads and promotions come from the catalog, not the shard
        assert store.get("w", ids["w"][4]).embedding.tobytes() == emb[("w", ids["w"][4])]
        store.touch("w", ids["w"][5])
        assert store.get("w", ids["w"][5]).tier == "hot"
        assert store.get("w", ids["w"][5]).embedding.tobytes() == emb[("w", ids["w"][5])]

        report = integrity.verify(store)
        assert [p.kind for p in report.problems] == ["warm"]
        assert str(shard_dir) in report.problems[0].message and report.problems[0].repairable
        fixed = integrity.repair(store)
        assert fixed.ok, fixed.problems
        assert any(info.name in r for r in fixed.repaired)
        hits = store.search("w", vecs["w"][3], k=5, record_access=False)
        assert any(h.id == ids["w"][3] and h.memory.tier == "warm" for h in hits)
        for ns in ids:
            for i in ids[ns]:
                assert store.get(ns, i).embedding.tobytes() == emb[(ns, i)]
    finally:
        store.close()


# -- archive objects ------------------------------------------------------------------------------


def _archived_store(tmp_path, rng):
    clock = ManualClock(T0)
    store = TierStore.open(tmp_path / "s", dim=DIM, clock=clock)
    ids, emb = {}, {}
    for ns in ("c", "d"):
        ids[ns] = store.add_batch(
            ns,
            [
                {"content": f"{ns} chat {i} about Porto", "embedding": unit(rng), "memory_type": "conversation"}
                for i in range(10)
            ],
        )
        for i in ids[ns]:
            emb[(ns, i)] = store.get(ns, i).embedding.tobytes()
    store.add("c", "c: a fact that stays hot", unit(rng), memory_type="fact")
    clock.advance(2 * HOUR)
    assert store.sweep().archived == 20
    return store, ids, emb


@pytest.mark.parametrize("region", ["record", "truncated", "header", "index"])
def test_damaged_archive_object(tmp_path, rng, region):
    store, ids, emb = _archived_store(tmp_path, rng)
    try:
        target = ids["c"][4]
        row = store.engine.catalog.get_row("c", target)
        key = row.cold_key
        obj = store.path / "cold" / key
        data = obj.read_bytes()
        (index_offset,) = struct.unpack_from("<Q", data, len(data) - len(END) - 8)
        if region == "record":
            flip(obj, row.cold_offset + row.cold_length // 2)
        elif region == "truncated":
            obj.write_bytes(data[: row.cold_offset + 4])
        elif region == "header":
            flip(obj, len(MAGIC) + 8 + 3)
        else:
            flip(obj, index_offset + 8 + 3)
        damaged = obj.read_bytes()

        report = integrity.verify(store)
        (problem,) = report.problems
        assert problem.kind == "cold" and problem.where == key and key in problem.message
        assert not problem.repairable
        with pytest.raises(CorruptDataError, match=re.escape(key)):
            store.engine.cold.read_batch(key)

        if region in ("record", "truncated"):
            assert f"c/{target}" in problem.memories
            before = snapshot(store)
            for attempt in ([target], [ids["c"][0], target]):
                with pytest.raises(CorruptDataError, match=re.escape(key)):
                    store.restore("c", ids=attempt)
                assert snapshot(store) == before  # nothing changed
                assert obj.read_bytes() == damaged
                assert target not in store.engine.hot.ensure("c").slot_of
                assert store.get("c", target).tier == "cold"
            intact = [i for i in ids["c"][:4]] if region == "truncated" else [i for i in ids["c"] if i != target]
        else:
            assert problem.memories == ()  # every record still decodes: restores work
            intact = list(ids["c"])
        assert sorted(store.restore("c", ids=intact)) == sorted(intact)
        for i in intact:
            assert store.get("c", i).embedding.tobytes() == emb[("c", i)]
        # the other namespace and the hot tier keep serving
        assert sorted(store.restore("d", ids=ids["d"])) == sorted(ids["d"])
        for i in ids["d"]:
            assert store.get("d", i).embedding.tobytes() == emb[("d", i)]
        assert store.search("c", unit(rng), k=3, record_access=False)
        assert store.sweep().errors == []  # a damaged object is not rewritten, and that is no sweep error
        if region in ("record", "truncated"):
            assert obj.read_bytes() == damaged
            with pytest.raises(CorruptDataError, match=re.escape(key)):
                store.compact_cold()
            assert obj.read_bytes() == damaged
    finally:
        store.close()


def test_a_damaged_archive_object_does_not_hold_up_the_others(tmp_path, rng):
    """A sweep rewrites at most a bounded number of marked objects; one found
    damaged is passed over by later sweeps instead of taking a place in
    every batch (here one place per pass), and compact_cold() still names it."""
    store, ids, emb = _archived_store(tmp_path, rng)
    try:
        keys = {ns: store.engine.catalog.get_row(ns, ids[ns][0]).cold_key for ns in ("c", "d")}
        assert keys["c"] != keys["d"]
        first = min(keys.values())  # the batch order the sweep takes them in
        second = max(keys.values())
        first_ns = next(ns for ns, k in keys.items() if k == first)
        second_ns = next(ns for ns, k in keys.items() if k == second)
        store.delete(first_ns, ids[first_ns][1])  # both objects now hold a deleted memory's record
        store.delete(second_ns, ids[second_ns][1])
        row = store.engine.catalog.get_row(first_ns, ids[first_ns][2])
        obj = store.path / "cold" / first
        flip(obj, row.cold_offset + row.cold_length // 2)
        damaged = obj.read_bytes()
        now = store.clock.now()
        assert store.engine.migrator.compact_archives(now, limit=1) == 0  # took the damaged one, left it
        assert obj.read_bytes() == damaged
        assert store.engine.migrator.compact_archives(now, limit=1) == 1  # then the other one
        assert store.engine.catalog.get_row(second_ns, ids[second_ns][0]).cold_key != second
        assert not (store.path / "cold" / second).exists()
        assert store.engine.migrator.compact_archives(now, limit=1) == 0  # nothing left it would try
        with pytest.raises(CorruptDataError, match=re.escape(first)):
            store.compact_cold()
        for i in ids[second_ns][2:]:
            assert store.get(second_ns, i).tier == "cold"
        assert sorted(store.restore(second_ns, ids=ids[second_ns][2:])) == sorted(ids[second_ns][2:])
        for i in ids[second_ns][2:]:
            assert store.get(second_ns, i).embedding.tobytes() == emb[(second_ns, i)]
    finally:
        store.close()


def _small_archive():
    dim = 4
    records = []
    for i in range(3):
        rec = {name: None for name in RECORD_FIELDS}
        rec.update(
            ns="n",
            id=f"m{i}",
            content=f"content {i}",
            embedding=np.arange(dim, dtype="<f4").tobytes(),
            memory_type="fact",
            source="user_declaration",
            tags=["x"],
            created_at=1.0,
            last_accessed_at=2.0,
            access_count=3,
            conf_llm=0.9,
            conf_rule=None,
            conf_feedback=None,
            confidence=0.9,
            t_conf=1.0,
            ttl_seconds=None,
            pinned=False,
            w_ref=1.0,
            t_ref=1.0,
            half_life=60.0,
            ttl=None,
            ttl_anchor=1.0,
            ctx_mult=1.0,
            archived_at=5.0,
        )
        records.append(rec)
    return dim, records, *encode_batch("archive/n/000000000001-00000000.tsa", "n", dim, 5.0, records)


def test_every_single_byte_flip_of_an_archive_is_detected():
    dim, records, data, entries = _small_archive()
    header, got = decode_batch(data, "obj")
    assert [r for _, r in got] == records
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptDataError, match="obj"):
            decode_batch(bytes(bad), "obj")
    for e in entries:
        frame = data[e.offset : e.offset + e.length]
        assert decode_record(frame, "rec", dim)["id"] == e.id
        for pos in range(len(frame)):
            bad = bytearray(frame)
            bad[pos] ^= 0x80
            with pytest.raises(CorruptDataError, match="rec"):
                decode_record(bytes(bad), "rec", dim)


def _hostile_payloads():
    _, records, _, _ = _small_archive()
    good = records[0]
    yield "ext type", msgpack.packb({**good, "embedding": msgpack.ExtType(5, b"x" * 16)})
    yield "timestamp", msgpack.packb({**good, "created_at": msgpack.Timestamp(1, 0)})
    yield "a list", msgpack.packb([good])
    yield "int keys", msgpack.packb({1: 2, **good})
    yield "str embedding", msgpack.packb({**good, "embedding": "abcdabcdabcdabcd"}, use_bin_type=True)
    yield "bool count", msgpack.packb({**good, "access_count": True}, use_bin_type=True)
    yield "short embedding", msgpack.packb({**good, "embedding": b"abc"}, use_bin_type=True)
    yield "missing field", msgpack.packb({k: v for k, v in good.items() if k != "id"}, use_bin_type=True)
    yield "non-str tag", msgpack.packb({**good, "tags": [1]}, use_bin_type=True)
    yield "deep nesting", b"\x91" * 100_000 + b"\xc0"
    yield "huge declared map", b"\xdf\xff\xff\xff\xff"
    yield "trailing bytes", msgpack.packb(good, use_bin_type=True) + b"\x00"


@pytest.mark.parametrize("name,payload", list(_hostile_payloads()), ids=[n for n, _ in _hostile_payloads()])
def test_hostile_record_with_a_valid_checksum_is_rejected(name, payload):
    with pytest.raises(CorruptDataError, match="record at"):
        decode_record(frame(payload), "record at byte 0", 4)


# -- hot checkpoints ----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".hnsw", ".slots", ".json"])
def test_damaged_hot_checkpoint_is_rebuilt_at_load(tmp_path, rng, suffix):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    settings = Settings(hot=HotSettings(exact_threshold=32))
    vecs = {ns: rng.normal(size=(80, DIM)).astype(np.float32) for ns in ("big", "other")}
    with TierStore.open(path, dim=DIM, clock=clock, settings=settings) as store:
        for ns, vs in vecs.items():
            store.add_batch(ns, [{"content": f"{ns} {i}", "embedding": v, "id": f"m{i}"} for i, v in enumerate(vs)])
    files = {p.name for p in (path / "hot").iterdir()}
    assert {"big.hnsw", "big.slots", "big.json", "other.json"} <= files
    target = path / "hot" / f"big{suffix}"
    if suffix == ".json":
        change_digest(target, json.loads(target.read_text())["index_sha256"])
    else:
        flip(target, target.stat().st_size // 2)

    with TierStore.open(path, dim=DIM, clock=clock, settings=settings) as store:
        report = integrity.verify(store)
        assert [(p.kind, p.where) for p in report.problems] == [("hot", "big")]
        assert "big." in report.problems[0].message
        other = store.engine.hot.ensure("other")  # an intact checkpoint loads without complaint
        assert store.engine.hot.checkpoint_errors == [] and other.index is not None
        big = store.engine.hot.ensure("big")
        (err,) = store.engine.hot.checkpoint_errors
        assert str(path / "hot" / "big.") in err
        assert big.live == 80 and big.index is not None
        for ns, vs in vecs.items():
            for i in (0, 17, 79):
                assert store.search(ns, vs[i], k=1, record_access=False)[0].id == f"m{i}"
    # closed cleanly: the rebuilt namespace was checkpointed again, soundly
    with TierStore.open(path, dim=DIM, clock=clock, settings=settings) as store:
        assert integrity.verify(store).ok
        store.engine.hot.ensure("big")
        assert store.engine.hot.checkpoint_errors == []
        assert store.search("big", vecs["big"][5], k=1, record_access=False)[0].id == "m5"


def test_repair_rewrites_a_damaged_checkpoint_and_verify_is_clean(tmp_path, rng):
    clock = ManualClock(T0)
    path = tmp_path / "s"
    settings = Settings(hot=HotSettings(exact_threshold=32))
    with TierStore.open(path, dim=DIM, clock=clock, settings=settings) as store:
        store.add_batch("big", [{"content": str(i), "embedding": unit(rng)} for i in range(60)])
        assert integrity.verify(store).ok
    flip(path / "hot" / "big.slots", 3)
    with TierStore.open(path, dim=DIM, clock=clock, settings=settings) as store:
        assert not integrity.verify(store).ok
        fixed = integrity.repair(store)
        assert fixed.ok and fixed.repaired == ["rewrote the hot checkpoint of namespace 'big'"]
        assert integrity.verify(store).ok


# -- backup and restore (docs/operations.md) ------------------------------------------------------------


def test_backup_and_restore_of_a_store(tmp_path, rng):
    """Online backup of the catalog (sqlite3 backup API, store open), then the
    cold objects; restored into a new directory without the caches (warm
    shards, hot checkpoints): everything is back, bit-identical."""
    import shutil
    import sqlite3

    clock = ManualClock(T0)
    settings = Settings(hot=HotSettings(exact_threshold=16))
    path = tmp_path / "live"
    store = TierStore.open(path, dim=DIM, clock=clock, settings=settings)
    try:
        ids = store.add_batch(
            "a", [{"content": f"chat {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(10)]
        )
        ids += store.add_batch(
            "a", [{"content": f"fact {i}", "embedding": unit(rng), "memory_type": "fact"} for i in range(10)]
        )
        clock.advance(2 * HOUR)
        store.sweep()  # the chats: cold
        clock.advance(18 * DAY)
        store.sweep()  # the facts: warm
        ids += store.add_batch(
            "b", [{"content": f"fact b{i}", "embedding": unit(rng), "memory_type": "fact"} for i in range(40)]
        )  # hot, with an hnswlib index
        store.touch("b", ids[20:25])
        store.checkpoint()
        before = {(m.namespace, m.id): m for m in (store.get(ns, i) for ns in ("a", "b") for i in ids) if m is not None}
        tiers = sorted(m.tier for m in before.values())
        assert {"hot", "warm", "cold"} <= set(tiers)
        store.stop_migrator()  # the backup window: nothing collects archive objects
        store.flush()
        backup = tmp_path / "backup"
        backup.mkdir()
        src = sqlite3.connect(path / "catalog.sqlite")
        dst = sqlite3.connect(backup / "catalog.sqlite")
        with dst:
            src.backup(dst)
        src.close()
        dst.close()
        shutil.copytree(path / "cold", backup / "cold")
    finally:
        store.close()
    restored = tmp_path / "restored"
    shutil.copytree(backup, restored)
    assert not (restored / "warm").exists() and not (restored / "hot").exists()
    with TierStore.open(restored, clock=clock, settings=settings) as again:
        report = integrity.verify(again)
        assert {p.kind for p in report.problems} == {"warm"}  # the shards were not backed up: caches
        fixed = integrity.repair(again)
        assert fixed.ok, fixed.problems
        for (ns, mid), m in before.items():
            got = again.get(ns, mid)
            assert got.tier == m.tier and got.content == m.content and got.access_count == m.access_count
            if m.embedding is not None:
                assert got.embedding.tobytes() == m.embedding.tobytes()
        cold = [mid for (ns, mid), m in before.items() if m.tier == "cold"]
        assert sorted(again.restore("a", ids=cold)) == sorted(cold)
        warm = [(ns, mid) for (ns, mid), m in before.items() if m.tier == "warm"]
        ns, mid = warm[0]
        v = again.get(ns, mid).embedding
        assert any(h.id == mid and h.memory.tier == "warm" for h in again.search(ns, v, k=10, record_access=False))


@pytest.mark.slow
def test_cli_verify_reports_and_repairs_a_damaged_shard(tmp_path):
    import subprocess
    import sys
    import time

    from tierstore import ManualClock, TierStore

    rng = np.random.default_rng(3)
    path = tmp_path / "s"
    clock = ManualClock(time.time() - 40 * 86400)
    with TierStore.open(path, dim=8, clock=clock) as store:
        store.add_batch(
            "v", [{"content": f"f{i}", "embedding": rng.normal(size=8), "memory_type": "fact"} for i in range(6)]
        )
        clock.advance(20 * 86400)
        assert store.sweep().demoted == 6
        (info,) = store.engine.warm.shards("v")
    vec = path / "warm" / info.name / "vectors.f32"
    data = bytearray(vec.read_bytes())
    data[3] ^= 1
    vec.write_bytes(bytes(data))

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "tierstore.tools.cli", "verify", str(path), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = cli()
    assert bad.returncode == 1 and "vectors.f32" in bad.stdout
    fixed = cli("--repair")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert cli().returncode == 0

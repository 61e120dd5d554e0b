"""One store per object-store prefix (issue 13, item 6), and what open()
leaves behind when it fails (issue 14): nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tierstore.storage.ownership as ownership
from tierstore import ManualClock, StoreConfigError, TierStore

DIM = 8
T0 = 1_700_000_000.0
HOUR = 3600.0


def _archive_some(store, clock, rng, n=4):
    ids = store.add_batch(
        "c",
        [{"content": f"chat {i}", "embedding": rng.normal(size=DIM), "memory_type": "conversation"} for i in range(n)],
    )
    clock.advance(2 * HOUR)
    assert store.sweep().archived == n
    return ids


def _second_store_is_refused_then_handed_over(tmp_path, cold, cold_options, list_keys, monkeypatch):
    rng = np.random.default_rng(0)
    clock = ManualClock(T0)
    first = TierStore.open(tmp_path / "a", dim=DIM, clock=clock, cold=cold, cold_options=cold_options)
    try:
        ids = _archive_some(first, clock, rng)
        with pytest.raises(StoreConfigError, match=f"belongs to store {first.store_id}") as err:
            TierStore.open(tmp_path / "b", dim=DIM, clock=clock, cold=cold, cold_options=cold_options)
        assert "take_over_cold=True" in str(err.value) and str((tmp_path / "a").resolve()) in str(err.value)
        assert not (tmp_path / "b").exists()  # the refused store left nothing behind
        objects_before = list_keys()
        # the scratch-store accident of the issue: rebuilt on the bucket, it restores and would delete
        monkeypatch.setattr(ownership, "RECHECK_S", 0.0)
        with TierStore.open(
            tmp_path / "b", dim=DIM, clock=clock, cold=cold, cold_options=cold_options, take_over_cold=True
        ) as second:
            assert second.store_id != first.store_id
            assert second.rebuild_catalog()["inserted"] == len(ids)
        # the first store lost the prefix: it stops deleting there, and says so
        assert sorted(first.restore("c", ids=ids)) == sorted(ids)  # would empty (and delete) the object
        assert list_keys() == objects_before
        report = first.sweep()
        assert any("handed over" in e for e in report.errors)
    finally:
        first.close()


def test_a_local_prefix_belongs_to_one_store(tmp_path, monkeypatch):
    shared = tmp_path / "bucket"

    def keys():
        return sorted(str(p.relative_to(shared)) for p in shared.rglob("*") if p.is_file())

    _second_store_is_refused_then_handed_over(tmp_path, shared, None, keys, monkeypatch)


@pytest.mark.slow
def test_an_s3_prefix_belongs_to_one_store(tmp_path, monkeypatch, moto_server, s3_bucket):
    def keys():
        resp = moto_server.client().list_objects_v2(Bucket=s3_bucket, Prefix="shared/")
        return sorted(o["Key"] for o in resp.get("Contents", ()))

    _second_store_is_refused_then_handed_over(
        tmp_path, f"s3://{s3_bucket}/shared", {"endpoint_url": moto_server.endpoint_url}, keys, monkeypatch
    )
    owner = ownership.Owner.parse(
        moto_server.client().get_object(Bucket=s3_bucket, Key="shared/owner.json")["Body"].read()
    )
    assert owner is not None and owner.path == str((tmp_path / "b").resolve())


def test_the_owner_is_claimed_with_a_conditional_put_and_kept_across_reopens(tmp_path):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        sid = store.store_id
        owner = ownership.read_owner(store.engine.cold.store)
        assert isinstance(owner, ownership.Owner) and owner.store_id == sid
    with TierStore.open(tmp_path / "s", clock=clock) as store:
        assert store.store_id == sid
    # a store from before the claim (no id, no owner object) claims its prefix when opened
    import sqlite3

    with sqlite3.connect(tmp_path / "s" / "catalog.sqlite") as conn:
        conn.execute("DELETE FROM meta WHERE key = 'store_id'")
    (tmp_path / "s" / "cold" / "owner.json").unlink()
    with TierStore.open(tmp_path / "s", clock=clock) as store:
        assert store.store_id and store.store_id != sid
        assert ownership.read_owner(store.engine.cold.store).store_id == store.store_id


def test_a_damaged_owner_object_is_refused_until_taken_over(tmp_path):
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "s", dim=DIM, clock=clock) as store:
        store.engine.cold.store.put("owner.json", b"{not json")
    with pytest.raises(StoreConfigError, match="does not parse"):
        TierStore.open(tmp_path / "s", clock=clock)
    with TierStore.open(tmp_path / "s", clock=clock, take_over_cold=True) as store:
        assert ownership.read_owner(store.engine.cold.store).store_id == store.store_id


def test_a_claim_that_races_an_owner_come_and_gone_claims_the_prefix(tmp_path):
    # Another store claims the prefix between this store's read (no owner) and its conditional put, and its
    # owner object is gone again by the next read: claim() used to take that None for an owner and fail
    # with AttributeError; it claims the now-free prefix.
    from tierstore.storage.objectstore import LocalObjectStore

    class Raced(LocalObjectStore):
        raced = False

        def put_if_absent(self, key, data):
            if key == ownership.OWNER_KEY and not self.raced:
                self.raced = True
                other = ownership.Owner("other-store", "/elsewhere", "host", T0).to_bytes()
                assert super().put_if_absent(key, other)  # the other store wins the race...
                put = super().put_if_absent(key, data)
                self.delete(key)  # ...and gives the prefix up
                return put
            return super().put_if_absent(key, data)

    objects = Raced(tmp_path / "cold")
    ownership.claim(objects, "this-store", tmp_path)
    assert objects.raced
    owner = ownership.read_owner(objects)
    assert isinstance(owner, ownership.Owner) and owner.store_id == "this-store"


def test_a_missing_bucket_is_an_error_at_open_and_nothing_is_left(tmp_path, moto_server):
    with pytest.raises(StoreConfigError, match="cannot reach the object store"):
        TierStore.open(
            tmp_path / "s",
            dim=DIM,
            cold="s3://no-such-bucket-tierstore/p",
            cold_options={"endpoint_url": moto_server.endpoint_url},
        )
    assert not (tmp_path / "s").exists()


def test_opening_a_store_that_does_not_exist_creates_nothing(tmp_path):
    with pytest.raises(StoreConfigError, match="there is no tierstore store at"):
        TierStore.open(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreConfigError, match="there is no tierstore store at"):
        TierStore.open(tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []


def test_the_lock_error_names_the_holder(tmp_path):
    path = tmp_path / "s"
    with TierStore.open(path, dim=DIM, clock=ManualClock(T0)):
        with pytest.raises(StoreConfigError, match="already open in this process"):
            TierStore.open(path, clock=ManualClock(T0))
        code = textwrap.dedent(f"""
            from tierstore import TierStore, StoreConfigError
            try:
                TierStore.open({str(path)!r})
            except StoreConfigError as exc:
                print(exc)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
        import os

        assert f"open in process {os.getpid()}" in out


@pytest.mark.slow
def test_cli_rebuild_catalog_takes_a_prefix_over(tmp_path):
    rng = np.random.default_rng(1)
    clock = ManualClock(T0)
    with TierStore.open(tmp_path / "old", dim=DIM, clock=clock) as store:
        ids = _archive_some(store, clock, rng)
    cold = str(tmp_path / "old" / "cold")
    cmd = [
        sys.executable,
        "-m",
        "tierstore.tools.cli",
        "rebuild-catalog",
        str(tmp_path / "new"),
        "--dim",
        str(DIM),
        "--cold",
        cold,
        "--now",
        str(T0 + 3 * HOUR),
    ]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--take-over-cold" in refused.stderr
    assert not (tmp_path / "new").exists()
    done = subprocess.run([*cmd, "--take-over-cold"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"inserted": 4' in done.stdout
    with TierStore.open(tmp_path / "new", clock=ManualClock(T0 + 3 * HOUR)) as fresh:
        assert sorted(fresh.restore("c", ids=ids)) == sorted(ids)

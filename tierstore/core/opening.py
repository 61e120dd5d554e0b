"""Opening a store: for writing (the LOCK, the catalog and its checks, the
cold object store reached and claimed, undoing a failed create) or read-only
beside a writer, the facade's constructor called to build it, and the
catalog upkeep run at open (a changed policy reapplied, supersession marks
and due times repaired)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import sqlite3
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from tierstore.clock import Clock, SystemClock
from tierstore.core.compile_kernels import warm_up_kernels
from tierstore.core.engine import Engine, Settings
from tierstore.core.store_clock import ClockRecord, check_clock
from tierstore.embedding import Embedder, check_against_record
from tierstore.embedding import resolve as resolve_embedder
from tierstore.errors import InvalidInputError, ObjectStoreError, PolicyError, StoreConfigError
from tierstore.kernels import decayed_weight, due_times
from tierstore.policy import Policy
from tierstore.records import TIER_NAMES
from tierstore.rules import supersession
from tierstore.rules.validation import check_positive_int
from tierstore.storage import ownership
from tierstore.storage.catalog import EVENT_SQL, MEMORY_COLUMNS, Catalog, MemoryRow
from tierstore.storage.catalog import sql_time as _sql_time
from tierstore.storage.objectstore import (
    LocalObjectStore,
    ObjectStore,
    open_object_store,
    url_without_userinfo,
)
from tierstore.tiers.migrator import Migrator

T = TypeVar("T")  # the store the facade's constructor makes


class Facade(Protocol):
    """What :func:`open_store` needs of the store it makes: its engine."""

    engine: Engine


S = TypeVar("S", bound=Facade)


def reapply_policy(eng: Engine, chunk: int = 100_000) -> None:
    """Recompute every memory's half-life, TTL and due time under the
    current policy (after it changed), in chunks, with the kernels.
    Weights are rebased at now so the past is unchanged."""
    cp = eng.compiled_policy
    now = eng.store_time.now()
    last = 0
    while True:
        rows = eng.catalog.query(
            "SELECT rid, memory_type, confidence, ttl_seconds, ctx_mult, w_ref, t_ref, half_life, tier, pinned,"
            " ttl_anchor, t_conf FROM memories WHERE rid > ? ORDER BY rid LIMIT ?",
            (last, chunk),
        )
        if not rows:
            return
        last = rows[-1][0]
        cols = list(zip(*rows))
        rid = np.array(cols[0], np.int64)
        t_idx = np.array([eng.type_idx[t] for t in cols[1]], np.int64)
        conf = np.array(cols[2], np.float64)
        override = np.array([math.nan if x is None else x for x in cols[3]], np.float64)
        ctx_mult = np.array(cols[4], np.float64)
        w = decayed_weight(
            np.array(cols[5], np.float64), np.array(cols[6], np.float64), np.array(cols[7], np.float64), now
        )
        h = cp.half_lives(t_idx, conf, ctx_mult)
        ttl = cp.ttls(t_idx, conf, override, ctx_mult)
        t_ref = np.full(len(rows), now)
        due = due_times(
            np.array(cols[8], np.int64),
            np.array(cols[9], np.int64),
            cp.deletes_by_type[t_idx],
            w,
            t_ref,
            h,
            np.array(cols[10], np.float64) + ttl,
            conf,
            np.array(cols[11], np.float64),
            cp.conf_half_life,
            cp.thresholds,
        )
        updates = [
            (wi, now, hi, _sql_time(ti), _sql_time(di), ri)
            for wi, hi, ti, di, ri in zip(w.tolist(), h.tolist(), ttl.tolist(), due.tolist(), rid.tolist())
        ]
        eng.catalog.executemany(
            "UPDATE memories SET w_ref = ?, t_ref = ?, half_life = ?, ttl = ?, due_at = ? WHERE rid = ?", updates
        )


def repair_supersessions(eng: Engine) -> None:
    """At open: drop the marks of memories that are gone, and finish the
    damping of marked memories a crash left without it (the add had
    committed, its ``_supersede`` had not run): their TTL becomes 0 from
    the mark's time, as it would have (the negative feedback is not
    repeated)."""

    def fix(conn: sqlite3.Connection) -> None:
        supersession.prune_orphans(conn)
        for rid, marked_at in supersession.undamped(conn):
            r = conn.execute("SELECT " + ", ".join(MEMORY_COLUMNS) + " FROM memories WHERE rid = ?", (rid,)).fetchone()
            row = MemoryRow.from_sql(r)
            row.ttl_seconds, row.ttl = 0.0, 0.0
            row.ttl_anchor = min(row.ttl_anchor, marked_at)
            row.due_at = eng.due_of(row)
            eng.catalog.write_state(conn, row)
            tier = TIER_NAMES[row.tier]
            conn.execute(
                EVENT_SQL,
                (
                    eng.store_time.now(),
                    row.ns,
                    row.id,
                    "supersede",
                    tier,
                    tier,
                    "damping finished at open",
                    row.w_ref,
                    row.confidence,
                    row.access_count,
                    row.memory_type,
                ),
            )

    eng.catalog.write(fix)


def repair_never_due(eng: Engine) -> None:
    """Give a due time to memories stored as never due that are not pinned.
    Versions before due times version 2 stored a memory whose weight or
    confidence was already past a threshold when its state was set (e.g.
    after negative feedback) as never due, so no sweep looked at it
    again. Runs once per store (one scan of the catalog)."""
    rows = eng.catalog.select_rows("WHERE m.due_at IS NULL AND m.pinned = 0")
    updates = [(due, r.rid) for r in rows if math.isfinite(due := eng.due_of(r))]
    if updates:
        eng.catalog.write(lambda conn: conn.executemany("UPDATE memories SET due_at = ? WHERE rid = ?", updates))


# Version 2: a threshold already crossed when a memory's state was set makes it
# due at that time (version 1 stored such memories as never due).
DUE_TIMES_VERSION = "2"


def lock(root: Path) -> int:
    """Take the store's LOCK (an flock, released by the kernel if the process
    dies) and write our pid in it; the error names the holder."""
    lock_fd = os.open(root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(lock_fd, 32, 0).decode("ascii", "replace").strip()
        os.close(lock_fd)
        raise _held(root, holder) from None
    os.ftruncate(lock_fd, 0)
    os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
    return lock_fd


def check_unlocked(root: Path) -> None:
    """Raise what :func:`lock` would if another writer holds the store, without
    taking the lock or creating anything: for an open with slow work to do
    before it locks (loading an embedding model), so that a second server
    learns at once that the store is taken. (The lock itself is still taken
    after; a writer that starts in between is found then.)"""
    try:
        fd = os.open(root / "LOCK", os.O_RDWR)
    except OSError:  # no LOCK: nobody has it (a missing or odd path is the open's to report)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _held(root, os.pread(fd, 32, 0).decode("ascii", "replace").strip()) from None
    finally:
        os.close(fd)  # closing releases the probe's own lock


def _held(root: Path, holder: str) -> StoreConfigError:
    """The error for a store whose LOCK ``holder`` (the pid written in it) holds."""
    if holder == str(os.getpid()):
        return StoreConfigError(
            f"the store at {root} is already open in this process: use that TierStore, or close it first"
        )
    who = f"process {holder}" if holder.isdigit() else "another process"
    return StoreConfigError(
        f"the store at {root} is open in {who}; one writer at a time (readers beside it: "
        "TierStore.open(path, readonly=True); tierstore stats, verify and report)"
    )


def remove_new_store(root: Path, made_dir: bool) -> None:
    """Undo what a failed open of a new store created: its catalog, LOCK and
    tier directories, and the directory itself if the open made it."""
    for name in ("catalog.sqlite", "catalog.sqlite-wal", "catalog.sqlite-shm", "LOCK"):
        (root / name).unlink(missing_ok=True)
    for sub in ("hot", "warm", "cold"):
        d = root / sub
        if d.is_dir() and not any(p.is_file() and p.name != ownership.OWNER_KEY for p in d.rglob("*")):
            shutil.rmtree(d, ignore_errors=True)
    if made_dir:
        try:
            root.rmdir()
        except OSError:
            pass  # something else was put there meanwhile: leave it


def open_cold(
    root: Path, cold: Any, options: Mapping[str, Any] | None, stored: str | None, create: bool = True
) -> tuple[ObjectStore, str | None]:
    """The cold object store, and what the catalog should remember of it
    (JSON: URL, endpoint and region; never credentials)."""
    opts = dict(options or {})
    remembered = {k: opts[k] for k in ("endpoint_url", "region_name") if opts.get(k)}
    if isinstance(remembered.get("endpoint_url"), str):  # never a password from the URL's user info
        remembered["endpoint_url"] = url_without_userinfo(remembered["endpoint_url"])
    if cold is None:
        meta = json.loads(stored) if stored else {"url": "default"}
        url = meta.get("url")
        if url is None:
            raise StoreConfigError(
                f"the store at {root} archives to an object store that was given as an object ({meta.get('repr')}); "
                "pass cold= again"
            )
        if url == "default":
            if not create:  # a reader: a store that never archived has no directory, and gets none
                return LocalObjectStore(root / "cold", create=False), None
            return open_object_store(root / "cold"), None if stored else json.dumps(meta)
        for k in ("endpoint_url", "region_name"):
            if meta.get(k) and k not in opts:
                opts[k] = meta[k]
        return open_object_store(url, **opts), None
    if isinstance(cold, (str, os.PathLike)):
        target = os.fspath(cold)
        if "://" not in target:
            target = Path(target).resolve().as_uri()
        store = open_object_store(target, **opts)
        return store, json.dumps({"url": target, **remembered})
    return open_object_store(cold), json.dumps({"url": None, "repr": type(cold).__name__})


def same_policy(stored: str, policy: Policy) -> bool:
    """Whether the stored policy (JSON) is ``policy``: compared as policies,
    not as text, so a policy stored before a key existed (read with that
    key's default) is the same policy and nothing is recomputed. A stored
    policy this version cannot read is not the same."""
    try:
        return Policy.from_stored_json(stored) == policy
    except (PolicyError, ValueError):
        return False


def open_writable(
    make: Callable[[Engine], T],
    root: Path,
    *,
    dim: int | None,
    policy: Policy | None,
    cold: Any,
    cold_options: Mapping[str, Any] | None,
    clock: Clock | None,
    settings: Settings,
    allow_clock_jump: bool,
    take_over_cold: bool,
    embedder: Embedder | None,
) -> tuple[T, bool]:
    """Open (or create) the store at ``root`` for writing: the lock, the
    catalog, the checks against what it recorded (dim, embedder, policy
    types), the object store reached and claimed, the meta written; then
    ``make(engine)`` (the facade's constructor) builds the store. Returns it and
    whether the policy changed. A failure closes what was opened, and a
    store this call was creating leaves nothing behind."""
    made_dir = not root.exists()
    fresh = not (root / "catalog.sqlite").exists()
    if fresh and dim is None:
        raise StoreConfigError(f"there is no tierstore store at {root} (to create one, give dim=)")
    root.mkdir(parents=True, exist_ok=True)
    lock_fd = lock(root)
    catalog: Catalog | None = None
    try:
        catalog = Catalog(root / "catalog.sqlite", synchronous=settings.synchronous)
        stored_dim = catalog.get_meta("dim")
        if dim is None:
            if stored_dim is None:
                raise StoreConfigError(f"there is no tierstore store at {root} (to create one, give dim=)")
            dim = int(stored_dim)
        dim = check_positive_int(dim, "dim")
        if stored_dim is not None and int(stored_dim) != dim:
            raise StoreConfigError(f"the store at {root} has dimension {stored_dim}, opened with dim={dim}")
        if embedder is not None:
            check_against_record(embedder, catalog.get_meta("embedder"), str(root))
        stored_policy = catalog.get_meta("policy")
        effective = policy or (Policy.from_stored_json(stored_policy) if stored_policy else Policy.default())
        types_in_use = {r[0] for r in catalog.query("SELECT DISTINCT memory_type FROM memories")}
        missing = sorted(types_in_use - set(effective.type_names))
        if missing:
            raise StoreConfigError(f"the policy does not define memory types used in the store: {', '.join(missing)}")
        changed = policy is not None and stored_policy is not None and not same_policy(stored_policy, policy)
        cold_store, cold_meta = open_cold(root, cold, cold_options, catalog.get_meta("cold"))
        store_id = catalog.get_meta("store_id")
        if store_id is None:
            # A new store's id is durable before the object store's prefix is claimed in its name: an OS
            # crash between the two would otherwise leave a catalog that, reopened, makes up another id
            # and is refused its own prefix.
            store_id = uuid.uuid4().hex
            catalog.set_meta({"store_id": store_id})
            catalog.sync()
        # The object store is reached before anything else is written: a wrong bucket,
        # missing credentials or another store's prefix is an error now, not later.
        try:
            ownership.claim(cold_store, store_id, root, take_over=take_over_cold)
        except ObjectStoreError as exc:
            raise StoreConfigError(f"cannot reach the object store for archives, {cold_store!r}: {exc}") from exc
        meta = {"dim": str(dim), "policy": effective.to_json(), "schema_version": "1", "store_id": store_id}
        if cold_meta is not None:
            meta["cold"] = cold_meta
        if embedder is not None:
            meta["embedder"] = embedder.record()
        catalog.set_meta(meta)
        warm_up_kernels()
        clock = clock or SystemClock()
        check = check_clock(clock, ClockRecord.from_json(catalog.get_meta("clock")))
        store = make(
            Engine(
                path=root,
                dim=dim,
                policy=effective,
                clock=clock,
                settings=settings,
                catalog=catalog,
                lock_fd=lock_fd,
                cold=cold_store,
                clock_check=check,
                allow_clock_jump=allow_clock_jump,
                store_id=store_id,
                embedder=embedder,
                migrator=Migrator,
            )
        )
    except BaseException:
        if catalog is not None:
            catalog.close()
        os.close(lock_fd)
        if fresh:  # a store this call was creating: leave nothing behind
            remove_new_store(root, made_dir)
        raise
    return store, changed


def finish_open(eng: Engine, *, policy_changed: bool) -> None:
    """What an open does once the store exists: the clock recorded, the
    supersessions a crash left half done finished, a changed policy applied
    to every memory, old due times repaired, the hot tier preloaded."""
    catalog = eng.catalog
    eng.save_clock()
    # what a search that must not wait asks first: whether a namespace has
    # warm shards or archived memories, known from now on without a read
    eng.warm.refresh()
    eng.cold_index.prime()
    repair_supersessions(eng)
    if policy_changed:
        reapply_policy(eng)
    if catalog.get_meta("due_times") != DUE_TIMES_VERSION:
        repair_never_due(eng)
        catalog.set_meta({"due_times": DUE_TIMES_VERSION})
    if eng.settings.preload_hot:
        for ns in catalog.namespaces():
            eng.hot.ensure(ns)


def open_readonly(
    make: Callable[[Engine], T],
    root: Path,
    *,
    dim: int | None,
    policy: Policy | None,
    cold: Any,
    cold_options: Mapping[str, Any] | None,
    clock: Clock | None,
    settings: Settings | None,
    embedder: Embedder | None,
) -> T:
    """A reader beside the store's writer: no lock, no writes, nothing created."""
    if not (root / "catalog.sqlite").is_file():
        raise StoreConfigError(f"there is no tierstore store at {root}")
    catalog = Catalog(root / "catalog.sqlite", readonly=True)
    try:
        stored_dim = catalog.get_meta("dim")
        stored_policy = catalog.get_meta("policy")
        if stored_dim is None or stored_policy is None:
            raise StoreConfigError(f"the store at {root} was never completely created")
        missing = catalog.missing_schema()
        if missing:  # a reader cannot add them, and its searches and reads would fail on them
            raise StoreConfigError(
                f"the store at {root} was written by an earlier tierstore version (its catalog lacks "
                f"{', '.join(missing)}); open it once for writing to upgrade it (TierStore.open(path), or "
                f"`tierstore sweep --dry-run {root}`, which changes nothing else), then read it"
            )
        if dim is not None and check_positive_int(dim, "dim") != int(stored_dim):
            raise StoreConfigError(f"the store at {root} has dimension {stored_dim}, opened with dim={dim}")
        if embedder is not None:
            if embedder.dim != int(stored_dim):
                raise StoreConfigError(
                    f"the store at {root} has dimension {stored_dim}; the embedder "
                    f"{embedder.name!r} makes vectors of dimension {embedder.dim}"
                )
            check_against_record(embedder, catalog.get_meta("embedder"), str(root))
        effective = Policy.from_stored_json(stored_policy)
        if policy is not None and policy != effective:
            raise StoreConfigError(
                "a read-only open cannot apply a different policy (it would recompute "
                "every memory's lifetime); open it for writing, or without policy="
            )
        cold_store, _ = open_cold(root, cold, cold_options, catalog.get_meta("cold"), create=False)
        warm_up_kernels()
        clock = clock or SystemClock()
        check = check_clock(clock, ClockRecord.from_json(catalog.get_meta("clock")))
        return make(
            Engine(
                path=root,
                dim=int(stored_dim),
                policy=effective,
                clock=clock,
                settings=settings or Settings(),
                catalog=catalog,
                lock_fd=-1,
                cold=cold_store,
                clock_check=check,
                store_id=catalog.get_meta("store_id") or "",
                readonly=True,
                embedder=embedder,
                migrator=Migrator,
            )
        )
    except BaseException:
        catalog.close()
        raise


def open_store(
    make: Callable[[Engine], S],
    path: Path,
    *,
    dim: int | None,
    policy: Policy | None,
    cold: Any,
    cold_options: Mapping[str, Any] | None,
    clock: Clock | None,
    settings: Settings | None,
    allow_clock_jump: bool,
    take_over_cold: bool,
    readonly: bool,
    embedder: Any,
) -> S:
    """:meth:`TierStore.open`: settings checked and the embedder resolved
    before anything on disk, then a reader or the writer opened."""
    if settings is not None:  # before anything on disk: bad settings leave no trace
        if not isinstance(settings, Settings):
            raise InvalidInputError(f"settings must be a Settings, got {type(settings).__name__}")
        settings.validate()  # again: a frozen dataclass can still be changed with object.__setattr__
    if isinstance(embedder, str) and not readonly:
        check_unlocked(path)  # before loading a model (seconds): is the store free at all?
    emb = resolve_embedder(embedder)
    if emb is not None:
        if dim is None:
            dim = emb.dim
        elif check_positive_int(dim, "dim") != emb.dim:
            raise StoreConfigError(f"dim={dim} but the embedder {emb.name!r} makes vectors of dimension {emb.dim}")
    if readonly:
        return open_readonly(
            make,
            path,
            dim=dim,
            policy=policy,
            cold=cold,
            cold_options=cold_options,
            clock=clock,
            settings=settings,
            embedder=emb,
        )
    store, policy_changed = open_writable(
        make,
        path,
        dim=dim,
        policy=policy,
        cold=cold,
        cold_options=cold_options,
        clock=clock,
        settings=settings or Settings(),
        allow_clock_jump=allow_clock_jump,
        take_over_cold=take_over_cold,
        embedder=emb,
    )
    finish_open(store.engine, policy_changed=policy_changed)
    return store

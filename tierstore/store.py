"""TierStore: the public API (DESIGN §1)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
import sqlite3
import threading
import uuid
from dataclasses import dataclass, field, replace
from itertools import repeat
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import auto_supersession, dedupe, lifetime, ownership, supersession, tombstones
from . import embedding as _embedding
from .catalog import (
    ACCESS_LOG_SQL,
    EVENT_SQL,
    INSERT_SQL,
    MEMORY_COLUMNS,
    UPDATE_STATE_SQL,
    Catalog,
    MemoryRow,
    insert_params,
)
from .catalog import sql_time as _sql_time
from .clock import Clock, SystemClock
from .storetime import ClockCheck, ClockRecord, StoreClock, check_clock
from .cold import ColdTier
from .cold_index import ColdIndex, VectorCache
from .migrator import MARK_PURGE_SQL, Migrator
from .errors import (
    ClockSkewError,
    CorruptDataError,
    DuplicateIdError,
    InvalidInputError,
    MemoryNotFoundError,
    ObjectStoreError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreConfigError,
)
from .hot import HotNamespace, HotSettings, HotTier
from .kernels import (
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
    context_multipliers,
    decayed_weight,
    due_times,
    record_accesses,
    rescale_lifetimes,
)
from .kernels import columns as C
from .model import TIER_NAMES, Hit, Memory, Stats, SweepReport
from .objectstore import LocalObjectStore, ObjectStore, open_object_store, url_without_userinfo
from .policy import Policy
from .scoring import CompiledPolicy
from .tier_search import RowHit, RowRanker, search_cold
from .faults import crash_point
from .lifecycle import lifecycle_metrics
from .tags import TagVocab
from .trace import TraceWriter, encode_vector
from .validation import (
    F32,
    check_confidence,
    check_content,
    check_id,
    check_id_list,
    check_key,
    check_metadata,
    check_namespace,
    check_positive_int,
    check_str,
    check_tags,
    check_ttl,
    check_vector,
)
from .warm import WarmSettings, WarmTier
from .warmup import warm_up_kernels

def _opt(x: float) -> float | None:
    """NaN (an absent value in the float columns) as None."""
    return None if math.isnan(x) else float(x)


_ADD_KEYS = {"content", "embedding", "memory_type", "confidence", "source", "tags", "ttl_seconds", "pinned", "id",
             "supersedes", "key", "metadata"}
_KEEP = object()  # _set_lifetime: leave the per-memory TTL as it is


@dataclass(frozen=True)
class Settings:
    """Engine settings (not lifecycle policy). One comment per value."""

    hot: HotSettings = field(default_factory=HotSettings)
    warm: WarmSettings = field(default_factory=WarmSettings)
    synchronous: str = "NORMAL"  # SQLite: NORMAL survives a process crash, FULL also power loss
    flush_interval_s: float = 1.0  # access updates reach the catalog at least this often
    max_tags_per_memory: int = 64  # tags beyond this are rejected
    sweep_batch: int = 1000  # due rows read per migrator batch
    access_log: bool = True  # count accesses per memory and day in the catalog (access_log table)
    preload_hot: bool = False  # load every namespace's hot tier at open (default: at its first use)


class TierStore:
    """A tiered memory store for agents. Open with :meth:`open`.

    Thread-safe: searches run in parallel; adds are group-committed; access
    counts are exact under concurrency.
    """

    def __init__(self, *, path: Path, dim: int, policy: Policy, clock: Clock, settings: Settings,
                 catalog: Catalog, lock_fd: int, cold: ObjectStore, clock_check: ClockCheck,
                 allow_clock_jump: bool = False, store_id: str = "", readonly: bool = False,
                 embedder: _embedding.Embedder | None = None) -> None:
        self.path = path
        self._embedder = embedder
        self.dim = dim
        self._vector_shape = (dim,)
        self.clock = clock
        record = clock_check.record
        self._time = StoreClock(clock, -math.inf if record is None else record.high_water)
        self._clock_check = clock_check
        # A clock that failed the check at open may not sweep, and its readings
        # are not remembered (the next open must see the same disagreement).
        self._clock_trusted = (clock_check.ok or allow_clock_jump) and not readonly
        self._clock_saved = record
        self._readonly = readonly
        # a reader of a store an earlier version wrote may find no cold index (it cannot create it)
        self._cold_searchable = catalog.has_table("cold_codes")
        self.settings = settings
        self._catalog = catalog
        self._lock_fd = lock_fd
        self._vocab = TagVocab()
        self._policy = policy
        self._cp = CompiledPolicy(policy, self._vocab)
        self._hot = HotTier(path / "hot", dim, settings.hot, self._vocab, policy.type_names, catalog)
        self._warm = WarmTier(path / "warm", dim, settings.warm, catalog)
        if not readonly:
            self._warm.remove_orphans()
        self._cold = ColdTier(cold, dim)
        self._cold_index = ColdIndex(catalog.query, dim)
        self._vector_cache = VectorCache()
        # archive objects a cold search could not read (it served the rest): a count and the last 100
        self.cold_search_errors = 0
        self._cold_error_log: list[str] = []
        self._cold_errors_lock = threading.Lock()
        self.store_id = store_id
        self._ownership = ownership.PrefixOwnership(cold, store_id)
        self._migrator = Migrator(self)
        self._type_idx = {t: i for i, t in enumerate(policy.type_names)}
        self._ranker = RowRanker(self._cp, self._vocab, self._type_idx,
                                 lambda row, now: self._memory_from_row(row, now, with_embedding=False))
        self._trace: TraceWriter | None = None
        self._valid_ns: set[str] = set()  # namespaces that passed check_namespace (search fast path)
        self._contexts: dict[str, tuple[str, ...]] = {
            ns: tuple(json.loads(tags)) for ns, tags in catalog.query("SELECT ns, tags FROM contexts")
        }
        self._closed = False
        self._close_lock = threading.Lock()
        self._sweep_lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="tierstore-access-flusher", daemon=True)
        if not readonly:  # a reader records nothing to flush
            self._flusher.start()

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, dim: int | None = None, policy: Policy | None = None,
             cold: str | os.PathLike[str] | ObjectStore | None = None, cold_options: Mapping[str, Any] | None = None,
             clock: Clock | None = None, settings: Settings | None = None,
             allow_clock_jump: bool = False, take_over_cold: bool = False, readonly: bool = False,
             embedder: Any = None) -> "TierStore":
        """Open the store at ``path`` or create it.

        dim: vector dimension, required to create a store (then fixed).
        policy: ``None`` keeps the stored policy (the default one for a new
        store); a different policy replaces it and every memory's lifetime is
        recomputed under it. cold: where archives go — ``file:///dir``,
        ``s3://bucket/prefix`` (``cold_options``: ``endpoint_url``,
        ``region_name``, client options) or an :class:`ObjectStore`; default
        ``<path>/cold``, and a store reopened without it uses the one it was
        created with. clock: defaults to wall-clock time; pass a
        :class:`ManualClock` to drive time. Store time never runs backwards
        (see :mod:`tierstore.storetime`): the system clock is checked against
        the store's record, and if it is behind the latest time the store has
        seen, or the store's time was kept by another clock, ``sweep`` and the
        background migrator refuse to run (``ClockSkewError``) unless
        ``allow_clock_jump``. The object store is reached at open (a wrong
        bucket or missing credentials raise StoreConfigError, and a new store
        leaves nothing behind) and claimed for this store alone (see
        :mod:`tierstore.ownership`; ``take_over_cold=True`` hands over a prefix
        another, stopped, store owns). One process at a time; with
        ``readonly=True`` any number of readers beside it (SQLite's WAL): such
        a store never creates or writes anything, takes no lock, and serves
        ``get``, ``search`` (without recording accesses), ``stats``,
        ``verify``, ``metrics_text`` and the report; every call that would
        change something raises ReadOnlyStoreError. embedder: text in — a
        callable ``list[str] -> float32 (n, dim)`` or ``"minilm"`` (extra
        ``embed``); then ``add``/``add_batch`` embed the content when no
        embedding is given (or embed a str given as the embedding), and
        ``search``/``restore(query=)`` take text (see :mod:`tierstore.embedding`).
        ``dim`` defaults to the embedder's. The embedder's name and dim are
        recorded; opening with another one raises StoreConfigError.
        """
        emb = _embedding.resolve(embedder)
        if emb is not None:
            if dim is None:
                dim = emb.dim
            elif check_positive_int(dim, "dim") != emb.dim:
                raise StoreConfigError(f"dim={dim} but the embedder {emb.name!r} makes vectors of dimension {emb.dim}")
        if readonly:
            return cls._open_readonly(Path(path), dim=dim, policy=policy, cold=cold, cold_options=cold_options,
                                      clock=clock, settings=settings, embedder=emb)
        root = Path(path)
        made_dir = not root.exists()
        fresh = not (root / "catalog.sqlite").exists()
        if fresh and dim is None:
            raise StoreConfigError(f"there is no tierstore store at {root} (to create one, give dim=)")
        root.mkdir(parents=True, exist_ok=True)
        lock_fd = _lock(root)
        catalog: Catalog | None = None
        try:
            settings = settings or Settings()
            catalog = Catalog(root / "catalog.sqlite", synchronous=settings.synchronous)
            stored_dim = catalog.get_meta("dim")
            if dim is None:
                if stored_dim is None:
                    raise StoreConfigError(f"there is no tierstore store at {root} (to create one, give dim=)")
                dim = int(stored_dim)
            dim = check_positive_int(dim, "dim")
            if stored_dim is not None and int(stored_dim) != dim:
                raise StoreConfigError(f"the store at {root} has dimension {stored_dim}, opened with dim={dim}")
            if emb is not None:
                _embedding.check_against_record(emb, catalog.get_meta("embedder"), str(root))
            stored_policy = catalog.get_meta("policy")
            effective = policy or (Policy.from_json(stored_policy) if stored_policy else Policy.default())
            types_in_use = {r[0] for r in catalog.query("SELECT DISTINCT memory_type FROM memories")}
            missing = sorted(types_in_use - set(effective.type_names))
            if missing:
                raise StoreConfigError(
                    f"the policy does not define memory types used in the store: {', '.join(missing)}"
                )
            changed = stored_policy is not None and stored_policy != effective.to_json()
            cold_store, cold_meta = _open_cold(root, cold, cold_options, catalog.get_meta("cold"))
            store_id = catalog.get_meta("store_id") or uuid.uuid4().hex
            # The object store is reached before anything is written: a wrong bucket,
            # missing credentials or another store's prefix is an error now, not later.
            try:
                ownership.claim(cold_store, store_id, root, take_over=take_over_cold)
            except ObjectStoreError as exc:
                raise StoreConfigError(f"cannot reach the object store for archives, {cold_store!r}: {exc}") from exc
            meta = {"dim": str(dim), "policy": effective.to_json(), "schema_version": "1", "store_id": store_id}
            if cold_meta is not None:
                meta["cold"] = cold_meta
            if emb is not None:
                meta["embedder"] = emb.record()
            catalog.set_meta(meta)
            warm_up_kernels()
            clock = clock or SystemClock()
            check = check_clock(clock, ClockRecord.from_json(catalog.get_meta("clock")))
            store = cls(path=root, dim=dim, policy=effective, clock=clock, settings=settings,
                        catalog=catalog, lock_fd=lock_fd, cold=cold_store, clock_check=check,
                        allow_clock_jump=allow_clock_jump, store_id=store_id, embedder=emb)
        except BaseException:
            if catalog is not None:
                catalog.close()
            os.close(lock_fd)
            if fresh:  # a store this call was creating: leave nothing behind
                _remove_new_store(root, made_dir)
            raise
        store._save_clock()
        store._repair_supersessions()
        if changed:
            store._reapply_policy()
        if catalog.get_meta("due_times") != _DUE_TIMES_VERSION:
            store._repair_never_due()
            catalog.set_meta({"due_times": _DUE_TIMES_VERSION})
        if settings.preload_hot:
            for ns in catalog.namespaces():
                store._hot.ensure(ns)
        return store

    @classmethod
    def _open_readonly(cls, root: Path, *, dim: int | None, policy: Policy | None, cold: Any,
                       cold_options: Mapping[str, Any] | None, clock: Clock | None,
                       settings: Settings | None, embedder: _embedding.Embedder | None = None) -> "TierStore":
        """A reader beside the store's writer: no lock, no writes, nothing created."""
        if not (root / "catalog.sqlite").is_file():
            raise StoreConfigError(f"there is no tierstore store at {root}")
        catalog = Catalog(root / "catalog.sqlite", readonly=True)
        try:
            stored_dim = catalog.get_meta("dim")
            stored_policy = catalog.get_meta("policy")
            if stored_dim is None or stored_policy is None:
                raise StoreConfigError(f"the store at {root} was never completely created")
            if dim is not None and check_positive_int(dim, "dim") != int(stored_dim):
                raise StoreConfigError(f"the store at {root} has dimension {stored_dim}, opened with dim={dim}")
            if embedder is not None:
                if embedder.dim != int(stored_dim):
                    raise StoreConfigError(f"the store at {root} has dimension {stored_dim}; the embedder "
                                           f"{embedder.name!r} makes vectors of dimension {embedder.dim}")
                _embedding.check_against_record(embedder, catalog.get_meta("embedder"), str(root))
            effective = Policy.from_json(stored_policy)
            if policy is not None and policy.to_json() != stored_policy:
                raise StoreConfigError("a read-only open cannot apply a different policy (it would recompute "
                                       "every memory's lifetime); open it for writing, or without policy=")
            cold_store, _ = _open_cold(root, cold, cold_options, catalog.get_meta("cold"), create=False)
            warm_up_kernels()
            clock = clock or SystemClock()
            check = check_clock(clock, ClockRecord.from_json(catalog.get_meta("clock")))
            return cls(path=root, dim=int(stored_dim), policy=effective, clock=clock, settings=settings or Settings(),
                       catalog=catalog, lock_fd=-1, cold=cold_store, clock_check=check,
                       store_id=catalog.get_meta("store_id") or "", readonly=True, embedder=embedder)
        except BaseException:
            catalog.close()
            raise

    @property
    def embedder(self) -> _embedding.Embedder | None:
        """The embedder text is turned into vectors with (``None``: vectors only)."""
        return self._embedder

    @property
    def readonly(self) -> bool:
        """Opened with ``readonly=True``: it changes nothing."""
        return self._readonly

    def _check_writable(self) -> None:
        self._check_open()
        if self._readonly:
            raise ReadOnlyStoreError("the store was opened read-only (readonly=True): it changes nothing")

    def __enter__(self) -> "TierStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"TierStore({str(self.path)!r}, dim={self.dim}, {state})"

    @property
    def policy(self) -> Policy:
        return self._policy

    def now(self) -> float:
        """Store time, POSIX seconds: the clock's reading, never earlier than
        the latest time the store has seen (see :mod:`tierstore.storetime`)."""
        return self._time.now()

    @property
    def clock_check(self) -> ClockCheck:
        """How the clock given at open compared with the store's record."""
        return self._clock_check

    def _require_trusted_clock(self) -> None:
        if not self._clock_trusted:
            raise ClockSkewError(self._clock_check.reason())

    def _save_clock(self) -> None:
        """Remember the high-water mark and the clock's offset (after a
        trusted open, then at most once a second, and at close)."""
        if not self._clock_trusted:
            return
        self._time.now()
        rec = self._time.record()
        saved = self._clock_saved
        if saved is not None and rec.high_water - saved.high_water < 1.0 and abs(rec.offset - saved.offset) < 1.0:
            return
        self._catalog.submit(lambda conn: conn.execute(
            "INSERT INTO meta (key, value) VALUES ('clock', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (rec.to_json(),)))
        self._clock_saved = rec

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    # ------------------------------------------------------------------ add

    def add(self, ns: str, content: str, embedding: Any = None, *, memory_type: str = "fact", confidence: float = 0.8,
            source: str = "user_declaration", tags: Iterable[str] = (), ttl_seconds: float | None = None,
            pinned: bool = False, id: str | None = None, supersedes: Iterable[str] = (),
            key: str | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Store one memory and return its id. Durable when it returns.

        embedding: ``dim`` finite numbers, not all zero (stored L2-normalised);
        with an embedder, ``None`` (the content's embedding) or a text to embed.
        confidence: the caller's estimate in [0, 1], fused with the source's
        default (see :class:`ConfidencePolicy`). ttl_seconds: overrides the
        type's TTL. pinned: never expires. supersedes: ids of memories of the
        namespace this one replaces ("moved to Osaka" supersedes "lives in
        Lisbon"): each gets a negative feedback of strength 1 and a TTL of 0,
        so it ranks low at once and the next sweep archives it (or deletes it,
        if its confidence fell to the delete bar) even if it is used
        meanwhile; a ``supersede`` event records the pair. Unknown ids raise
        MemoryNotFoundError and nothing is added. key: a slot (1-128 letters,
        digits, ``_ . : / - @ # +``): the slot's live memory, if any, is
        superseded exactly as by ``supersedes``; :meth:`get_by_key` reads the
        slot. A ``supersedes`` that names another slot's memory, or not this
        slot's live one, raises InvalidInputError and nothing changes.
        metadata: the caller's free-form JSON (a dict with string keys; at most
        64 KiB as compact JSON, see ``validation.check_metadata``), kept as
        given through every tier and archive, read back as ``Memory.metadata``;
        not used for ranking or lifetimes.

        By policy (see docs/policy.md): re-adding the content of a live memory
        (normalised) with the same type and key reinforces that memory and
        returns *its* id (``dedupe``; a cold one is restored first), and a new
        memory very similar to live ones of its type supersedes them
        (``types.<t>.supersede_above``), softly: they are marked, damped, due
        at the next sweep, and explicit positive feedback takes it back.
        """
        item = {"content": content, "embedding": embedding, "memory_type": memory_type, "confidence": confidence,
                "source": source, "tags": tags, "ttl_seconds": ttl_seconds, "pinned": pinned, "id": id,
                "supersedes": supersedes, "key": key, "metadata": metadata}
        return self._add(ns, [item])[0]

    def add_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        """Store many memories in one transaction (dicts with :meth:`add`'s
        keys). All or nothing: one invalid item rejects the batch. Items take
        effect in order: a later item with an earlier one's key supersedes it,
        a later duplicate reinforces it and returns its id."""
        self._check_items(items)
        return self._add(ns, items)

    @staticmethod
    def _check_items(items: Any) -> None:
        if isinstance(items, Mapping) or not isinstance(items, Sequence):
            raise InvalidInputError("add_batch expects a list of dicts")
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInputError(f"add_batch item {i} is not a dict")
            unknown = set(item) - _ADD_KEYS
            if unknown:
                raise InvalidInputError(f"add_batch item {i}: unknown keys {sorted(unknown)}")
            for required in ("content",):  # an absent embedding: the embedder's, or a clear error
                if required not in item:
                    raise InvalidInputError(f"add_batch item {i}: missing {required!r}")

    def check_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> None:
        """Raise the InvalidInputError :meth:`add_batch` would raise for
        ``items`` before writing (their fields and ids within the batch;
        not a clash with an existing id), and change nothing."""
        self._check_open()
        check_namespace(ns)
        self._check_items(items)
        if items:
            self._prepare_rows(ns, items, self._time.now())

    def _add(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        self._check_writable()
        check_namespace(ns)
        if not items:
            return []
        items = _embedding.fill_embeddings(self._embedder, items)  # text in: one batched call of the model
        now = self._time.now()
        rows, vectors = self._prepare_rows(ns, items, now)
        hot = self._hot.ensure(ns)
        superseded = dict(self._check_supersedes(ns, items, rows))
        similar = self._similar_live(ns, hot, rows, vectors)
        dedupe_on = self._policy.dedupe == "exact"
        conf_half_life = self._cp.conf_half_life

        def insert(conn: sqlite3.Connection) -> tuple[list[int | dedupe.Duplicate], list[supersession.Mark]]:
            # Items take effect in order, all in this transaction: a key's live
            # memory, a duplicate or a candidate may be an earlier item.
            outcome: list[int | dedupe.Duplicate] = []
            marks: list[supersession.Mark] = []
            for i, row in enumerate(rows):
                where = "" if len(rows) == 1 else f"item {i}: "
                olds = superseded.get(row.id, [])
                live = supersession.check_key_agrees(conn, ns, row.key, olds, where)
                dup = dedupe.find_duplicate(conn, ns, row.memory_type, row.key, row.content) if dedupe_on else None
                if dup is not None:
                    outcome.append(dup)
                    new_id = dup.id  # a duplicate is not new: it supersedes only what the caller names
                else:
                    try:
                        cur = conn.execute(INSERT_SQL, insert_params(row))
                    except sqlite3.IntegrityError:
                        raise DuplicateIdError(f"a memory with id {row.id!r} already exists in namespace {ns!r}") from None
                    outcome.append(int(cur.lastrowid))  # type: ignore[arg-type]
                    conn.execute(EVENT_SQL, (now, ns, row.id, "create", None, "hot", "add", row.w_ref, row.confidence,
                                             0, row.memory_type))
                    new_id = row.id
                wanted = supersession.named_marks(new_id, olds, row.key, live, include_live=dup is None)
                if dup is None and similar[i]:
                    new = auto_supersession.NewMemory(row.id, row.memory_type, row.tags, row.confidence)
                    wanted += auto_supersession.decide(conn, ns, new, similar[i], olds, self._policy, now,
                                                       conf_half_life)
                marks += supersession.record_all(conn, ns, wanted, now)
            return outcome, marks

        outcome, marks = self._catalog.write(insert)
        crash_point("add.after_commit")
        added = [(row, v) for row, v, out in zip(rows, vectors, outcome) if not isinstance(out, dedupe.Duplicate)]
        for (row, _), rid in zip(added, [o for o in outcome if not isinstance(o, dedupe.Duplicate)]):
            row.rid = rid
        if added:
            with hot.lock.write():
                hot.add_rows([r for r, _ in added], np.stack([v for _, v in added]))
        for mark in marks:
            self._supersede(ns, mark.old_id, mark.new_id, now, mark)
        for row, out in zip(rows, outcome):
            if isinstance(out, dedupe.Duplicate):
                self._reinforce(ns, out, row, now)
        ids = [out.id if isinstance(out, dedupe.Duplicate) else row.id for row, out in zip(rows, outcome)]
        if self._trace is not None:
            for r, v, mid in zip(rows, vectors, ids):
                self._trace.write("add", now, ns=ns, id=mid, content=r.content, embedding=encode_vector(v),
                                  memory_type=r.memory_type, confidence=r.conf_llm, source=r.source,
                                  tags=list(r.tags), ttl_seconds=r.ttl_seconds, pinned=r.pinned,
                                  supersedes=superseded.get(r.id, []), key=r.key,
                                  metadata=None if r.metadata is None else json.loads(r.metadata))
        return ids

    def _similar_live(self, ns: str, hot: HotNamespace, rows: Sequence[MemoryRow],
                      vectors: np.ndarray) -> list[dict[str, float]]:
        """Per row: ids of live hot and warm memories (and earlier rows) of
        its type at or above its type's lowest supersession bar, with their
        cosine. Read before the add's transaction; the rule is applied in it."""
        floors = [auto_supersession.bars_for(self._policy, r.memory_type).lowest for r in rows]
        if all(f is None for f in floors):
            return [{} for _ in rows]
        types = [r.memory_type for r in rows]
        found = auto_supersession.similar_in_hot(hot, vectors, [self._type_idx[t] for t in types], floors)
        for part in (auto_supersession.similar_in_warm(self._warm, self._catalog, ns, vectors, types, floors),
                     auto_supersession.similar_in_batch(vectors, [r.id for r in rows], types, floors)):
            for mine, more in zip(found, part):
                mine.update(more)
        return found

    def _check_supersedes(self, ns: str, items: Sequence[Mapping[str, Any]],
                          rows: Sequence[MemoryRow]) -> list[tuple[str, list[str]]]:
        """``(new id, [superseded ids])`` per item that supersedes something;
        every superseded id must already exist in the namespace."""
        out = []
        for item, row in zip(items, rows):
            olds = item.get("supersedes") or ()
            if not olds:
                continue
            old_ids = check_id_list(olds)
            if row.id in old_ids:
                raise InvalidInputError(f"memory {row.id!r} cannot supersede itself")
            for old_id in old_ids:
                if self.get(ns, old_id) is None:
                    raise MemoryNotFoundError(f"no memory {old_id!r} in namespace {ns!r} to supersede")
            out.append((row.id, old_ids))
        return out

    def _supersede(self, ns: str, old_id: str, new_id: str, now: float, mark: supersession.Mark | None = None) -> None:
        """Negative feedback of strength 1 (implicit, softer, for automatic
        supersession), then a TTL of 0: the memory is expired and stays so (an
        access that refreshes the TTL restarts it at 0; confidence and context
        scaling keep 0 at 0); logs a ``supersede`` event."""
        auto = mark is not None and mark.kind == "auto"
        try:
            self._feedback(ns, old_id, positive=False, strength=1.0, implicit=auto)
        except MemoryNotFoundError:
            return  # deleted meanwhile: nothing left to supersede
        reason = f"by {new_id}" if mark is None or mark.kind == "explicit" else f"by {new_id} ({mark.describe()})"
        self._set_lifetime(ns, old_id, now, override=0.0, anchor=lambda a: min(a, now), kind="supersede",
                           reason=reason)

    def _set_lifetime(self, ns: str, id: str, now: float, *, override: Any = _KEEP, anchor: Any = None,
                      kind: str, reason: str, extra: Any = None) -> bool:
        """Change one memory's per-memory TTL (``override``: seconds, ``None``
        for the type's, ``_KEEP``) and/or its TTL anchor (``anchor``: old ->
        new), in whichever tier it is; its effective TTL and due time follow.
        Logs an event ``kind``/``reason``; ``extra(conn)`` runs in the same
        transaction. Returns False if the memory is gone."""
        cp = self._cp
        hot = self._hot.ensure(ns)
        fut = None
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                with hot.access_lock:
                    F = hot.F
                    if override is not _KEEP:
                        F[C.F_TTL_OVERRIDE, slot] = math.nan if override is None else override
                        F[C.F_TTL, slot] = cp.ttl(int(hot.I[C.I_TYPE, slot]), float(F[C.F_CONF, slot]), override,
                                                  float(F[C.F_CTX_MULT, slot]))
                    if anchor is not None:
                        F[C.F_TTL_ANCHOR, slot] = anchor(float(F[C.F_TTL_ANCHOR, slot]))
                    self._refresh_due(hot, slot)
                    event = (now, ns, id, kind, "hot", "hot", reason, float(F[C.F_W_REF, slot]),
                             float(F[C.F_CONF, slot]), int(hot.I[C.I_ACCESS_COUNT, slot]),
                             cp.type_names[int(hot.I[C.I_TYPE, slot])])

                    def write(conn: sqlite3.Connection, event: Any = event) -> None:
                        conn.execute(EVENT_SQL, event)
                        if extra is not None:
                            extra(conn)

                    fut = self._submit_dirty(hot, extra=write)
        if fut is not None:
            fut.result()
            return True

        def change(row: MemoryRow, conn: sqlite3.Connection) -> MemoryRow:
            if override is not _KEEP:
                row.ttl_seconds = override
                row.ttl = cp.ttl(self._policy.type_index(row.memory_type), row.confidence, override, row.ctx_mult)
            if anchor is not None:
                row.ttl_anchor = anchor(row.ttl_anchor)
            row.due_at = self._due_of(row)
            self._catalog.write_state(conn, row)
            tier = TIER_NAMES[row.tier]
            conn.execute(EVENT_SQL, (now, ns, id, kind, tier, tier, reason, row.w_ref, row.confidence,
                                     row.access_count, row.memory_type))
            if extra is not None:
                extra(conn)
            return row

        try:
            self._update_row(ns, id, change)
        except MemoryNotFoundError:
            return False
        return True

    def _reinforce(self, ns: str, dup: dedupe.Duplicate, again: MemoryRow, now: float) -> None:
        """A re-added memory (``again``: the add that repeated it). An
        archived one is restored first (it was said again, so it is wanted:
        the same id comes back hot, as ``restore`` would bring it; if the
        object store cannot be read, it is reinforced where it is). Its
        confidence signals become the surer of the two (the assistant's guess,
        now said by the user, is as sure as the user); then an implicit
        positive feedback (weight + boost, confidence re-fused, nudged up and
        its decay restarted) and its TTL restarted from now (a ``reinforce``
        event)."""
        if dup.tier == TIER_COLD:
            try:
                with self._sweep_lock:
                    self._migrator.restore(ns, ids=[dup.id], where=None, text=None, query=None, limit=None,
                                           progress=False)
            except (ObjectStoreError, CorruptDataError):
                pass  # still cold: reinforced there; restore() can bring it back later
        self._raise_confidence_signals(ns, dup.id, again.conf_llm, again.conf_rule)
        try:
            self._feedback(ns, dup.id, positive=True, strength=1.0, implicit=True)
        except MemoryNotFoundError:
            return  # deleted meanwhile
        self._set_lifetime(ns, dup.id, now, anchor=lambda a: max(a, now), kind="reinforce", reason="re-added")

    def _raise_confidence_signals(self, ns: str, id: str, llm: float | None, rule: float | None) -> None:
        """Each confidence signal of memory ``id`` becomes at least ``llm`` /
        ``rule`` (the next feedback re-fuses them), in its hot columns and in
        the catalog. Durable when it returns."""
        def higher(current: float | None, new: float | None) -> float | None:
            if new is None or (current is not None and not math.isnan(current) and current >= new):
                return None  # nothing to raise
            return new

        hot = self._hot.ensure(ns)
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                with hot.access_lock:
                    for row, new in ((C.F_CONF_LLM, llm), (C.F_CONF_RULE, rule)):
                        value = higher(float(hot.F[row, slot]), new)
                        if value is not None:
                            hot.F[row, slot] = value

        # the signals are not state the flush writes: the catalog row is updated here, in every tier
        def write(conn: sqlite3.Connection) -> None:
            r = conn.execute("SELECT conf_llm, conf_rule FROM memories WHERE ns = ? AND id = ?", (ns, id)).fetchone()
            if r is None:
                return
            conn.execute("UPDATE memories SET conf_llm = coalesce(?, conf_llm), conf_rule = coalesce(?, conf_rule)"
                         " WHERE ns = ? AND id = ?", (higher(r[0], llm), higher(r[1], rule), ns, id))

        self._catalog.write(write)

    def _reverse_auto_supersession(self, ns: str, id: str) -> bool:
        """Take back an automatic supersession of ``id`` (explicit positive
        feedback said it still holds): the mark goes, its per-memory TTL is
        what it was before, and an archived memory is restored. Returns
        whether there was one to take back."""
        mark = supersession.auto_mark(self._catalog, ns, id)
        if mark is None:
            return False
        now = self._time.now()
        done = self._set_lifetime(ns, id, now, override=mark.prior_ttl_seconds, kind="unsupersede",
                                  reason=f"positive feedback (was superseded by {mark.by_id})",
                                  extra=lambda conn: supersession.clear(conn, mark.rid))
        row = self._catalog.get_row(ns, id)
        if done and row is not None and row.tier == TIER_COLD:
            with self._sweep_lock:
                self._migrator.restore(ns, ids=[id], where=None, text=None, query=None, limit=None,
                                       progress=False)
        return done

    def _prepare_rows(self, ns: str, items: Sequence[Mapping[str, Any]], now: float) -> tuple[list[MemoryRow], np.ndarray]:
        cp, pol = self._cp, self._policy
        ctx = cp.context(self._contexts.get(ns, ()))
        rows: list[MemoryRow] = []
        vectors = np.empty((len(items), self.dim), np.float32)
        seen: set[str] = set()
        for i, item in enumerate(items):
            where = "" if len(items) == 1 else f"item {i}: "
            try:
                content = check_content(item["content"])
                vectors[i] = check_vector(item["embedding"], self.dim)
                memory_type = check_str(item.get("memory_type", "fact"), "memory_type")
                type_idx = pol.type_index(memory_type)
                conf_llm = check_confidence(item.get("confidence", 0.8))
                source = check_str(item.get("source", "user_declaration"), "source")
                tags = check_tags(item.get("tags", ()), self.settings.max_tags_per_memory)
                ttl_override = check_ttl(item.get("ttl_seconds"))
                pinned = item.get("pinned", False)
                if not isinstance(pinned, bool):
                    raise InvalidInputError(f"pinned must be True or False, got {pinned!r}")
                mid = item.get("id")
                mid = uuid.uuid4().hex if mid is None else check_id(mid)
                key = check_key(item.get("key"))
                metadata = check_metadata(item.get("metadata"))
            except InvalidInputError as exc:
                if where:
                    raise type(exc)(where + str(exc)) from None
                raise
            if mid in seen:
                raise DuplicateIdError(f"{where}id {mid!r} appears twice in the batch")
            seen.add(mid)
            conf_rule = pol.rule_confidence(source)
            conf = pol.fuse_confidence(conf_llm, conf_rule, None)
            ctx_mult = cp.ttl_multiplier(ctx, self._vocab.ids(tags))
            half_life = cp.half_life(type_idx, conf, ctx_mult)
            ttl = cp.ttl(type_idx, conf, ttl_override, ctx_mult)
            w0 = float(cp.w0_by_type[type_idx])
            rows.append(MemoryRow(
                rid=-1, ns=ns, id=mid, content=content, embedding=vectors[i].astype("<f4").tobytes(),
                memory_type=memory_type, source=source, tags=tags, created_at=now, last_accessed_at=now,
                access_count=0, conf_llm=conf_llm, conf_rule=conf_rule, conf_feedback=None, confidence=conf,
                t_conf=now, ttl_seconds=ttl_override, pinned=pinned, tier=TIER_HOT, w_ref=w0, t_ref=now,
                half_life=half_life, ttl=ttl, ttl_anchor=now, ctx_mult=ctx_mult, due_at=math.inf, key=key,
                metadata=metadata,
            ))
        due = due_times(
            np.full(len(rows), TIER_HOT, np.int64), np.array([int(r.pinned) for r in rows], np.int64),
            np.array([r.w_ref for r in rows]), np.array([r.t_ref for r in rows]),
            np.array([r.half_life for r in rows]), np.array([r.ttl_anchor + r.ttl for r in rows]),
            np.array([r.confidence for r in rows]), np.array([r.t_conf for r in rows]),
            cp.conf_half_life, cp.thresholds,
        )
        for r, d in zip(rows, due.tolist()):
            r.due_at = d
        return rows, vectors

    # ------------------------------------------------------------------ search

    def search(self, ns: str, query: Any, *, k: int = 5, context_tags: Iterable[str] = (),
               memory_types: Iterable[str] | None = None, min_confidence: float = 0.0, include_warm: bool = True,
               include_cold: bool | str | None = None, record_access: bool | None = None,
               explain: bool = False) -> list[Hit]:
        """The ``k`` best memories for ``query``, ranked by the policy's fused score.

        query: a finite, non-zero vector of the store's dimension (or, with an
        embedder, a text), compared by cosine (its length does not matter; a contiguous float32 array is the
        fast path, anything else is converted first). context_tags: the
        query's context (defaults to the namespace's active context); memories
        sharing tags score higher, context rules and masks apply.
        memory_types / min_confidence filter. include_warm: also search the
        warm tier and merge. record_access: count an access on every hit
        (``None``: the policy's ``scoring.record_access``); a warm hit whose
        access is recorded moves back to hot. include_cold: also search the
        cold tier (archived memories, by their codes, rescored from their
        archived vectors): ``True``, ``False``, or ``"auto"`` — only when the
        best hot or warm hit's similarity is below the policy's
        ``scoring.cold_similarity_bar`` (``None``: the policy's
        ``scoring.include_cold``, "auto" by default). A cold hit has
        ``memory.tier == "cold"``, its explanation says why the cold tier was
        reached, and if its access is recorded it is reactivated (back to hot).
        A superseded memory is never a cold hit: it was retired for a
        reason, and ``restore`` still reaches it. explain: attach each hit's
        factor breakdown (and, for a superseded memory, what superseded it
        and how).
        """
        # Written for speed: this runs per query, and after hnswlib's search
        # every Python step runs with cold caches.
        if self._closed:
            raise StoreClosedError("the store is closed")
        if ns not in self._valid_ns:
            self._valid_ns.add(check_namespace(ns))
        if type(query) is str:
            query = _embedding.embed_query(self._embedder, query)
        if (type(query) is np.ndarray and query.dtype is F32 and query.shape == self._vector_shape
                and query.flags.c_contiguous):
            # As given: the rerank kernel measures the query's length (in cache
            # after the candidate search); the hot tier checks and normalises
            # a zero, NaN, inf or oddly scaled one the kernel does not rank.
            q = query
        else:
            q = check_vector(query, self.dim, "query")
        if type(k) is not int or k < 1:
            k = check_positive_int(k, "k")
        min_conf = min_confidence if type(min_confidence) is float and 0.0 <= min_confidence <= 1.0 \
            else check_confidence(min_confidence, "min_confidence")
        cp = self._cp
        allowed = cp.all_types if memory_types is None else cp.type_allowed(list(memory_types))
        ctx_tags = (check_tags(context_tags, 1024) if context_tags else ()) or self._contexts.get(ns, ())
        ctx = cp.context(ctx_tags) if ctx_tags else cp.empty_context
        if record_access is None:
            record_access = self._policy.scoring.record_access and not self._readonly
        elif record_access and self._readonly:
            raise ReadOnlyStoreError("the store was opened read-only: search(record_access=True) would change it")
        if include_cold is not None and not (include_cold == "auto" or type(include_cold) is bool):
            raise InvalidInputError(f"include_cold must be True, False, 'auto' or None, got {include_cold!r}")
        now = self._time.now()
        hot = self._hot.ensure(ns)
        if k > hot.live:  # never more than the namespace holds: k sizes the kernels' buffers
            k = max(1, min(k, hot.live + sum(info.count for info in self._warm.shards(ns))
                           + (self._cold_index.count(ns) if self._cold_searchable else 0)))
        sc = self._policy.scoring
        cold_mode = sc.include_cold if include_cold is None else include_cold
        with hot.lock.read():
            ranked = hot.search(q, k, cp, ctx, allowed, min_conf, now)
            hits = hot.hits(ranked, cp, explain)
            warm_shards = include_warm and bool(self._warm.shards(ns))
            # hot alone answers when there is no warm tier to merge and the cold
            # tier is not wanted: off, or "auto" with k hits, one as similar as the bar
            hot_alone = not warm_shards and (cold_mode is False or (
                cold_mode == "auto" and len(hits) >= k and ranked.rf[C.R_RAW].max() >= sc.cold_similarity_bar))
            if record_access and hits and hot_alone:
                with hot.access_lock:
                    record_accesses(ranked.slots, now, hot.F, hot.I, cp.boost_by_type, cp.refresh_by_type,
                                    cp.thresholds, cp.conf_half_life)
        if q is query and (not hot_alone or self._trace is not None):
            q = check_vector(query, self.dim, "query")  # the other tiers and the trace take unit vectors
        if hot_alone:
            if self._trace is not None:
                self._trace_search(now, ns, q, k, ctx_tags, memory_types, min_conf, include_warm, record_access, hits)
            if explain and hits:
                supersession.annotate_explains(self._catalog, ns, hits)
            return hits
        # Merge with the warm and cold tiers: the best k of all by (score, similarity).
        raw = ranked.raw
        merged = [(h.score, float(raw[i, 0]), 0, i, h, None) for i, h in enumerate(hits)]
        seen = {h.id for h in hits}  # a memory that moved tiers between two passes keeps its first hit
        if warm_shards:
            warm = self._search_warm(ns, q, k, ctx, allowed, min_conf, now, explain)
            merged += [(w.hit.score, w.similarity, 1, i, w.hit, w) for i, w in enumerate(warm) if w.hit.id not in seen]
            seen.update(w.hit.id for w in warm)
        best = max((m[1] for m in merged), default=-math.inf)
        if cold_mode is True or (cold_mode == "auto" and (best < sc.cold_similarity_bar or len(merged) < k)):
            if cold_mode is True:
                note = "include_cold=True"
            elif best < sc.cold_similarity_bar:
                note = (f"hot and warm answered weakly: best similarity {best:.2f} < {sc.cold_similarity_bar:g} "
                        "(policy scoring.cold_similarity_bar)" if merged else "hot and warm hold nothing that matches")
            else:
                note = f"hot and warm answered weakly: {len(merged)} of the {k} hits asked for"
            cold = self._search_cold(ns, q, k, ctx, allowed, min_conf, now, explain, note)
            merged += [(c.hit.score, c.similarity, 2, i, c.hit, c) for i, c in enumerate(cold) if c.hit.id not in seen]
            if sc.similar_first:  # archived memories that match better than anything recent first
                merged.sort(key=lambda m: (not (m[2] == 2 and m[1] > best), -m[0], -m[1], m[2], m[3]))
            else:
                merged.sort(key=lambda m: (-m[0], -m[1], m[2], m[3]))
        else:
            merged.sort(key=lambda m: (-m[0], -m[1], m[2], m[3]))
        top = merged[:k]
        if record_access:
            self._record_hits(ns, hot, top, now)
        result = [m[4] for m in top]
        if self._trace is not None:
            self._trace_search(now, ns, q, k, ctx_tags, memory_types, min_conf, include_warm, record_access, result)
        if explain and result:
            supersession.annotate_explains(self._catalog, ns, result)
        return result

    def _record_hits(self, ns: str, hot: HotNamespace, top: list[tuple[Any, ...]], now: float) -> None:
        """Count an access on each merged hit where it is: hot hits in place,
        warm ones promoted to hot, cold ones reactivated (back to hot, with
        the archived embedding the search already read)."""
        cp = self._cp
        hot_ids = [m[4].id for m in top if m[2] == 0]
        moved_away: list[str] = []
        if hot_ids:
            with hot.lock.read(), hot.access_lock:
                # slots may have moved since the lock was released: look them up again
                slots = np.array([hot.slot_of[i] for i in hot_ids if i in hot.slot_of], np.int64)
                moved_away = [i for i in hot_ids if i not in hot.slot_of]
                if slots.size:
                    record_accesses(slots, now, hot.F, hot.I, cp.boost_by_type, cp.refresh_by_type,
                                    cp.thresholds, cp.conf_half_life)
        used_warm = [m[5].row for m in top if m[2] == 1]
        if used_warm:
            promoted = {r.rid for r in self._migrator.promote(ns, used_warm, now, access=True, kind="promote")}
            moved_away += [r.id for r in used_warm if r.rid not in promoted]
        used_cold = [m[5] for m in top if m[2] == 2]
        if used_cold:
            rows = [c.row for c in used_cold]
            back = {r.rid for r in self._migrator.reactivate(
                ns, rows, now, records={c.row.id: {"embedding": c.embedding} for c in used_cold})}
            moved_away += [r.id for r in rows if r.rid not in back]
        pending = moved_away
        for _ in range(16):  # hits that changed tier meanwhile: counted where they are now
            if not pending:
                break
            pending = self._count_accesses(ns, hot, pending, now, strict=False)

    def _trace_search(self, now: float, ns: str, q: np.ndarray, k: int, ctx_tags: Sequence[str],
                      memory_types: Any, min_conf: float, include_warm: bool, record_access: bool,
                      hits: list[Hit]) -> None:
        assert self._trace is not None
        self._trace.write("search", now, ns=ns, query=encode_vector(q), k=k, context_tags=list(ctx_tags),
                          memory_types=None if memory_types is None else list(memory_types),
                          min_confidence=min_conf, include_warm=include_warm, record_access=record_access,
                          hits=[h.id for h in hits])

    def _search_warm(self, ns: str, q: np.ndarray, k: int, ctx: Any, allowed: np.ndarray, min_conf: float,
                     now: float, explain: bool) -> list[RowHit]:
        """Warm hits: shard candidates, their live rows from the catalog (a
        row left its shard when the catalog says so), then the same fused
        rerank as the hot tier."""
        sc = self._policy.scoring
        want = max(k * sc.oversample, sc.min_candidates, k)
        shards = self._warm.shards(ns)
        if not shards:  # a concurrent sweep archived or merged them away since the caller looked
            return []
        largest = max(info.count for info in shards)
        while True:
            rids, sims = self._warm.candidates(ns, q, want)
            rows_by_rid = {r.rid: r for r in self._catalog.get_rows_by_rid(np.unique(rids).tolist())}
            seen: set[int] = set()
            rows, cand_sims = [], []
            for rid, sim in zip(rids.tolist(), sims.tolist()):
                r = rows_by_rid.get(rid)
                if r is None or r.tier != TIER_WARM or r.ns != ns or rid in seen:
                    continue
                seen.add(rid)
                rows.append(r)
                cand_sims.append(sim)
            if not rows:
                return []
            picked, hits = self._ranker.rank(rows, cand_sims, k=k, ctx=ctx, allowed=allowed, min_conf=min_conf,
                                             now=now, explain=explain, tier="warm")
            if len(picked) >= k or want >= largest:
                return hits
            want *= 4

    def _search_cold(self, ns: str, q: np.ndarray, k: int, ctx: Any, allowed: np.ndarray, min_conf: float,
                     now: float, explain: bool, note: str) -> list[RowHit]:
        """Cold hits (see :func:`tierstore.tier_search.search_cold`); none when
        the namespace has nothing archived."""
        if not self._cold_searchable or self._cold_index.count(ns) == 0:
            return []
        errors: list[BaseException] = []
        hits = search_cold(self._ranker, index=self._cold_index, catalog=self._catalog, cold=self._cold,
                           cache=self._vector_cache, ns=ns, q=q, k=k, ctx=ctx, allowed=allowed, min_conf=min_conf,
                           now=now, explain=explain, note=note, errors=errors)
        if errors:  # the search serves what it could read; the failures are counted and kept for stats
            with self._cold_errors_lock:
                self.cold_search_errors += len(errors)
                self._cold_error_log.extend(f"{type(e).__name__}: {e}" for e in errors)
                del self._cold_error_log[:-100]
        return hits

    # ------------------------------------------------------------------ read / update

    def get(self, ns: str, id: str) -> Memory | None:
        """The memory, from any tier, without counting an access; ``None`` if
        absent. Carries its ``key`` and, if it was superseded, ``superseded_by``."""
        memory = self._get(ns, id)
        return None if memory is None else self._with_mark(memory)

    def _with_mark(self, memory: Memory) -> Memory:
        """``memory`` with its key and ``superseded_by`` (one catalog read)."""
        info = supersession.marks_of(self._catalog, memory.namespace, [memory.id]).get(memory.id)
        if info is None:
            return memory
        return replace(memory, key=info.key, superseded_by=info.superseded_by)

    def get_by_key(self, ns: str, key: str) -> Memory | None:
        """The live memory of slot ``(ns, key)`` (``add(..., key=key)``), from
        any tier, without counting an access; ``None`` if the slot is empty
        (never used, or its memory was deleted or superseded without a
        successor in the slot)."""
        self._check_open()
        check_namespace(ns)
        key = check_key(key)
        if key is None:
            raise InvalidInputError("get_by_key needs a key, got None")
        mid = supersession.live_id_of_key(self._catalog, ns, key)
        return None if mid is None else self.get(ns, mid)

    def memories(self, ns: str, *, with_embedding: bool = False) -> list[Memory]:
        """Every memory of ``ns``, from any tier, in the order they were added,
        without counting an access (``Memory.key``/``superseded_by`` are not
        filled: use :meth:`get`). ``with_embedding``: include the stored
        vectors (cold memories have none in the catalog: ``None``). Reads the
        whole namespace: meant for listings and exports, not per query."""
        self._check_open()
        check_namespace(ns)
        now = self._time.now()
        rows = self._catalog.select_rows("WHERE m.ns = ? ORDER BY m.rid", (ns,))
        hot = self._hot.get(ns)
        out = []
        for row in rows:
            memory = None
            if hot is not None and row.tier == TIER_HOT:
                with hot.lock.read():
                    slot = hot.slot_of.get(row.id)
                    if slot is not None:  # its live state (accesses not yet flushed)
                        memory = hot.memory(slot, self._cp, now, with_embedding=with_embedding)
            out.append(memory if memory is not None else self._memory_from_row(row, now, with_embedding))
        return out

    def _get(self, ns: str, id: str) -> Memory | None:
        self._check_open()
        check_namespace(ns)
        check_id(id)
        now = self._time.now()
        hot = self._hot.get(ns)
        if hot is not None:
            with hot.lock.read():
                slot = hot.slot_of.get(id)
                if slot is not None:
                    return hot.memory(slot, self._cp, now, with_embedding=True)
        row = self._catalog.get_row(ns, id)
        if row is None:
            return None
        if row.tier == TIER_HOT and hot is None:
            return self._memory_from_row(row, now)
        if row.tier == TIER_HOT:
            # added or moved after we looked: read again from memory
            hot = self._hot.ensure(ns)
            with hot.lock.read():
                slot = hot.slot_of.get(id)
                if slot is not None:
                    return hot.memory(slot, self._cp, now, with_embedding=True)
        return self._memory_from_row(row, now)

    def _memory_from_row(self, row: MemoryRow, now: float, with_embedding: bool = True) -> Memory:
        conf = lifetime.confidence_at(row.confidence, row.t_conf, self._cp.conf_half_life, now)
        expires = row.expires_at
        return Memory(
            id=row.id, namespace=row.ns, content=row.content, memory_type=row.memory_type,
            created_at=row.created_at, last_accessed_at=row.last_accessed_at, access_count=row.access_count,
            confidence=conf, source=row.source, tags=row.tags, ttl_seconds=row.ttl_seconds, pinned=row.pinned,
            tier=TIER_NAMES[row.tier], weight=lifetime.weight_at(row.w_ref, row.t_ref, row.half_life, now),
            expires_at=expires if math.isfinite(expires) else None,
            due_at=row.due_at if math.isfinite(row.due_at) else None,
            embedding=row.vector() if with_embedding else None,
            metadata=None if row.metadata is None else json.loads(row.metadata),
        )

    def _split(self, ns: str, hot: HotNamespace, ids: Sequence[str]) -> tuple[list[int], list[MemoryRow]]:
        """Hot slots of ``ids`` and the catalog rows of the others (warm or
        cold), with multiplicity. Raises MemoryNotFoundError, before anything
        changes, if an id is nowhere. Hold ``hot.lock.read()``."""
        slots: list[int] = []
        others: list[str] = []
        for mid in ids:
            slot = hot.slot_of.get(mid)
            if slot is None:
                others.append(mid)
            else:
                slots.append(slot)
        rows: list[MemoryRow] = []
        if others:
            uniq = sorted(set(others))
            found = {r.id: r for r in self._catalog.select_rows(
                f"WHERE m.ns = ? AND m.id IN ({','.join('?' * len(uniq))})", (ns, *uniq))}
            for mid in others:
                r = found.get(mid)
                if r is None or r.tier == TIER_HOT:
                    # TIER_HOT here: added to the catalog but not yet to the index (a racing add)
                    raise MemoryNotFoundError(f"no memory {mid!r} in namespace {ns!r}")
                rows.append(r)
        return slots, rows

    def _update_row(self, ns: str, id: str, change: Any) -> MemoryRow:
        """Read-modify-write one catalog row inside a transaction:
        ``change(row, conn)`` writes its update and returns the new row."""
        def write(conn: sqlite3.Connection) -> MemoryRow:
            row = self._catalog.row_in(conn, ns, id)
            if row is None:
                raise MemoryNotFoundError(f"no memory {id!r} in namespace {ns!r}")
            return change(row, conn)

        return self._catalog.write(write)

    def touch(self, ns: str, ids: str | Iterable[str]) -> None:
        """Count an access (the memories were used in a response): boosts their
        weight, refreshes TTLs that refresh on read. A warm memory moves back
        to hot; a cold one is reactivated (read back from its archive, hot
        again, a ``reactivate`` event).
        Unknown ids raise MemoryNotFoundError and nothing is counted. A memory
        that moves between tiers while it is counted (a concurrent sweep or
        restore) is counted where it went; one deleted meanwhile is not."""
        self._check_writable()
        check_namespace(ns)
        id_list = check_id_list(ids)
        if not id_list:
            return
        now = self._time.now()
        hot = self._hot.ensure(ns)
        pending = self._count_accesses(ns, hot, id_list, now, strict=True)
        for _ in range(16):  # each round, a memory that moved again; bounded so a livelock cannot hang
            if not pending:
                break
            pending = self._count_accesses(ns, hot, pending, now, strict=False)
        if self._trace is not None:
            self._trace.write("touch", now, ns=ns, ids=id_list)

    def _count_accesses(self, ns: str, hot: HotNamespace, id_list: list[str], now: float,
                        strict: bool) -> list[str]:
        """One access per occurrence of an id, in the tier the memory is in.
        Returns the occurrences whose memory moved meanwhile (count them again).
        ``strict``: an unknown id raises MemoryNotFoundError before anything is
        counted; otherwise ids deleted meanwhile are dropped."""
        cp = self._cp
        with hot.lock.read():
            if not strict:
                id_list = [i for i in id_list if i in hot.slot_of or self._catalog.get_row(ns, i) is not None]
            slots, rows = self._split(ns, hot, id_list)
            if slots:
                with hot.access_lock:
                    record_accesses(np.array(slots, np.int64), now, hot.F, hot.I, cp.boost_by_type,
                                    cp.refresh_by_type, cp.thresholds, cp.conf_half_life)
        retry: list[str] = []
        warm = {r.rid: r for r in rows if r.tier == TIER_WARM}
        if warm:
            moved = self._migrator.promote(ns, list(warm.values()), now, access=True, kind="promote")
            extra = [r.id for r in rows if r.tier == TIER_WARM]
            for r in moved:
                extra.remove(r.id)
            if extra:  # touched twice in one call, or promoted by someone else, or moved elsewhere
                with hot.lock.read():
                    here = [i for i in extra if i in hot.slot_of]
                    if here:
                        with hot.access_lock:
                            record_accesses(np.array([hot.slot_of[i] for i in here], np.int64), now, hot.F, hot.I,
                                            cp.boost_by_type, cp.refresh_by_type, cp.thresholds, cp.conf_half_life)
                    retry.extend(i for i in extra if i not in hot.slot_of)
        cold = {r.rid: r for r in rows if r.tier == TIER_COLD}
        if cold:  # a used archived memory comes back: reactivated, its access counted in the hot tier
            back = self._migrator.reactivate(ns, list(cold.values()), now)
            extra = [r.id for r in rows if r.tier == TIER_COLD]
            for r in back:
                extra.remove(r.id)
            if strict:  # deleted between the look and the count: as unknown as if it had never been
                gone = [i for i in extra if self._catalog.get_row(ns, i) is None]
                if gone:
                    raise MemoryNotFoundError(f"no memory {gone[0]!r} in namespace {ns!r}")
            retry.extend(extra)  # touched twice, or moved meanwhile: counted where it is now
        return retry

    def _due_of(self, row: MemoryRow) -> float:
        return lifetime.due_at(self._cp, row.tier, row.pinned, row.w_ref, row.t_ref, row.half_life, row.expires_at,
                               row.confidence, row.t_conf)

    def feedback(self, ns: str, id: str, *, positive: bool, strength: float = 1.0, implicit: bool = False) -> Memory:
        """Explicit (or, with ``implicit=True``, a smaller implicit) feedback on
        a memory in any tier. Positive feedback raises the feedback confidence
        signal, resets confidence decay and boosts the weight by
        ``boost·strength``; negative lowers the signal and scales the weight by
        ``1 - negative_weight_penalty·strength``. The memory's half-life, TTL
        and due time are recomputed for its new confidence. ``strength`` in
        (0, 1]. Durable when it returns; returns the updated memory. Explicit
        positive feedback on a memory that was superseded *automatically*
        takes that back (see :mod:`tierstore.auto_supersession`): the mark
        goes, its TTL is what it was, and an archived one is restored."""
        memory = self._feedback(ns, id, positive=positive, strength=strength, implicit=implicit)
        if positive and not implicit and self._reverse_auto_supersession(ns, id):
            memory = self.get(ns, id) or memory
        else:
            memory = self._with_mark(memory)
        if self._trace is not None:
            self._trace.write("feedback", self._time.now(), ns=ns, id=id, positive=positive, strength=strength,
                              implicit=implicit)
        return memory

    def _feedback(self, ns: str, id: str, *, positive: bool, strength: float, implicit: bool) -> Memory:
        """See :meth:`feedback`."""
        self._check_writable()
        check_namespace(ns)
        check_id(id)
        if not isinstance(positive, bool):
            raise InvalidInputError(f"positive must be True or False, got {positive!r}")
        if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not (0.0 < float(strength) <= 1.0):
            raise InvalidInputError(f"strength must be in (0, 1], got {strength!r}")
        if not isinstance(implicit, bool):
            raise InvalidInputError(f"implicit must be True or False, got {implicit!r}")
        strength = float(strength)
        now = self._time.now()
        cp = self._cp
        reason = ("implicit " if implicit else "") + ("positive" if positive else "negative")
        hot = self._hot.ensure(ns)
        fut = None
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                with hot.access_lock:
                    F, I = hot.F, hot.I
                    out = lifetime.apply_feedback(
                        cp, type_idx=int(I[C.I_TYPE, slot]), conf_llm=_opt(F[C.F_CONF_LLM, slot]),
                        conf_rule=_opt(F[C.F_CONF_RULE, slot]), conf_feedback=_opt(F[C.F_CONF_FEEDBACK, slot]),
                        confidence=float(F[C.F_CONF, slot]), t_conf=float(F[C.F_T_CONF, slot]),
                        w_ref=float(F[C.F_W_REF, slot]), t_ref=float(F[C.F_T_REF, slot]),
                        half_life=float(F[C.F_HALF_LIFE, slot]), ctx_mult=float(F[C.F_CTX_MULT, slot]),
                        ttl_override=_opt(F[C.F_TTL_OVERRIDE, slot]), positive=positive, strength=strength,
                        implicit=implicit, now=now)
                    F[C.F_CONF_FEEDBACK, slot] = out.conf_feedback
                    F[C.F_CONF, slot] = out.confidence
                    F[C.F_T_CONF, slot] = out.t_conf
                    F[C.F_W_REF, slot] = out.w_ref
                    F[C.F_T_REF, slot] = out.t_ref
                    F[C.F_HALF_LIFE, slot] = out.half_life
                    F[C.F_TTL, slot] = out.ttl
                    self._refresh_due(hot, slot)
                    event = (now, ns, id, "feedback", "hot", "hot", reason, out.w_ref, out.confidence,
                             int(I[C.I_ACCESS_COUNT, slot]), cp.type_names[int(I[C.I_TYPE, slot])])
                    fut = self._submit_dirty(hot, extra=lambda conn: conn.execute(EVENT_SQL, event))
                memory = hot.memory(slot, cp, now)
        if fut is not None:
            fut.result()
            return memory

        def change(row: MemoryRow, conn: sqlite3.Connection) -> MemoryRow:
            out = lifetime.apply_feedback(
                cp, type_idx=self._policy.type_index(row.memory_type), conf_llm=row.conf_llm, conf_rule=row.conf_rule,
                conf_feedback=row.conf_feedback, confidence=row.confidence, t_conf=row.t_conf, w_ref=row.w_ref,
                t_ref=row.t_ref, half_life=row.half_life, ctx_mult=row.ctx_mult, ttl_override=row.ttl_seconds,
                positive=positive, strength=strength, implicit=implicit, now=now)
            row.conf_feedback, row.confidence, row.t_conf = out.conf_feedback, out.confidence, out.t_conf
            row.w_ref, row.t_ref, row.half_life, row.ttl = out.w_ref, out.t_ref, out.half_life, out.ttl
            row.due_at = self._due_of(row)
            self._catalog.write_state(conn, row)
            tier = TIER_NAMES[row.tier]
            conn.execute(EVENT_SQL, (now, ns, id, "feedback", tier, tier, reason, out.w_ref, out.confidence,
                                     row.access_count, row.memory_type))
            return row

        return self._memory_from_row(self._update_row(ns, id, change), now)

    def pin(self, ns: str, id: str, pinned: bool = True) -> None:
        """Exempt a memory from every expiry (or, ``pinned=False``, end the
        exemption), in any tier. Durable when it returns."""
        self._check_writable()
        check_namespace(ns)
        check_id(id)
        if not isinstance(pinned, bool):
            raise InvalidInputError(f"pinned must be True or False, got {pinned!r}")
        now = self._time.now()
        kind = "pin" if pinned else "unpin"
        hot = self._hot.ensure(ns)
        fut = None
        with hot.lock.read():
            slot = hot.slot_of.get(id)
            if slot is not None:
                with hot.access_lock:
                    hot.I[C.I_PINNED, slot] = 1 if pinned else 0
                    self._refresh_due(hot, slot)
                    event = (now, ns, id, kind, "hot", "hot", "explicit", None, float(hot.F[C.F_CONF, slot]),
                             int(hot.I[C.I_ACCESS_COUNT, slot]), self._cp.type_names[int(hot.I[C.I_TYPE, slot])])
                    fut = self._submit_dirty(hot, extra=lambda conn: conn.execute(EVENT_SQL, event))
        if fut is not None:
            fut.result()
        else:
            self._update_row(ns, id, lambda row, conn: self._pin_in_catalog(row, conn, pinned, now))
        if self._trace is not None:
            self._trace.write("pin", now, ns=ns, id=id, pinned=pinned)

    def _pin_in_catalog(self, row: MemoryRow, conn: sqlite3.Connection, pinned: bool, now: float) -> MemoryRow:
        row.pinned = pinned
        row.due_at = self._due_of(row)
        self._catalog.write_state(conn, row)
        tier = TIER_NAMES[row.tier]
        conn.execute(EVENT_SQL, (now, row.ns, row.id, "pin" if pinned else "unpin", tier, tier, "explicit", None,
                                 row.confidence, row.access_count, row.memory_type))
        return row

    def _refresh_due(self, hot: HotNamespace, s: int) -> None:
        """Recompute slot ``s``'s due time and mark it dirty (hold access_lock)."""
        F, I = hot.F, hot.I
        F[C.F_DUE, s] = lifetime.due_at(
            self._cp, TIER_HOT, bool(I[C.I_PINNED, s]), F[C.F_W_REF, s], F[C.F_T_REF, s], F[C.F_HALF_LIFE, s],
            F[C.F_TTL_ANCHOR, s] + F[C.F_TTL, s], F[C.F_CONF, s], F[C.F_T_CONF, s],
        )
        I[C.I_DIRTY, s] = 1

    def delete(self, ns: str, id: str) -> bool:
        """Forget a memory for good, from any tier. Returns False if there was none.

        The catalog forgets it at once. An archived memory's record also sits
        in its archive object, with others: the object is marked and the next
        sweep rewrites it without the record (:meth:`compact_cold` does it now).
        Until then a tombstone object in the object store names the memory, so
        that :meth:`rebuild_catalog` does not bring it back (if that write
        fails, the next sweep writes it)."""
        self._check_writable()
        check_namespace(ns)
        check_id(id)
        now = self._time.now()
        self._hot.ensure(ns)

        def write(conn: sqlite3.Connection) -> tuple[MemoryRow | None, str | None]:
            row = self._catalog.row_in(conn, ns, id)
            if row is None:
                return None, None
            conn.execute("DELETE FROM memories WHERE rid = ?", (row.rid,))
            conn.execute("DELETE FROM cold_text WHERE rowid = ?", (row.rid,))
            if row.cold_key:
                conn.execute(MARK_PURGE_SQL, (row.cold_key,))
            has_record = row.cold_key is not None or row.rid in tombstones.stale_rids(conn, ns)
            stone = tombstones.note_deletion(conn, ns, id, now) if has_record else None
            conn.execute(EVENT_SQL, (now, ns, id, "delete", TIER_NAMES[row.tier], None, "explicit",
                                     lifetime.weight_at(row.w_ref, row.t_ref, row.half_life, now), row.confidence,
                                     row.access_count, row.memory_type))
            return row, stone

        with self._hot.guard(ns) as space:
            row, stone = self._catalog.write(write)
            crash_point("delete.after_commit")
            if row is not None and space is not None:
                slot = space.slot_of.get(id)
                if slot is not None:
                    space.remove([slot])
        if stone is not None:
            self._migrator.write_tombstones()
        if row is not None and row.cold_key:
            self._migrator.collect_archives({row.cold_key})
        if self._trace is not None and row is not None:
            self._trace.write("delete", now, ns=ns, id=id)
        return row is not None

    # ------------------------------------------------------------------ context

    def set_context(self, ns: str, tags: Iterable[str]) -> None:
        """Set the namespace's active context. Memories matched by context rules
        get their TTL and half-life rescaled now (one kernel pass); searches
        without ``context_tags`` use this context."""
        self._check_writable()
        check_namespace(ns)
        new_tags = check_tags(tags, 1024)
        ctx = self._cp.context(new_tags)
        now = self._time.now()
        hot = self._hot.ensure(ns)
        cp = self._cp
        with hot.lock.read():
            with hot.access_lock:
                n = hot.n
                mult = context_multipliers(hot.tags, n, ctx.ttl_tags, ctx.ttl_mult)
                old = hot.F[C.F_CTX_MULT, :n]
                changed = np.flatnonzero((mult != old) & (hot.I[C.I_ALIVE, :n] != 0))
                if changed.size:
                    F = hot.F
                    w, t, h, ttl = rescale_lifetimes(F[C.F_W_REF, changed], F[C.F_T_REF, changed],
                                                     F[C.F_HALF_LIFE, changed], F[C.F_TTL, changed],
                                                     old[changed], mult[changed], now)
                    F[C.F_W_REF, changed] = w
                    F[C.F_T_REF, changed] = t
                    F[C.F_HALF_LIFE, changed] = h
                    F[C.F_TTL, changed] = ttl
                    F[C.F_CTX_MULT, changed] = mult[changed]
                    F[C.F_DUE, changed] = due_times(
                        np.full(changed.size, TIER_HOT, np.int64), hot.I[C.I_PINNED, changed], w, t, h,
                        F[C.F_TTL_ANCHOR, changed] + ttl, F[C.F_CONF, changed], F[C.F_T_CONF, changed],
                        cp.conf_half_life, cp.thresholds,
                    )
                    hot.I[C.I_DIRTY, changed] = 1
                def write(conn: sqlite3.Connection) -> None:
                    conn.execute("INSERT INTO contexts (ns, tags) VALUES (?, ?)"
                                 " ON CONFLICT(ns) DO UPDATE SET tags = excluded.tags", (ns, json.dumps(list(new_tags))))
                    self._rescale_cold_rows(conn, ns, ctx, now)

                fut = self._submit_dirty(hot, extra=write)
                self._contexts[ns] = new_tags
        if fut is not None:
            fut.result()
        if self._trace is not None:
            self._trace.write("set_context", now, ns=ns, tags=list(new_tags))

    def _rescale_cold_rows(self, conn: sqlite3.Connection, ns: str, ctx: Any, now: float) -> None:
        """The warm and cold rows' share of a context change (inside the
        context's transaction): the same rescaling as the hot tier's."""
        rows = [MemoryRow.from_sql(r) for r in conn.execute(
            "SELECT " + ", ".join(MEMORY_COLUMNS) + " FROM memories WHERE ns = ? AND tier != ?", (ns, TIER_HOT))]
        if not rows:
            return
        cp = self._cp
        mult = np.array([cp.ttl_multiplier(ctx, self._vocab.ids(r.tags)) for r in rows])
        old = np.array([r.ctx_mult for r in rows])
        changed = np.flatnonzero(mult != old)
        if not changed.size:
            return
        part = [rows[i] for i in changed.tolist()]
        w, t, h, ttl = rescale_lifetimes(np.array([r.w_ref for r in part]), np.array([r.t_ref for r in part]),
                                         np.array([r.half_life for r in part]), np.array([r.ttl for r in part]),
                                         old[changed], mult[changed], now)
        for r, wi, ti, hi, ttli, m in zip(part, w.tolist(), t.tolist(), h.tolist(), ttl.tolist(),
                                          mult[changed].tolist()):
            r.w_ref, r.t_ref, r.half_life, r.ttl, r.ctx_mult = wi, ti, hi, ttli, m
        for tier in (TIER_WARM, TIER_COLD):
            sel = [r for r in part if r.tier == tier]
            if sel:
                for r, d in zip(sel, self._migrator.due_in_tier(sel, tier).tolist()):
                    r.due_at = d
        for r in part:
            self._catalog.write_state(conn, r)

    def namespaces(self) -> list[str]:
        """The namespaces that hold at least one memory (any tier), sorted."""
        self._check_open()
        return self._catalog.namespaces()

    def get_context(self, ns: str) -> tuple[str, ...]:
        check_namespace(ns)
        return self._contexts.get(ns, ())

    # ------------------------------------------------------------------ flush

    def _submit_dirty(self, hot: HotNamespace, extra: Any = None) -> Any:
        """Queue the namespace's dirty state for the catalog (hold access_lock,
        so queue order is the order the state was taken in)."""
        rows, accesses = hot.take_dirty()
        if not rows and extra is None:
            return None
        if not self.settings.access_log:
            accesses = []

        def write(conn: sqlite3.Connection) -> None:
            if rows:
                conn.executemany(UPDATE_STATE_SQL, rows)
            if accesses:
                conn.executemany(ACCESS_LOG_SQL, accesses)
            if extra is not None:
                extra(conn)

        return self._catalog.submit(write)

    def flush(self) -> None:
        """Write every pending access update to the catalog and wait for it."""
        if self._readonly:
            return  # a reader records no access
        futures = []
        for hot in self._hot.loaded():
            with hot.access_lock:
                fut = self._submit_dirty(hot)
            if fut is not None:
                futures.append(fut)
        for fut in futures:
            fut.result()

    def _flush_loop(self) -> None:
        interval = self.settings.flush_interval_s
        while not self._stop.wait(interval):
            try:
                self.flush()
                self._save_clock()
            except StoreClosedError:
                return
            except Exception:  # noqa: BLE001 - retried on the next tick; close() flushes again
                pass

    # ------------------------------------------------------------------ sweep

    def sweep(self, *, max_items: int | None = None, time_budget_s: float | None = None,
              progress: bool | None = False, dry_run: bool = False) -> SweepReport:
        """One incremental pass of the migrator: apply what is due.

        Reads only memories whose due time has passed (the due index), in
        order, in batches of ``Settings.sweep_batch``; classifies them (keep,
        demote hot→warm, archive →cold, delete); applies the moves (copy,
        commit, remove). Stops after ``max_items`` due memories or
        ``time_budget_s`` seconds. Pinned memories are never due. Archive
        batches a crash interrupted are finished first; archive objects left
        holding stale records (deleted or restored memories) are rewritten
        last (see :meth:`compact_cold`). progress: draw a bar (``None``: when stderr is
        a terminal). dry_run: count what is due and what each memory's action
        would be (``SweepReport`` with ``dry_run=True``), changing nothing.
        Raises ClockSkewError (except a dry run) if the clock failed the check
        at open (see :meth:`open`).
        """
        self._check_open()
        if max_items is not None:
            max_items = check_positive_int(max_items, "max_items")
        time_budget_s = _check_seconds(time_budget_s, "time_budget_s", optional=True)
        if not isinstance(dry_run, bool):
            raise InvalidInputError(f"dry_run must be True or False, got {dry_run!r}")
        if dry_run:
            return self._migrator.preview(max_items, time_budget_s)
        self._check_writable()
        self._require_trusted_clock()
        with self._sweep_lock:
            return self._migrator.sweep(max_items, time_budget_s, progress)

    def compact_cold(self, *, progress: bool | None = False) -> int:
        """Rewrite every archive object that holds records of memories no
        longer archived there (deleted, restored), without them; returns how
        many objects were rewritten. A sweep does this on its own for the
        objects that deletes and restores marked, a bounded number per sweep;
        this also finds unmarked ones (stores from earlier versions).
        Raises CorruptDataError, after rewriting the others, if an object's
        live records fail their checksums (the sweep skips such objects;
        ``verify`` reports them)."""
        self._check_writable()
        with self._sweep_lock:
            try:
                return self._migrator.compact_archives(self._time.now(), everything=True, progress=progress,
                                                       strict=True)
            finally:
                self._migrator.settle_tombstones()

    def restore(self, ns: str, *, ids: Iterable[str] | None = None, where: Mapping[str, Any] | None = None,
                text: str | None = None, query: Any = None, k: int | None = None, limit: int | None = None,
                progress: bool | None = False) -> list[str]:
        """Bring archived memories back to the hot tier; returns their ids.

        ids: these memories (unknown ids raise MemoryNotFoundError; ones not
        cold are skipped). where: a filter — ``memory_type`` (one or a list),
        ``tags`` (all of), ``any_tags``, ``source``, ``created_after`` /
        ``created_before``, ``archived_after`` / ``archived_before`` (POSIX
        seconds, a datetime or ISO 8601). text: keywords, any of them (SQLite
        FTS5 with stemming), the best matches by BM25 first. query: a vector (a text with an embedder):
        the ``k`` archived memories most similar to it (the cold index, then
        their exact similarities; default ``k`` 5), among those the other
        arguments select when given. limit: at most this many. Content and
        embedding come back bit-identical; the memory restarts its TTL, counts
        as recently used (recency, not the access count) and keeps at least
        its type's initial weight.
        """
        self._check_writable()
        check_namespace(ns)
        if ids is None and where is None and text is None and query is None:
            raise InvalidInputError("restore needs ids, where, text or query")
        id_list = None if ids is None else check_id_list(ids)
        if limit is not None:
            limit = check_positive_int(limit, "limit")
        if k is not None:
            if query is None:
                raise InvalidInputError("restore k= goes with query= (restore by meaning); use limit= otherwise")
            k = check_positive_int(k, "k")
        q = None if query is None else check_vector(_embedding.embed_query(self._embedder, query), self.dim, "query")
        if q is not None:
            limit = min(k or 5, limit) if limit is not None else (k or 5)
        if where is not None and not isinstance(where, Mapping):
            raise InvalidInputError("restore where must be a dict")
        with self._sweep_lock:
            restored = self._migrator.restore(ns, ids=id_list, where=None if where is None else dict(where),
                                              text=text, query=q, limit=limit, progress=progress)
        if self._trace is not None:
            self._trace.write("restore", self._time.now(), ns=ns, ids=id_list,
                              where=None if where is None else dict(where), text=text,
                              query=None if q is None else encode_vector(q), limit=limit, restored=restored)
        return restored

    def start_trace(self, path: str | os.PathLike[str]) -> None:
        """Record every call from now on as JSON lines in ``path`` (appended),
        for ``tierstore simulate``. See :mod:`tierstore.trace`."""
        self._check_open()
        self.stop_trace()
        self._trace = TraceWriter(path)

    def stop_trace(self) -> None:
        if self._trace is not None:
            self._trace.close()
            self._trace = None

    def rebuild_catalog(self, *, progress: bool | None = False) -> dict[str, int]:
        """Rebuild the cold catalog from the archive objects in the object
        store alone (after the catalog was lost or damaged); memories whose
        tombstones say they were deleted stay out. Returns counts: objects,
        records, inserted, repointed, skipped, forgotten."""
        self._check_writable()
        with self._sweep_lock:
            return self._migrator.rebuild_cold_catalog(progress)

    def start_migrator(self, *, interval_s: float = 60.0, max_items: int = 10_000,
                       time_budget_s: float = 5.0) -> None:
        """Run sweeps in a background thread every ``interval_s`` seconds (of
        wall-clock time), each bounded by ``max_items`` and ``time_budget_s``.
        It comes back sooner while work remains and backs off after errors.
        Raises ClockSkewError if the clock failed the check at open."""
        self._check_writable()
        interval_s = _check_seconds(interval_s, "interval_s")
        max_items = check_positive_int(max_items, "max_items")
        time_budget_s = _check_seconds(time_budget_s, "time_budget_s")
        self._require_trusted_clock()
        self._migrator.start(interval_s, max_items, time_budget_s)

    def stop_migrator(self, timeout: float = 30.0) -> None:
        """Stop the background migrator (waits for a running sweep)."""
        self._migrator.stop(timeout)

    # ------------------------------------------------------------------ policy

    def _reapply_policy(self, chunk: int = 100_000) -> None:
        """Recompute every memory's half-life, TTL and due time under the
        current policy (after it changed), in chunks, with the kernels.
        Weights are rebased at now so the past is unchanged."""
        cp = self._cp
        now = self._time.now()
        last = 0
        while True:
            rows = self._catalog.query(
                "SELECT rid, memory_type, confidence, ttl_seconds, ctx_mult, w_ref, t_ref, half_life, tier, pinned,"
                " ttl_anchor, t_conf FROM memories WHERE rid > ? ORDER BY rid LIMIT ?", (last, chunk))
            if not rows:
                return
            last = rows[-1][0]
            cols = list(zip(*rows))
            rid = np.array(cols[0], np.int64)
            t_idx = np.array([self._type_idx[t] for t in cols[1]], np.int64)
            conf = np.array(cols[2], np.float64)
            override = np.array([math.nan if x is None else x for x in cols[3]], np.float64)
            ctx_mult = np.array(cols[4], np.float64)
            w = decayed_weight(np.array(cols[5], np.float64), np.array(cols[6], np.float64),
                               np.array(cols[7], np.float64), now)
            h = cp.half_lives(t_idx, conf, ctx_mult)
            ttl = cp.ttls(t_idx, conf, override, ctx_mult)
            t_ref = np.full(len(rows), now)
            due = due_times(np.array(cols[8], np.int64), np.array(cols[9], np.int64), w, t_ref, h,
                            np.array(cols[10], np.float64) + ttl, conf, np.array(cols[11], np.float64),
                            cp.conf_half_life, cp.thresholds)
            updates = [(wi, now, hi, _sql_time(ti), _sql_time(di), ri) for wi, hi, ti, di, ri in
                       zip(w.tolist(), h.tolist(), ttl.tolist(), due.tolist(), rid.tolist())]
            self._catalog.write(lambda conn, updates=updates: conn.executemany(
                "UPDATE memories SET w_ref = ?, t_ref = ?, half_life = ?, ttl = ?, due_at = ? WHERE rid = ?",
                updates))

    def _repair_supersessions(self) -> None:
        """At open: drop the marks of memories that are gone, and finish the
        damping of marked memories a crash left without it (the add had
        committed, its ``_supersede`` had not run): their TTL becomes 0 from
        the mark's time, as it would have (the negative feedback is not
        repeated)."""
        def fix(conn: sqlite3.Connection) -> None:
            supersession.prune_orphans(conn)
            for rid, marked_at in supersession.undamped(conn):
                r = conn.execute("SELECT " + ", ".join(MEMORY_COLUMNS) + " FROM memories WHERE rid = ?",
                                 (rid,)).fetchone()
                row = MemoryRow.from_sql(r)
                row.ttl_seconds, row.ttl = 0.0, 0.0
                row.ttl_anchor = min(row.ttl_anchor, marked_at)
                row.due_at = self._due_of(row)
                self._catalog.write_state(conn, row)
                tier = TIER_NAMES[row.tier]
                conn.execute(EVENT_SQL, (self._time.now(), row.ns, row.id, "supersede", tier, tier,
                                         "damping finished at open", row.w_ref, row.confidence, row.access_count,
                                         row.memory_type))

        self._catalog.write(fix)

    def _repair_never_due(self) -> None:
        """Give a due time to memories stored as never due that are not pinned.
        Versions before due times version 2 stored a memory whose weight or
        confidence was already past a threshold when its state was set (e.g.
        after negative feedback) as never due, so no sweep looked at it
        again. Runs once per store (one scan of the catalog)."""
        rows = self._catalog.select_rows("WHERE m.due_at IS NULL AND m.pinned = 0")
        updates = [(due, r.rid) for r in rows if math.isfinite(due := self._due_of(r))]
        if updates:
            self._catalog.write(lambda conn: conn.executemany("UPDATE memories SET due_at = ? WHERE rid = ?", updates))

    # ------------------------------------------------------------------ stats

    def stats(self, *, lifecycle: bool = True) -> Stats:
        """Counts per tier and type, what is due now, engine figures, and
        (``lifecycle=True``) the lifecycle metrics of :mod:`tierstore.lifecycle`
        — survival per type, access counts at archive or delete, reactivation,
        memory value, tier sizes over time; these read the whole event log."""
        self._check_open()
        self.flush()
        by_tier = {name: 0 for name in TIER_NAMES}
        by_type: dict[str, dict[str, int]] = {}
        total = 0
        for mtype, tier, count in self._catalog.query(
            "SELECT memory_type, tier, count(*) FROM memories GROUP BY memory_type, tier"
        ):
            by_tier[TIER_NAMES[tier]] += count
            by_type.setdefault(mtype, {name: 0 for name in TIER_NAMES})[TIER_NAMES[tier]] = count
            total += count
        pinned = self._catalog.query_one("SELECT count(*) FROM memories WHERE pinned = 1")
        namespaces = self._catalog.query_one("SELECT count(DISTINCT ns) FROM memories")
        return Stats(
            total=total,
            by_tier=by_tier,
            by_type=by_type,
            namespaces=int(namespaces[0]) if namespaces else 0,
            pinned=int(pinned[0]) if pinned else 0,
            due_now=self._catalog.count_due(self._time.now()),
            hot_loaded={h.name: ("hnsw" if h.index is not None else "exact") for h in self._hot.loaded()},
            catalog_commits=self._catalog.commits,
            lifecycle=lifecycle_metrics(self) if lifecycle else {},
        )

    def verify(self) -> Any:
        """Check the catalog, warm shards, hot checkpoints and archive objects
        against their checksums; changes nothing. Returns an
        :class:`tierstore.integrity.IntegrityReport`."""
        self._check_open()
        from . import integrity

        return integrity.verify(self)

    def repair(self) -> Any:
        """Rebuild what the catalog can rebuild (warm shards, hot checkpoints,
        pending archive batches); returns what is still wrong."""
        self._check_writable()
        from . import integrity

        return integrity.repair(self)  # takes the sweep lock itself

    def metrics_text(self) -> str:
        """Counters and gauges in the Prometheus text exposition format."""
        self._check_open()
        from .prometheus import metrics_text

        return metrics_text(self)

    # ------------------------------------------------------------------ close

    def checkpoint(self) -> int:
        """Save every changed hot index to disk; returns how many were saved."""
        self._check_writable()
        return self._hot.checkpoint()

    def close(self) -> None:
        """Flush access updates, checkpoint hot indexes, close the catalog and
        release the store. Idempotent. Calls made from other threads from now
        on raise StoreClosedError; a sweep under way stops after its current
        batch, and a restore, verify or repair under way is waited for."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True  # new calls are refused from here on
            self._migrator.stop()
            with self._sweep_lock:  # what holds it finishes first (a sweep stops between batches)
                self.stop_trace()
                self._stop.set()
                if self._readonly:
                    self._catalog.close()
                    return
                self._flusher.join(timeout=30)
                try:
                    self.flush()
                    self._clock_trusted and self._save_clock()
                    self._hot.checkpoint()
                finally:
                    self._catalog.close()
                    try:
                        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    finally:
                        os.close(self._lock_fd)


def _check_seconds(value: Any, what: str, *, optional: bool = False) -> Any:
    """A positive, finite number of seconds (or None when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 < float(value) < math.inf):
        raise InvalidInputError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


# Version 2: a threshold already crossed when a memory's state was set makes it
# due at that time (version 1 stored such memories as never due).
_DUE_TIMES_VERSION = "2"


def _lock(root: Path) -> int:
    """Take the store's LOCK (an flock, released by the kernel if the process
    dies) and write our pid in it; the error names the holder."""
    lock_fd = os.open(root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(lock_fd, 32, 0).decode("ascii", "replace").strip()
        os.close(lock_fd)
        if holder == str(os.getpid()):
            raise StoreConfigError(f"the store at {root} is already open in this process: use that TierStore, "
                                   "or close it first") from None
        who = f"process {holder}" if holder.isdigit() else "another process"
        raise StoreConfigError(f"the store at {root} is open in {who}; one writer at a time (readers beside it: "
                               "TierStore.open(path, readonly=True); tierstore stats, verify and report)") from None
    os.ftruncate(lock_fd, 0)
    os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
    return lock_fd


def _remove_new_store(root: Path, made_dir: bool) -> None:
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


def _open_cold(root: Path, cold: Any, options: Mapping[str, Any] | None,
               stored: str | None, create: bool = True) -> tuple[ObjectStore, str | None]:
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
                "pass cold= again")
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

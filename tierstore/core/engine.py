"""The engine: the state a store shares between its parts — catalog, hot,
warm and cold tiers, policy (and its compiled form), store time, locks,
settings, the migrator — and the few operations every part uses (checks of
state, the hot tier's dirty state reaching the catalog, reading a catalog row
as a Memory, read-modify-write of a row).

:class:`tierstore.store.TierStore` is the facade over it: it validates and
delegates to the modules named for what they do (:mod:`~tierstore.core.ingest`,
:mod:`~tierstore.core.retrieval`, :mod:`~tierstore.core.reads`,
:mod:`~tierstore.core.updates`, :mod:`~tierstore.core.opening`), and these, like the
migrator, integrity checks, lifecycle metrics and Prometheus export, take the
engine, never the facade. Attribute names are those ``TierStore`` had
(underscored: not API).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierstore import embedding as _embedding
from tierstore.clock import Clock
from tierstore.core.row_ranker import RowRanker
from tierstore.core.store_clock import ClockCheck, StoreClock
from tierstore.core.trace import TraceWriter
from tierstore.errors import (
    ClockSkewError,
    MemoryNotFoundError,
    ReadOnlyStoreError,
    StoreClosedError,
)
from tierstore.kernels import TIER_HOT
from tierstore.kernels import columns as C
from tierstore.policy import Policy
from tierstore.records import TIER_NAMES, Memory, SweepReport
from tierstore.rules import lifetime
from tierstore.rules.scoring import CompiledPolicy
from tierstore.rules.setting_checks import check_bool, check_choice, check_instance, check_int, check_number
from tierstore.rules.tags import TagVocab
from tierstore.rules.validation import CONTENT_MAX_CHARS, load_metadata
from tierstore.storage import ownership
from tierstore.storage.catalog import ACCESS_LOG_SQL, SYNCHRONOUS_MODES, UPDATE_STATE_SQL, Catalog, MemoryRow
from tierstore.storage.objectstore import ObjectStore
from tierstore.tiers.cold import ColdTier
from tierstore.tiers.cold_index import ColdIndex, VectorCache
from tierstore.tiers.hot import HotNamespace, HotSettings, HotTier
from tierstore.tiers.warm import WarmSettings, WarmTier


@dataclass(frozen=True)
class Settings:
    """Engine settings (not lifecycle policy). One comment per value."""

    hot: HotSettings = field(default_factory=HotSettings)
    warm: WarmSettings = field(default_factory=WarmSettings)
    synchronous: str = "NORMAL"  # SQLite: NORMAL survives a process crash, FULL also power loss
    flush_interval_s: float = 1.0  # access updates reach the catalog at least this often
    max_tags_per_memory: int = 64  # tags beyond this are rejected
    max_content_chars: int = CONTENT_MAX_CHARS  # a memory's text (or a text to embed), characters; refused above
    sweep_batch: int = 1000  # due rows read per migrator batch
    access_log: bool = True  # count accesses per memory and day in the catalog (access_log table)
    preload_hot: bool = False  # load every namespace's hot tier at open (default: at its first use)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise InvalidInputError naming the first field out of its range
        (run at construction, and again by ``TierStore.open``: a frozen
        dataclass can still be changed with ``object.__setattr__``):
        ``hot`` a HotSettings and ``warm`` a WarmSettings, each valid;
        ``synchronous`` one of OFF, NORMAL, FULL, EXTRA (any case);
        ``flush_interval_s`` a finite number in (0, threading.TIMEOUT_MAX]
        seconds; ``max_tags_per_memory`` an int >= 0; ``max_content_chars``,
        ``sweep_batch`` ints >= 1; ``access_log``, ``preload_hot`` bools."""
        check_instance("Settings", "hot", self.hot, HotSettings)
        self.hot.validate()
        check_instance("Settings", "warm", self.warm, WarmSettings)
        self.warm.validate()
        check_choice("Settings", "synchronous", self.synchronous, SYNCHRONOUS_MODES)
        # the flusher waits this long between flushes: 0 would spin, above TIMEOUT_MAX the wait raises
        check_number(
            "Settings",
            "flush_interval_s",
            self.flush_interval_s,
            0.0,
            threading.TIMEOUT_MAX,
            lo_open=True,
            unit="seconds",
        )
        check_int("Settings", "max_tags_per_memory", self.max_tags_per_memory, 0)
        check_int("Settings", "max_content_chars", self.max_content_chars, 1)  # 0 would refuse every text
        check_int("Settings", "sweep_batch", self.sweep_batch, 1)  # 0 would make every sweep examine nothing
        check_bool("Settings", "access_log", self.access_log)
        check_bool("Settings", "preload_hot", self.preload_hot)


class Engine:
    """A store's shared state and common operations (see the module doc)."""

    def __init__(
        self,
        *,
        path: Path,
        dim: int,
        policy: Policy,
        clock: Clock,
        settings: Settings,
        catalog: Catalog,
        lock_fd: int,
        cold: ObjectStore,
        clock_check: ClockCheck,
        allow_clock_jump: bool = False,
        store_id: str = "",
        readonly: bool = False,
        embedder: _embedding.Embedder | None = None,
        migrator: Callable[[Engine], Any] | None = None,
    ) -> None:
        self.path = path
        self.embedder = embedder  # text to vectors (None: vectors only)
        self.dim = dim
        self.vector_shape = (dim,)
        self.clock = clock
        record = clock_check.record
        self.store_time = StoreClock(clock, -math.inf if record is None else record.high_water)
        self._clock_check = clock_check
        # A clock that failed the check at open may not sweep, and its readings
        # are not remembered (the next open must see the same disagreement).
        self._clock_trusted = (clock_check.ok or allow_clock_jump) and not readonly
        self._clock_saved = record
        self.readonly = readonly  # opened with readonly=True: it changes nothing
        # a reader of a store an earlier version wrote may find no cold index (it cannot create it)
        self.cold_searchable = catalog.has_table("cold_codes")
        self.settings = settings
        self.catalog = catalog
        self._lock_fd = lock_fd
        self.vocab = TagVocab()
        self.policy = policy
        self.compiled_policy = CompiledPolicy(policy, self.vocab)
        self.hot = HotTier(path / "hot", dim, settings.hot, self.vocab, policy.type_names, catalog)
        self.warm = WarmTier(path / "warm", dim, settings.warm, catalog)
        if not readonly:
            self.warm.remove_orphans()
        self.cold = ColdTier(cold, dim)
        self.cold_index = ColdIndex(catalog.query, dim)
        self.vector_cache = VectorCache()
        # archive objects a cold search could not read (it served the rest): a count and the last 100
        self.cold_search_errors = 0
        self.cold_error_log: list[str] = []
        self.cold_errors_lock = threading.Lock()
        self.store_id = store_id
        self.ownership = ownership.PrefixOwnership(cold, store_id)
        # built by the caller (the migrator module builds on the engine, not the other way round)
        self.migrator: Any = None if migrator is None else migrator(self)
        self.type_idx = {t: i for i, t in enumerate(policy.type_names)}
        self.ranker = RowRanker(
            self.compiled_policy,
            self.vocab,
            self.type_idx,
            lambda row, now: self.memory_from_row(row, now, with_embedding=False),
        )
        self.trace: TraceWriter | None = None
        self.valid_ns: set[str] = set()  # namespaces that passed check_namespace (search fast path)
        self.contexts: dict[str, tuple[str, ...]] = {
            ns: tuple(json.loads(tags)) for ns, tags in catalog.query("SELECT ns, tags FROM contexts")
        }
        self.closed = False
        self._close_lock = threading.Lock()
        self.sweep_lock = threading.Lock()
        self._stop = threading.Event()
        # The newest state write queued by submit_dirty (any thread): a flush
        # waits for it too, since the background flusher may have taken the
        # dirty state a moment before and its write may still be queued.
        self._dirty_tail_lock = threading.Lock()
        self._dirty_tail: Any = None
        self._flusher = threading.Thread(target=self._flush_loop, name="tierstore-access-flusher", daemon=True)
        if not readonly:  # a reader records nothing to flush
            self._flusher.start()

    def check_writable(self) -> None:
        self.check_open()
        if self.readonly:
            raise ReadOnlyStoreError("the store was opened read-only (readonly=True): it changes nothing")

    def now(self) -> float:
        """Store time, POSIX seconds: the clock's reading, never earlier than
        the latest time the store has seen (see :mod:`tierstore.core.store_clock`)."""
        return self.store_time.now()

    @property
    def clock_check(self) -> ClockCheck:
        """How the clock given at open compared with the store's record."""
        return self._clock_check

    def require_trusted_clock(self) -> None:
        if not self._clock_trusted:
            raise ClockSkewError(self._clock_check.reason())

    def save_clock(self) -> None:
        """Remember the high-water mark and the clock's offset (after a
        trusted open, then at most once a second, and at close)."""
        if not self._clock_trusted:
            return
        self.store_time.now()
        rec = self.store_time.record()
        saved = self._clock_saved
        if saved is not None and rec.high_water - saved.high_water < 1.0 and abs(rec.offset - saved.offset) < 1.0:
            return
        self.catalog.submit(
            lambda conn: conn.execute(
                "INSERT INTO meta (key, value) VALUES ('clock', ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (rec.to_json(),),
            )
        )
        self._clock_saved = rec

    def check_open(self) -> None:
        if self.closed:
            raise StoreClosedError("the store is closed")

    def memory_from_row(self, row: MemoryRow, now: float, with_embedding: bool = True) -> Memory:
        conf = lifetime.confidence_at(row.confidence, row.t_conf, self.compiled_policy.conf_half_life, now)
        expires = row.expires_at
        return Memory(
            id=row.id,
            namespace=row.ns,
            content=row.content,
            memory_type=row.memory_type,
            created_at=row.created_at,
            last_accessed_at=row.last_accessed_at,
            access_count=row.access_count,
            confidence=conf,
            source=row.source,
            tags=row.tags,
            ttl_seconds=row.ttl_seconds,
            pinned=row.pinned,
            tier=TIER_NAMES[row.tier],
            weight=lifetime.weight_at(row.w_ref, row.t_ref, row.half_life, now),
            expires_at=expires if math.isfinite(expires) else None,
            due_at=row.due_at if math.isfinite(row.due_at) else None,
            embedding=row.vector() if with_embedding else None,
            metadata=None if row.metadata is None else load_metadata(row.metadata),
        )

    def split_ids(self, ns: str, hot: HotNamespace, ids: Sequence[str]) -> tuple[list[int], list[MemoryRow]]:
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
            found = {
                r.id: r
                for r in self.catalog.select_rows(
                    f"WHERE m.ns = ? AND m.id IN ({','.join('?' * len(uniq))})", (ns, *uniq)
                )
            }
            for mid in others:
                r = found.get(mid)
                if r is None or r.tier == TIER_HOT:
                    # TIER_HOT here: added to the catalog but not yet to the index (a racing add)
                    raise MemoryNotFoundError(f"no memory {mid!r} in namespace {ns!r}")
                rows.append(r)
        return slots, rows

    def update_row(self, ns: str, id: str, change: Any) -> MemoryRow:
        """Read-modify-write one catalog row inside a transaction:
        ``change(row, conn)`` writes its update and returns the new row."""

        def write(conn: sqlite3.Connection) -> MemoryRow:
            row = self.catalog.row_in(conn, ns, id)
            if row is None:
                raise MemoryNotFoundError(f"no memory {id!r} in namespace {ns!r}")
            return change(row, conn)

        return self.catalog.write(write)

    def due_of(self, row: MemoryRow) -> float:
        return lifetime.due_at(
            self.compiled_policy,
            row.tier,
            row.pinned,
            self.compiled_policy.policy.types[row.memory_type].sweep_deletes,
            row.w_ref,
            row.t_ref,
            row.half_life,
            row.expires_at,
            row.confidence,
            row.t_conf,
        )

    def refresh_due(self, hot: HotNamespace, s: int) -> None:
        """Recompute slot ``s``'s due time and mark it dirty (hold access_lock)."""
        F, I = hot.F, hot.I  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
        F[C.F_DUE, s] = lifetime.due_at(
            self.compiled_policy,
            TIER_HOT,
            bool(I[C.I_PINNED, s]),
            bool(self.compiled_policy.deletes_by_type[I[C.I_TYPE, s]]),
            F[C.F_W_REF, s],
            F[C.F_T_REF, s],
            F[C.F_HALF_LIFE, s],
            F[C.F_TTL_ANCHOR, s] + F[C.F_TTL, s],
            F[C.F_CONF, s],
            F[C.F_T_CONF, s],
        )
        I[C.I_DIRTY, s] = 1

    def submit_dirty(self, hot: HotNamespace, extra: Any = None) -> Any:
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

        with self._dirty_tail_lock:  # queued and recorded in one step: the tail is the newest in the queue
            fut = self.catalog.submit(write)
            self._dirty_tail = fut
        return fut

    def flush(self) -> None:
        """Write every pending access update to the catalog and wait for it."""
        if self.readonly:
            return  # a reader records no access
        futures = []
        for hot in self.hot.loaded():
            with hot.access_lock:
                fut = self.submit_dirty(hot)
            if fut is not None:
                futures.append(fut)
        tail = self._dirty_tail
        for fut in futures:
            fut.result()
        # State another thread took before this flush (the background flusher,
        # a feedback) may still be queued: the catalog applies writes in queue
        # order, so once the newest queued one is done all of them are in.
        if tail is not None and all(tail is not f for f in futures):
            try:
                tail.result()
            except Exception:  # noqa: BLE001 - another caller's write: that caller gets its error
                pass

    def _flush_loop(self) -> None:
        interval = self.settings.flush_interval_s
        while not self._stop.wait(interval):
            try:
                self.flush()
                self.save_clock()
            except StoreClosedError:
                return
            except Exception:  # noqa: BLE001 - retried on the next tick; close() flushes again
                pass

    def sweep(
        self, max_items: int | None = None, time_budget_s: float | None = None, progress: bool | None = False
    ) -> SweepReport:
        """One sweep under the sweep lock, with validated arguments (the
        facade's ``sweep`` and the background migrator call this)."""
        self.check_writable()
        self.require_trusted_clock()
        with self.sweep_lock:
            return self.migrator.sweep(max_items, time_budget_s, progress)

    def stop_trace(self) -> None:
        if self.trace is not None:
            self.trace.close()
            self.trace = None

    def close(self) -> None:
        """Flush access updates, checkpoint hot indexes, close the catalog and
        release the store. Idempotent. Calls made from other threads from now
        on raise StoreClosedError; a sweep under way stops after its current
        batch, and a restore, verify or repair under way is waited for."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True  # new calls are refused from here on
            self.migrator.stop()
            with self.sweep_lock:  # what holds it finishes first (a sweep stops between batches)
                self.stop_trace()
                self._stop.set()
                close_files = getattr(self.cold.store, "close_open_files", None)
                if close_files is not None:  # archive files a cold search kept open
                    close_files()
                if self.readonly:
                    self.catalog.close()
                    return
                self._flusher.join(timeout=30)
                try:
                    self.flush()
                    if self._clock_trusted:
                        self.save_clock()
                    self.hot.checkpoint()
                finally:
                    self.catalog.close()
                    try:
                        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    finally:
                        os.close(self._lock_fd)


def engine_of(store: Any) -> Engine:
    """The engine of a :class:`~tierstore.store.TierStore` (or ``store`` itself,
    an engine): the public functions of integrity, lifecycle and prometheus
    take either."""
    return getattr(store, "engine", store)

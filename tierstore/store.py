"""TierStore: the public API (DESIGN §1)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from . import lifetime
from .catalog import INSERT_SQL, UPDATE_STATE_SQL, Catalog, MemoryRow, insert_params
from .clock import Clock, SystemClock
from .errors import (
    DuplicateIdError,
    InvalidInputError,
    MemoryNotFoundError,
    StoreClosedError,
    StoreConfigError,
    UnknownMemoryTypeError,
)
from .hot import HotNamespace, HotSettings, HotTier
from .kernels import (
    ACTION_ARCHIVE,
    ACTION_DELETE,
    ACTION_DEMOTE,
    ACTION_KEEP,
    TIER_COLD,
    TIER_HOT,
    TIER_WARM,
    classify,
    context_multipliers,
    due_times,
    record_accesses,
    rescale_lifetimes,
)
from .kernels import columns as C
from .model import TIER_NAMES, Hit, Memory, Stats, SweepReport
from .policy import Policy
from .scoring import CompiledPolicy
from .tags import TagVocab
from .validation import (
    check_confidence,
    check_id,
    check_id_list,
    check_namespace,
    check_positive_int,
    check_str,
    check_tags,
    check_ttl,
    check_vector,
)
from .warmup import warm_up_kernels

_ADD_KEYS = {"content", "embedding", "memory_type", "confidence", "source", "tags", "ttl_seconds", "pinned", "id"}


@dataclass(frozen=True)
class Settings:
    """Engine settings (not lifecycle policy). One comment per value."""

    hot: HotSettings = field(default_factory=HotSettings)
    synchronous: str = "NORMAL"  # SQLite: NORMAL survives a process crash, FULL also power loss
    flush_interval_s: float = 1.0  # access updates reach the catalog at least this often
    max_tags_per_memory: int = 64  # tags beyond this are rejected
    sweep_batch: int = 1000  # due rows read per migrator batch


class TierStore:
    """A tiered memory store for agents. Open with :meth:`open`.

    Thread-safe: searches run in parallel; adds are group-committed; access
    counts are exact under concurrency.
    """

    def __init__(self, *, path: Path, dim: int, policy: Policy, clock: Clock, settings: Settings,
                 catalog: Catalog, lock_fd: int) -> None:
        self.path = path
        self.dim = dim
        self.clock = clock
        self.settings = settings
        self._catalog = catalog
        self._lock_fd = lock_fd
        self._vocab = TagVocab()
        self._policy = policy
        self._cp = CompiledPolicy(policy, self._vocab)
        self._hot = HotTier(path / "hot", dim, settings.hot, self._vocab, policy.type_names, catalog)
        self._contexts: dict[str, tuple[str, ...]] = {
            ns: tuple(json.loads(tags)) for ns, tags in catalog.query("SELECT ns, tags FROM contexts")
        }
        self._closed = False
        self._close_lock = threading.Lock()
        self._sweep_lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="tierstore-access-flusher", daemon=True)
        self._flusher.start()

    # ------------------------------------------------------------------ open

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, dim: int, policy: Policy | None = None, cold: Any = None,
             clock: Clock | None = None, settings: Settings | None = None) -> "TierStore":
        """Open the store at ``path`` or create it.

        dim: vector dimension (fixed at creation). policy: ``None`` keeps the
        stored policy (the default one for a new store); a different policy
        replaces it and every memory's lifetime is recomputed under it.
        clock: defaults to wall-clock time; pass a :class:`ManualClock` to
        drive time. Only one process may open a store at a time.
        """
        dim = check_positive_int(dim, "dim")
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(root / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise StoreConfigError(f"the store at {root} is open in another process") from None
        catalog: Catalog | None = None
        try:
            settings = settings or Settings()
            catalog = Catalog(root / "catalog.sqlite", synchronous=settings.synchronous)
            stored_dim = catalog.get_meta("dim")
            if stored_dim is not None and int(stored_dim) != dim:
                raise StoreConfigError(f"the store at {root} has dimension {stored_dim}, opened with dim={dim}")
            stored_policy = catalog.get_meta("policy")
            effective = policy or (Policy.from_json(stored_policy) if stored_policy else Policy.default())
            types_in_use = {r[0] for r in catalog.query("SELECT DISTINCT memory_type FROM memories")}
            missing = sorted(types_in_use - set(effective.type_names))
            if missing:
                raise StoreConfigError(
                    f"the policy does not define memory types used in the store: {', '.join(missing)}"
                )
            changed = stored_policy is not None and stored_policy != effective.to_json()
            catalog.set_meta({"dim": str(dim), "policy": effective.to_json(), "schema_version": "1"})
            warm_up_kernels()
            store = cls(path=root, dim=dim, policy=effective, clock=clock or SystemClock(), settings=settings,
                        catalog=catalog, lock_fd=lock_fd)
        except BaseException:
            if catalog is not None:
                catalog.close()
            os.close(lock_fd)
            raise
        if changed:
            store._reapply_policy()
        return store

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

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")

    # ------------------------------------------------------------------ add

    def add(self, ns: str, content: str, embedding: Any, *, memory_type: str = "fact", confidence: float = 0.8,
            source: str = "user_declaration", tags: Iterable[str] = (), ttl_seconds: float | None = None,
            pinned: bool = False, id: str | None = None) -> str:
        """Store one memory and return its id. Durable when it returns.

        embedding: ``dim`` finite numbers, not all zero (stored L2-normalised).
        confidence: the caller's estimate in [0, 1], fused with the source's
        default (see :class:`ConfidencePolicy`). ttl_seconds: overrides the
        type's TTL. pinned: never expires.
        """
        item = {"content": content, "embedding": embedding, "memory_type": memory_type, "confidence": confidence,
                "source": source, "tags": tags, "ttl_seconds": ttl_seconds, "pinned": pinned, "id": id}
        return self._add(ns, [item])[0]

    def add_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        """Store many memories in one transaction (dicts with :meth:`add`'s
        keys). All or nothing: one invalid item rejects the batch."""
        if isinstance(items, Mapping) or not isinstance(items, Sequence):
            raise InvalidInputError("add_batch expects a list of dicts")
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInputError(f"add_batch item {i} is not a dict")
            unknown = set(item) - _ADD_KEYS
            if unknown:
                raise InvalidInputError(f"add_batch item {i}: unknown keys {sorted(unknown)}")
            for required in ("content", "embedding"):
                if required not in item:
                    raise InvalidInputError(f"add_batch item {i}: missing {required!r}")
        return self._add(ns, items)

    def _add(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        self._check_open()
        check_namespace(ns)
        if not items:
            return []
        now = self.clock.now()
        rows, vectors = self._prepare_rows(ns, items, now)
        hot = self._hot.ensure(ns)

        def insert(conn: sqlite3.Connection) -> list[int]:
            rids = []
            for row in rows:
                try:
                    cur = conn.execute(INSERT_SQL, insert_params(row))
                except sqlite3.IntegrityError:
                    raise DuplicateIdError(f"a memory with id {row.id!r} already exists in namespace {ns!r}") from None
                rids.append(int(cur.lastrowid))  # type: ignore[arg-type]
            return rids

        rids = self._catalog.write(insert)
        for row, rid in zip(rows, rids):
            row.rid = rid
        with hot.lock.write():
            hot.add_rows(rows, vectors)
        return [r.id for r in rows]

    def _prepare_rows(self, ns: str, items: Sequence[Mapping[str, Any]], now: float) -> tuple[list[MemoryRow], np.ndarray]:
        cp, pol = self._cp, self._policy
        ctx = cp.context(self._contexts.get(ns, ()))
        rows: list[MemoryRow] = []
        vectors = np.empty((len(items), self.dim), np.float32)
        seen: set[str] = set()
        for i, item in enumerate(items):
            where = "" if len(items) == 1 else f"item {i}: "
            try:
                content = check_str(item["content"], "content")
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
                half_life=half_life, ttl=ttl, ttl_anchor=now, ctx_mult=ctx_mult, due_at=math.inf,
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
               record_access: bool | None = None, explain: bool = False) -> list[Hit]:
        """The ``k`` best memories for ``query``, ranked by the policy's fused score.

        context_tags: the query's context (defaults to the namespace's active
        context); memories sharing tags score higher, context rules and masks
        apply. memory_types / min_confidence filter. record_access: count an
        access on every hit (``None``: the policy's ``scoring.record_access``).
        explain: attach each hit's factor breakdown.
        """
        self._check_open()
        check_namespace(ns)
        q = check_vector(query, self.dim, "query")
        k = check_positive_int(k, "k")
        min_conf = check_confidence(min_confidence, "min_confidence")
        cp = self._cp
        allowed = cp.type_allowed(None if memory_types is None else list(memory_types))
        ctx_tags = (check_tags(context_tags, 1024) if context_tags else ()) or self._contexts.get(ns, ())
        ctx = cp.context(ctx_tags)
        if record_access is None:
            record_access = self._policy.scoring.record_access
        now = self.clock.now()
        hot = self._hot.ensure(ns)
        with hot.lock.read():
            ranked = hot.search(q, k, cp, ctx, allowed, min_conf, now)
            raw = ranked.raw
            snap = hot.snapshot(ranked.slots, raw[:, 2], raw[:, 4], cp)
            hits = [
                Hit(mid, sc, cp.explain(raw[i], ranked.norm[i], sc, "hot") if explain else None, snapshot=snap, j=i)
                for i, (mid, sc) in enumerate(zip(snap.ids, ranked.scores.tolist()))
            ]
            if record_access and ranked.slots.size:
                with hot.access_lock:
                    record_accesses(ranked.slots, now, hot.F, hot.I, cp.boost_by_type, cp.refresh_by_type,
                                    cp.thresholds, cp.conf_half_life)
        return hits

    # ------------------------------------------------------------------ read / update

    def get(self, ns: str, id: str) -> Memory | None:
        """The memory, from any tier, without counting an access; ``None`` if absent."""
        self._check_open()
        check_namespace(ns)
        check_id(id)
        now = self.clock.now()
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

    def _memory_from_row(self, row: MemoryRow, now: float) -> Memory:
        cp = self._cp
        conf = row.confidence
        if math.isfinite(cp.conf_half_life):
            conf *= 2.0 ** (-max(now - row.t_conf, 0.0) / cp.conf_half_life)
        expires = row.expires_at
        return Memory(
            id=row.id, namespace=row.ns, content=row.content, memory_type=row.memory_type,
            created_at=row.created_at, last_accessed_at=row.last_accessed_at, access_count=row.access_count,
            confidence=conf, source=row.source, tags=row.tags, ttl_seconds=row.ttl_seconds, pinned=row.pinned,
            tier=TIER_NAMES[row.tier], weight=lifetime.weight_at(row.w_ref, row.t_ref, row.half_life, now),
            expires_at=expires if math.isfinite(expires) else None,
            due_at=row.due_at if math.isfinite(row.due_at) else None,
            embedding=row.vector(),
        )

    def _hot_slots(self, ns: str, ids: Sequence[str]) -> tuple[HotNamespace, list[int]]:
        """Hot slots of ``ids``; raises MemoryNotFoundError for any that is not hot."""
        hot = self._hot.ensure(ns)
        slots = []
        for mid in ids:
            slot = hot.slot_of.get(mid)
            if slot is None:
                raise MemoryNotFoundError(f"no memory {mid!r} in namespace {ns!r}")
            slots.append(slot)
        return hot, slots

    def touch(self, ns: str, ids: str | Iterable[str]) -> None:
        """Count an access (the memories were used in a response): boosts their
        weight, refreshes TTLs that refresh on read. Unknown ids raise
        MemoryNotFoundError and nothing is counted."""
        self._check_open()
        check_namespace(ns)
        id_list = check_id_list(ids)
        if not id_list:
            return
        now = self.clock.now()
        cp = self._cp
        hot = self._hot.ensure(ns)
        with hot.lock.read():
            _, slots = self._hot_slots(ns, id_list)
            with hot.access_lock:
                record_accesses(np.array(slots, np.int64), now, hot.F, hot.I, cp.boost_by_type,
                                cp.refresh_by_type, cp.thresholds, cp.conf_half_life)

    def feedback(self, ns: str, id: str, *, positive: bool, strength: float = 1.0, implicit: bool = False) -> Memory:
        """Explicit (or, with ``implicit=True``, a smaller implicit) feedback on
        a memory. Positive feedback raises the feedback confidence signal,
        resets confidence decay and boosts the weight by ``boost·strength``;
        negative lowers the signal and scales the weight by
        ``1 - negative_weight_penalty·strength``. The memory's half-life, TTL
        and due time are recomputed for its new confidence. ``strength`` in (0, 1].
        Durable when it returns; returns the updated memory."""
        self._check_open()
        check_namespace(ns)
        check_id(id)
        if not isinstance(positive, bool):
            raise InvalidInputError(f"positive must be True or False, got {positive!r}")
        if isinstance(strength, bool) or not isinstance(strength, (int, float)) or not (0.0 < float(strength) <= 1.0):
            raise InvalidInputError(f"strength must be in (0, 1], got {strength!r}")
        strength = float(strength)
        now = self.clock.now()
        cp, pol = self._cp, self._policy
        cpol = pol.confidence
        hot = self._hot.ensure(ns)
        with hot.lock.read():
            _, (s,) = self._hot_slots(ns, [id])
            with hot.access_lock:
                F, I = hot.F, hot.I
                t_idx = int(I[C.I_TYPE, s])
                step = (cpol.implicit_feedback_step if implicit else cpol.feedback_step) * strength
                llm = None if math.isnan(F[C.F_CONF_LLM, s]) else float(F[C.F_CONF_LLM, s])
                rule = None if math.isnan(F[C.F_CONF_RULE, s]) else float(F[C.F_CONF_RULE, s])
                initial = cpol.feedback_initial
                if initial is None:
                    initial = float(F[C.F_CONF, s])
                fb = lifetime.feedback_signal(F[C.F_CONF_FEEDBACK, s], initial, step, positive)
                conf = pol.fuse_confidence(llm, rule, fb)
                w = lifetime.weight_at(F[C.F_W_REF, s], F[C.F_T_REF, s], F[C.F_HALF_LIFE, s], now)
                if positive:
                    w += float(cp.boost_by_type[t_idx]) * strength
                    F[C.F_T_CONF, s] = now  # reinforced: confidence decay restarts
                else:
                    w *= 1.0 - cpol.negative_weight_penalty * strength
                ctx_mult = float(F[C.F_CTX_MULT, s])
                override = F[C.F_TTL_OVERRIDE, s]
                F[C.F_CONF_FEEDBACK, s] = fb
                F[C.F_CONF, s] = conf
                F[C.F_W_REF, s] = w
                F[C.F_T_REF, s] = now
                F[C.F_HALF_LIFE, s] = cp.half_life(t_idx, conf, ctx_mult)
                F[C.F_TTL, s] = cp.ttl(t_idx, conf, None if math.isnan(override) else float(override), ctx_mult)
                self._refresh_due(hot, s)
                fut = self._submit_dirty(hot)
            memory = hot.memory(s, cp, now)
        if fut is not None:
            fut.result()
        return memory

    def pin(self, ns: str, id: str, pinned: bool = True) -> None:
        """Exempt a memory from every expiry (or, ``pinned=False``, end the
        exemption). Durable when it returns."""
        self._check_open()
        check_namespace(ns)
        check_id(id)
        if not isinstance(pinned, bool):
            raise InvalidInputError(f"pinned must be True or False, got {pinned!r}")
        hot = self._hot.ensure(ns)
        with hot.lock.read():
            _, (s,) = self._hot_slots(ns, [id])
            with hot.access_lock:
                hot.I[C.I_PINNED, s] = 1 if pinned else 0
                self._refresh_due(hot, s)
                fut = self._submit_dirty(hot)
        if fut is not None:
            fut.result()

    def _refresh_due(self, hot: HotNamespace, s: int) -> None:
        """Recompute slot ``s``'s due time and mark it dirty (hold access_lock)."""
        F, I = hot.F, hot.I
        F[C.F_DUE, s] = lifetime.due_at(
            self._cp, TIER_HOT, bool(I[C.I_PINNED, s]), F[C.F_W_REF, s], F[C.F_T_REF, s], F[C.F_HALF_LIFE, s],
            F[C.F_TTL_ANCHOR, s] + F[C.F_TTL, s], F[C.F_CONF, s], F[C.F_T_CONF, s],
        )
        I[C.I_DIRTY, s] = 1

    def delete(self, ns: str, id: str) -> bool:
        """Forget a memory for good. Returns False if there was none."""
        self._check_open()
        check_namespace(ns)
        check_id(id)
        hot = self._hot.ensure(ns)
        with hot.lock.write():
            deleted = self._catalog.write(
                lambda conn: conn.execute("DELETE FROM memories WHERE ns = ? AND id = ?", (ns, id)).rowcount
            )
            slot = hot.slot_of.get(id)
            if slot is not None:
                hot.remove([slot])
        return bool(deleted)

    # ------------------------------------------------------------------ context

    def set_context(self, ns: str, tags: Iterable[str]) -> None:
        """Set the namespace's active context. Memories matched by context rules
        get their TTL and half-life rescaled now (one kernel pass); searches
        without ``context_tags`` use this context."""
        self._check_open()
        check_namespace(ns)
        new_tags = check_tags(tags, 1024)
        ctx = self._cp.context(new_tags)
        now = self.clock.now()
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
                fut = self._submit_dirty(hot, extra=lambda conn: conn.execute(
                    "INSERT INTO contexts (ns, tags) VALUES (?, ?) ON CONFLICT(ns) DO UPDATE SET tags = excluded.tags",
                    (ns, json.dumps(list(new_tags)))))
                self._contexts[ns] = new_tags
        if fut is not None:
            fut.result()

    def get_context(self, ns: str) -> tuple[str, ...]:
        check_namespace(ns)
        return self._contexts.get(ns, ())

    # ------------------------------------------------------------------ flush

    def _submit_dirty(self, hot: HotNamespace, extra: Any = None) -> Any:
        """Queue the namespace's dirty state for the catalog (hold access_lock,
        so queue order is the order the state was taken in)."""
        rows = hot.take_dirty()
        if not rows and extra is None:
            return None

        def write(conn: sqlite3.Connection) -> None:
            if rows:
                conn.executemany(UPDATE_STATE_SQL, rows)
            if extra is not None:
                extra(conn)

        return self._catalog.submit(write)

    def flush(self) -> None:
        """Write every pending access update to the catalog and wait for it."""
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
            except StoreClosedError:
                return
            except Exception:  # noqa: BLE001 - retried on the next tick; close() flushes again
                pass

    # ------------------------------------------------------------------ sweep

    def sweep(self, *, max_items: int | None = None, time_budget_s: float | None = None,
              apply: bool = False) -> SweepReport:
        """Read what is due from the due index and classify it.

        Reads only rows whose due time has passed (never the whole store).
        Until the warm and cold tiers exist, nothing is moved: the report says
        what would be demoted, archived or deleted (``applied=False``).
        """
        self._check_open()
        if max_items is not None:
            max_items = check_positive_int(max_items, "max_items")
        start = time.perf_counter()
        with self._sweep_lock:
            self.flush()
            now = self.clock.now()
            report = SweepReport(now=now, applied=False)
            limit = max_items or self.settings.sweep_batch
            rows = self._catalog.due(now, limit)
            report.examined = len(rows)
            if rows:
                actions = self._classify(rows, now)
                names = {ACTION_KEEP: "kept", ACTION_DEMOTE: "demoted", ACTION_ARCHIVE: "archived",
                         ACTION_DELETE: "deleted"}
                for row, a in zip(rows, actions.tolist()):
                    key = names[a]
                    setattr(report, key, getattr(report, key) + 1)
                    per = report.by_type.setdefault(row.memory_type, {})
                    per[key] = per.get(key, 0) + 1
            report.remaining_due = self._catalog.count_due(now)
            report.elapsed_s = time.perf_counter() - start
            return report

    def _classify(self, rows: Sequence[MemoryRow], now: float) -> np.ndarray:
        cp = self._cp
        return classify(
            now, np.array([r.tier for r in rows], np.int64), np.array([int(r.pinned) for r in rows], np.int64),
            np.array([r.w_ref for r in rows]), np.array([r.t_ref for r in rows]),
            np.array([r.half_life for r in rows]), np.array([r.expires_at for r in rows]),
            np.array([r.confidence for r in rows]), np.array([r.t_conf for r in rows]), cp.conf_half_life,
            cp.thresholds,
        )

    # ------------------------------------------------------------------ policy

    def _reapply_policy(self) -> None:
        """Recompute every memory's half-life, TTL and due time under the
        current policy (after it changed). Weights are rebased at now so the
        past is unchanged."""
        cp = self._cp
        now = self.clock.now()
        rows = self._catalog.query(
            "SELECT rid, memory_type, confidence, ttl_seconds, ctx_mult, w_ref, t_ref, half_life, tier, pinned,"
            " ttl_anchor, t_conf FROM memories"
        )
        updates = []
        for rid, mtype, conf, override, ctx_mult, w_ref, t_ref, h_old, tier, pinned, anchor, t_conf in rows:
            t_idx = self._policy.type_index(mtype)
            h = cp.half_life(t_idx, conf, ctx_mult)
            ttl = cp.ttl(t_idx, conf, override, ctx_mult)
            w = lifetime.weight_at(w_ref, t_ref, h_old, now)
            due = lifetime.due_at(cp, tier, bool(pinned), w, now, h, anchor + ttl, conf, t_conf)
            updates.append((w, now, h, None if math.isinf(ttl) else ttl, None if math.isinf(due) else due, rid))
        if updates:
            self._catalog.write(lambda conn: conn.executemany(
                "UPDATE memories SET w_ref = ?, t_ref = ?, half_life = ?, ttl = ?, due_at = ? WHERE rid = ?",
                updates))

    # ------------------------------------------------------------------ stats

    def stats(self) -> Stats:
        """Counts per tier and type, what is due now, and engine figures."""
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
            due_now=self._catalog.count_due(self.clock.now()),
            hot_loaded={h.name: ("hnsw" if h.index is not None else "exact") for h in self._hot.loaded()},
            catalog_commits=self._catalog.commits,
        )

    # ------------------------------------------------------------------ close

    def checkpoint(self) -> int:
        """Save every changed hot index to disk; returns how many were saved."""
        self._check_open()
        return self._hot.checkpoint()

    def close(self) -> None:
        """Flush access updates, checkpoint hot indexes, close the catalog and
        release the store. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._stop.set()
            self._flusher.join(timeout=30)
            try:
                self.flush()
                self._hot.checkpoint()
            finally:
                self._closed = True
                self._catalog.close()
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                finally:
                    os.close(self._lock_fd)

"""TierStore: the public API (DESIGN §1) — a facade that validates arguments
and delegates to the engine's parts: :mod:`tierstore.core.ingest` (add),
:mod:`tierstore.core.retrieval` (search across tiers), :mod:`tierstore.core.reads`,
:mod:`tierstore.core.updates` (touch, feedback, pin, delete, context),
:mod:`tierstore.core.opening` and :mod:`tierstore.core.upkeep` (sweep,
compact, restore, rebuild). The shared state is a
:class:`tierstore.core.engine.Engine`; no module imports this one but the
package's callers (CLI, server, integrations)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tierstore import embedding as _embedding
from tierstore.analytics.prometheus import metrics_text
from tierstore.clock import Clock
from tierstore.core import ingest, integrity, opening, reads, retrieval, updates, upkeep
from tierstore.core.engine import Engine, Settings
from tierstore.core.store_clock import ClockCheck
from tierstore.core.trace import TraceWriter
from tierstore.policy import Policy
from tierstore.records import Hit, Memory, Stats, SweepReport
from tierstore.rules.validation import (
    check_namespace,
)
from tierstore.storage.objectstore import ObjectStore

__all__ = ["Settings", "TierStore"]


def _delegated(name: str, settable: bool = False) -> property:
    """A property reading (and, ``settable``, writing) the engine's attribute ``name``."""

    def get(self: TierStore) -> Any:
        return getattr(self.engine, name)

    def set_(self: TierStore, value: Any) -> None:
        setattr(self.engine, name, value)

    return property(get, set_ if settable else None, doc=f"The engine's ``{name}``.")


class TierStore:
    """A tiered memory store for agents. Open with :meth:`open`.

    Thread-safe: searches run in parallel; adds are group-committed; access
    counts are exact under concurrency.
    """

    def __init__(self, engine: Engine) -> None:
        """The facade over an open ``engine`` (:meth:`open` makes both)."""
        self.engine = engine

    # the engine's state a caller may read, as the store's attributes (the rest: ``store.engine``)
    path = _delegated("path")
    dim = _delegated("dim")
    clock = _delegated("clock")
    settings = _delegated("settings")
    store_id = _delegated("store_id")
    cold_search_errors = _delegated("cold_search_errors")
    closed = _delegated("closed")

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        dim: int | None = None,
        policy: Policy | None = None,
        cold: str | os.PathLike[str] | ObjectStore | None = None,
        cold_options: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        settings: Settings | None = None,
        allow_clock_jump: bool = False,
        take_over_cold: bool = False,
        readonly: bool = False,
        embedder: Any = None,
    ) -> TierStore:
        """Open the store at ``path`` or create it.

        path: the store's directory (str or path-like).
        dim: vector dimension, required to create a store (then fixed); default None: the stored one, or the embedder's.
        policy: default None keeps the stored policy (the default one for a new store); a different one replaces it.
        cold: where archives go: ``file:///dir``, ``s3://bucket/prefix``, an :class:`ObjectStore`; default <path>/cold.
        cold_options: for ``s3://``: ``endpoint_url``, ``region_name``, client options; default None.
        clock: the time source; default None: wall-clock time (pass a :class:`ManualClock` to drive time).
        settings: engine settings (:class:`Settings`, checked before anything is opened); default None: ``Settings()``.
        allow_clock_jump: let ``sweep`` and the migrator run when the clock fails the check below; default False.
        take_over_cold: hand over an object-store prefix another, stopped, store owns; default False.
        readonly: open as a reader beside the writer (see below); default False.
        embedder: text in: a callable ``list[str] -> float32 (n, dim)`` or ``"minilm"``; default None: vectors only.

        A different policy recomputes every memory's lifetime under it. A
        store reopened without ``cold`` uses the one it was created with.
        Store time never runs backwards (see
        :mod:`tierstore.core.store_clock`): the system clock is checked against
        the store's record, and if it is behind the latest time the store has
        seen, or the store's time was kept by another clock, ``sweep`` and the
        background migrator refuse to run (``ClockSkewError``) unless
        ``allow_clock_jump``. The object store is reached at open (a wrong
        bucket or missing credentials raise StoreConfigError, and a new store
        leaves nothing behind) and claimed for this store alone (see
        :mod:`tierstore.storage.ownership`; ``take_over_cold=True`` hands over a prefix
        another, stopped, store owns). One process at a time; with
        ``readonly=True`` any number of readers beside it (SQLite's WAL): such
        a store never creates or writes anything, takes no lock, and serves
        ``get``, ``search`` (without recording accesses), ``stats``,
        ``verify``, ``metrics_text`` and the report; every call that would
        change something raises ReadOnlyStoreError. With an embedder (the
        ``"minilm"`` one needs the extra ``embed``), ``add``/``add_batch`` embed
        the content when no embedding is given (or embed a str given as the
        embedding), and ``search``/``restore(query=)`` take text (see
        :mod:`tierstore.embedding`). ``dim`` defaults to the embedder's. The
        embedder's name and dim are recorded; opening with another one raises
        StoreConfigError.
        """
        return opening.open_store(
            cls,
            Path(path),
            dim=dim,
            policy=policy,
            cold=cold,
            cold_options=cold_options,
            clock=clock,
            settings=settings,
            allow_clock_jump=allow_clock_jump,
            take_over_cold=take_over_cold,
            readonly=readonly,
            embedder=embedder,
        )

    @property
    def embedder(self) -> _embedding.Embedder | None:
        """The embedder text is turned into vectors with (``None``: vectors only)."""
        return self.engine.embedder

    @property
    def readonly(self) -> bool:
        """Opened with ``readonly=True``: it changes nothing."""
        return self.engine.readonly

    def __enter__(self) -> TierStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"TierStore({str(self.path)!r}, dim={self.dim}, {state})"

    @property
    def policy(self) -> Policy:
        return self.engine.policy

    def now(self) -> float:
        """Store time, POSIX seconds: the clock's reading, never earlier than
        the latest time the store has seen (see :mod:`tierstore.core.store_clock`)."""
        return self.engine.store_time.now()

    @property
    def clock_check(self) -> ClockCheck:
        """How the clock given at open compared with the store's record."""
        return self.engine.clock_check

    # ------------------------------------------------------------------ add

    def add(
        self,
        ns: str,
        content: str,
        embedding: Any = None,
        *,
        memory_type: str = "fact",
        confidence: float = 0.8,
        source: str = "user_declaration",
        tags: Iterable[str] = (),
        ttl_seconds: float | None = None,
        pinned: bool = False,
        id: str | None = None,
        supersedes: Iterable[str] = (),
        key: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Store one memory and return its id. Durable when it returns.

        ns: the namespace (``[A-Za-z0-9_.-]{1,128}``).
        content: the memory's text (at most ``Settings.max_content_chars`` characters).
        embedding: ``dim`` finite numbers, not all zero (stored L2-normalised); default None: content via embedder.
        memory_type: a type the policy defines; default ``"fact"``.
        confidence: the caller's estimate in [0, 1], fused with the source's default; default 0.8.
        source: the memory's origin (the policy may give it a default confidence); default ``"user_declaration"``.
        tags: strings (at most ``Settings.max_tags_per_memory`` distinct ones); default ().
        ttl_seconds: seconds to live, overriding the type's TTL; default None: the type's.
        pinned: never expires; default False.
        id: the memory's id (a non-empty string of at most 256 characters); default None: a new one, 32 hex
            digits, the creation time in milliseconds then 80 random bits (one made in a later millisecond
            sorts after).
        supersedes: ids of memories of the namespace this one replaces (see below); default ().
        key: a slot (1-128 letters, digits, ``_ . : / - @ # +``) whose live memory this one supersedes; default None.
        metadata: the caller's free-form JSON (a dict with string keys, at most 64 KiB as compact JSON); default None.

        With an embedder, ``embedding`` may also be a text to embed. The
        fusion of ``confidence`` with the source's default is described in
        :class:`ConfidencePolicy`. ``supersedes`` ("moved to Osaka" supersedes
        "lives in Lisbon"): each gets a negative feedback of strength 1 and a
        TTL of 0, so it ranks low at once and the next sweep archives it (or
        deletes it, if its confidence fell to the delete bar) even if it is
        used meanwhile; a ``supersede`` event records the pair. Unknown ids
        raise MemoryNotFoundError and nothing is added. ``key``: the slot's
        live memory, if any, is superseded exactly as by ``supersedes``;
        :meth:`get_by_key` reads the slot. A ``supersedes`` that names another
        slot's memory, or not this slot's live one, raises InvalidInputError
        and nothing changes. ``metadata`` (see ``validation.check_metadata``)
        is kept as given through every tier and archive, read back as
        ``Memory.metadata``; not used for ranking or lifetimes.

        By policy (see docs/policy.md): re-adding the content of a live memory
        (normalised) with the same type and key reinforces that memory and
        returns *its* id (``dedupe``; a cold one is restored first), and a new
        memory very similar to live ones of its type supersedes them
        (``types.<t>.supersede_above``), softly: they are marked, damped, due
        at the next sweep, and explicit positive feedback takes it back.
        """
        item = {
            "content": content,
            "embedding": embedding,
            "memory_type": memory_type,
            "confidence": confidence,
            "source": source,
            "tags": tags,
            "ttl_seconds": ttl_seconds,
            "pinned": pinned,
            "id": id,
            "supersedes": supersedes,
            "key": key,
            "metadata": metadata,
        }
        return ingest.add(self.engine, ns, [item])[0]

    def add_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        """Store many memories in one transaction; returns their ids, in the items' order.

        ns: the namespace (``[A-Za-z0-9_.-]{1,128}``).
        items: dicts with :meth:`add`'s keys (``content``, ``embedding``, ``memory_type``, ...), with its defaults.

        All or nothing: one invalid item rejects the batch. Items take effect
        in order: a later item with an earlier one's key supersedes it, a
        later duplicate reinforces it and returns its id."""
        ingest.check_items(items)
        return ingest.add(self.engine, ns, items)

    def upsert_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> list[str]:
        """Store many memories under their ids in one transaction (dicts with
        :meth:`add`'s keys); returns their ids. An item whose id names a
        memory of ``ns`` (in any tier) replaces it: the old version is
        deleted and the new one inserted under the same id in that one
        transaction, so a crash leaves one or the other, never neither. The
        new version is a new memory (counts, weight and lifetime start
        afresh; a ``delete`` event with reason ``replaced``, then a
        ``create``). Items whose ids are new are added. All or nothing, like
        :meth:`add_batch`: one invalid item (or a duplicate id within the
        batch) rejects the batch and changes nothing. Unlike :meth:`add`,
        no item is merged into a duplicate (``dedupe``): each is stored
        under its own id; and a replaced memory's old version is never a
        candidate for automatic supersession.

        Concurrency: the catalog transaction and the hot tier's swap of the
        versions happen under the namespace's write lock, so a concurrent
        ``get`` and a search of the hot tier see the old version or the new
        one, never neither and never both. A search that spans tiers while
        the old version is warm or cold is as consistent as it is with the
        migrator's own moves: the old version is found, or the new one, or,
        in the instant between, a search of the warm tier that started
        before the commit may find neither."""
        ingest.check_items(items)
        return ingest.add(self.engine, ns, items, replace=True)

    def check_batch(self, ns: str, items: Sequence[Mapping[str, Any]]) -> None:
        """Raise the InvalidInputError :meth:`add_batch` would raise for
        ``items`` before writing (their fields and ids within the batch;
        not a clash with an existing id), and change nothing."""
        ingest.check_batch(self.engine, ns, items)

    # ------------------------------------------------------------------ search

    def search(
        self,
        ns: str,
        query: Any,
        *,
        k: int = 5,
        context_tags: Iterable[str] = (),
        memory_types: Iterable[str] | None = None,
        min_confidence: float = 0.0,
        include_warm: bool = True,
        include_cold: bool | str | None = None,
        record_access: bool | None = None,
        explain: bool = False,
        text: str | None = None,
    ) -> list[Hit]:
        """The ``k`` best memories for ``query``, ranked by the policy's fused score.

        ns: the namespace searched.
        query: a finite, non-zero vector of the store's dimension (or, with an embedder, a text), compared by cosine.
        k: how many memories at most (a positive int); default 5.
        context_tags: the query's context; default (): the namespace's active context.
        memory_types: only memories of these types; default None: every type.
        min_confidence: only memories of at least this confidence, in [0, 1]; default 0.0.
        include_warm: also search the warm tier and merge; default True.
        include_cold: also search the cold tier: True, False or ``"auto"``; default None: ``scoring.include_cold``.
        record_access: True counts an access on every hit; default None: as the policy says (below).
        explain: attach each hit's factor breakdown; default False.
        text: the query's words, beside a vector query, for the keyword index; default None.

        query: its length does not matter; a contiguous float32 array is the
        fast path, anything else is converted first. context_tags: memories
        sharing tags score higher, context rules and masks apply.
        memory_types / min_confidence filter. record_access: ``None`` follows
        the policy: ``scoring.record_access`` for hot and warm hits, and for
        cold hits only with ``scoring.record_access_cold`` (off by default: an
        archived memory comes back when it is used (``touch``) or restored,
        not because a search returned it). A warm hit whose access is
        recorded moves back to hot. include_cold: the cold tier holds the
        archived memories, searched by their codes and rescored from their
        archived vectors; ``"auto"`` searches it only when the best hot or
        warm hit's similarity is below the policy's
        ``scoring.cold_similarity_bar``; the policy's ``scoring.include_cold``
        is "auto" by default. A cold hit has ``memory.tier == "cold"``, its
        explanation says why the cold tier was reached, and if its access is
        recorded it is reactivated (back to hot). A superseded memory ranks
        after the memory that superseded it and scores
        ``supersession.superseded_factor`` times its fused score, in every
        tier (archived, it stays a cold hit: true history); with a factor of 1
        (stores created before issue 27) it is never a cold hit. explain: for
        a superseded memory, also what superseded it and how. text: a text
        query's own words are used without it; candidates also come from the
        keyword index over the namespace's memories in every tier, and the
        similarity factor becomes ``(1 - w)·cosine + w·keywords`` (BM25 over
        the query's best: tierstore.core.hybrid) with ``w`` the policy's
        ``scoring.keyword_weight``; explain shows ``keywords``. A text with no
        word to look for (empty, stop words) or whose words match nothing: by
        meaning alone.
        """
        return retrieval.search(
            self.engine,
            ns,
            query,
            k=k,
            context_tags=context_tags,
            memory_types=memory_types,
            min_confidence=min_confidence,
            include_warm=include_warm,
            include_cold=include_cold,
            record_access=record_access,
            explain=explain,
            text=text,
        )  # type: ignore[return-value]

    def search_batch(self, ns: str, queries: Sequence[Any], **options: Any) -> list[list[Hit]]:
        """:meth:`search` (with its keyword ``options``) for each of many query vectors (a list, or a 2-D
        array, one row per query): the hits per query, in order. Every vector is checked before the first
        search, so a bad one raises and nothing changes (a search may record accesses). No text queries."""
        return retrieval.search_batch(self.engine, ns, queries, **options)

    def search_in_memory(self, ns: str, query: Any, **options: Any) -> list[Hit] | None:
        """:meth:`search` (with its keyword ``options``, bar ``explain`` and ``text``), when the hot tier
        alone answers it without waiting; otherwise ``None`` and nothing is done (call :meth:`search`).

        For a server's event loop, which must not block: ``None`` whenever
        the search would embed a text, read the catalog, the warm tier or the
        object store, wait for a writer of the namespace's index, load the
        namespace, or write a trace. Bad input raises as :meth:`search` does.
        An answer is the one :meth:`search` gives (access recording included)."""
        return retrieval.search_in_memory(self.engine, ns, query, **options)

    # ------------------------------------------------------------------ read / update

    def get(self, ns: str, id: str) -> Memory | None:
        """The memory, from any tier, without counting an access; ``None`` if
        absent. Carries its ``key`` and, if it was superseded, ``superseded_by``."""
        return reads.get(self.engine, ns, id)

    def get_by_key(self, ns: str, key: str) -> Memory | None:
        """The live memory of slot ``(ns, key)`` (``add(..., key=key)``), from
        any tier, without counting an access; ``None`` if the slot is empty
        (never used, or its memory was deleted or superseded without a
        successor in the slot)."""
        return reads.get_by_key(self.engine, ns, key)

    def memories(self, ns: str, *, with_embedding: bool = False) -> list[Memory]:
        """Every memory of ``ns``, from any tier, in the order they were added,
        without counting an access, each with its ``key`` and
        ``superseded_by`` as :meth:`get` gives them. ``with_embedding``: include the stored
        vectors (cold memories have none in the catalog: ``None``). Reads the
        whole namespace: meant for listings and exports, not per query."""
        return reads.memories(self.engine, ns, with_embedding=with_embedding)

    def memories_page(
        self, ns: str, *, after: str | None = None, limit: int | None = None, with_embedding: bool = False
    ) -> tuple[list[Memory], str | None]:
        """One page of :meth:`memories`: at most ``limit`` memories of ``ns``
        (``None``: 1000) that come after the cursor ``after`` (``None``: from
        the first) in the same order, and the cursor of the next page
        (``None`` after the last). A cursor is an opaque string, valid for its
        namespace only; anything else raises InvalidInputError. Each page is
        read on its own: memories added meanwhile appear on a later page,
        deleted ones do not, and one replaced by :meth:`upsert_batch` after
        its page was read appears again, as its new version, on a later one."""
        return reads.memories_page(self.engine, ns, after=after, limit=limit, with_embedding=with_embedding)

    def touch(self, ns: str, ids: str | Iterable[str]) -> None:
        """Count an access (the memories were used in a response): boosts their
        weight, refreshes TTLs that refresh on read. A warm memory moves back
        to hot; a cold one is reactivated (read back from its archive, hot
        again, a ``reactivate`` event).
        Unknown ids raise MemoryNotFoundError and nothing is counted. A memory
        that moves between tiers while it is counted (a concurrent sweep or
        restore) is counted where it went; one deleted meanwhile is not."""
        updates.touch(self.engine, ns, ids)

    def feedback(self, ns: str, id: str, *, positive: bool, strength: float = 1.0, implicit: bool = False) -> Memory:
        """Explicit (or, with ``implicit=True``, a smaller implicit) feedback on
        a memory in any tier. Positive feedback raises the feedback confidence
        signal, resets confidence decay and boosts the weight by
        ``boost·strength``; negative lowers the signal and scales the weight by
        ``1 - negative_weight_penalty·strength``. The memory's half-life, TTL
        and due time are recomputed for its new confidence. ``strength`` in
        (0, 1]. Durable when it returns; returns the updated memory. Explicit
        positive feedback on a memory that was superseded *automatically*
        takes that back (see :mod:`tierstore.rules.auto_supersession`): the mark
        goes, its TTL is what it was, and an archived one is restored."""
        return updates.feedback(self.engine, ns, id, positive=positive, strength=strength, implicit=implicit)

    def pin(self, ns: str, id: str, pinned: bool = True) -> None:
        """Exempt a memory from every expiry (or, ``pinned=False``, end the
        exemption), in any tier. Durable when it returns."""
        updates.pin(self.engine, ns, id, pinned)

    def delete(self, ns: str, id: str) -> bool:
        """Forget a memory for good, from any tier. Returns False if there was none.

        The catalog forgets it at once. An archived memory's record also sits
        in its archive object, with others: the object is marked and the next
        sweep rewrites it without the record (:meth:`compact_cold` does it now).
        Until then a tombstone object in the object store names the memory, so
        that :meth:`rebuild_catalog` does not bring it back (if that write
        fails, the next sweep writes it)."""
        return updates.delete(self.engine, ns, id)

    # ------------------------------------------------------------------ context

    def set_context(self, ns: str, tags: Iterable[str]) -> None:
        """Set the namespace's active context. Memories matched by context rules
        get their TTL and half-life rescaled now (one kernel pass); searches
        without ``context_tags`` use this context."""
        updates.set_context(self.engine, ns, tags)

    def namespaces(self) -> list[str]:
        """The namespaces that hold at least one memory (any tier), sorted."""
        self.engine.check_open()
        return self.engine.catalog.namespaces()

    def get_context(self, ns: str) -> tuple[str, ...]:
        check_namespace(ns)
        return self.engine.contexts.get(ns, ())

    # ------------------------------------------------------------------ flush

    def flush(self) -> None:
        """Write every pending access update to the catalog and wait for it."""
        self.engine.flush()

    # ------------------------------------------------------------------ sweep

    def sweep(
        self,
        *,
        max_items: int | None = None,
        time_budget_s: float | None = None,
        progress: bool | None = False,
        dry_run: bool = False,
    ) -> SweepReport:
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
        return upkeep.sweep(self.engine, max_items, time_budget_s, progress, dry_run)

    def compact_cold(self, *, progress: bool | None = False) -> int:
        """Rewrite every archive object that holds records of memories no
        longer archived there (deleted, restored), without them; returns how
        many objects were rewritten. A sweep does this on its own for the
        objects that deletes and restores marked, a bounded number per sweep;
        this also finds unmarked ones (stores from earlier versions).
        Raises CorruptDataError, after rewriting the others, if an object's
        live records fail their checksums (the sweep skips such objects;
        ``verify`` reports them)."""
        return upkeep.compact_cold(self.engine, progress)

    def restore(
        self,
        ns: str,
        *,
        ids: Iterable[str] | None = None,
        where: Mapping[str, Any] | None = None,
        text: str | None = None,
        query: Any = None,
        k: int | None = None,
        limit: int | None = None,
        progress: bool | None = False,
    ) -> list[str]:
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
        return upkeep.restore(
            self.engine, ns, ids=ids, where=where, text=text, query=query, k=k, limit=limit, progress=progress
        )

    def start_trace(self, path: str | os.PathLike[str]) -> None:
        """Record every call from now on as JSON lines in ``path`` (appended),
        for ``tierstore simulate``. See :mod:`tierstore.core.trace`."""
        self.engine.check_open()
        self.stop_trace()
        self.engine.trace = TraceWriter(path)

    def stop_trace(self) -> None:
        self.engine.stop_trace()

    def rebuild_catalog(self, *, progress: bool | None = False) -> dict[str, int]:
        """Rebuild the cold catalog from the archive objects in the object
        store alone (after the catalog was lost or damaged); memories whose
        tombstones say they were deleted stay out, and a statement its record
        says was superseded stays retired. Returns counts: objects, records,
        inserted, repointed, skipped, forgotten, marks."""
        return upkeep.rebuild_catalog(self.engine, progress)

    def start_migrator(self, *, interval_s: float = 60.0, max_items: int = 10_000, time_budget_s: float = 5.0) -> None:
        """Run sweeps in a background thread every ``interval_s`` seconds (of
        wall-clock time), each bounded by ``max_items`` and ``time_budget_s``.
        It comes back sooner while work remains and backs off after errors.
        Raises ClockSkewError if the clock failed the check at open."""
        upkeep.start_migrator(self.engine, interval_s, max_items, time_budget_s)

    @property
    def migrator_running(self) -> bool:
        """Whether background sweeps (:meth:`start_migrator`) are running."""
        return bool(self.engine.migrator.running)

    def stop_migrator(self, timeout: float = 30.0) -> None:
        """Stop the background migrator (waits for a running sweep)."""
        self.engine.migrator.stop(timeout)

    # ------------------------------------------------------------------ stats

    def stats(self, *, lifecycle: bool = True) -> Stats:
        """Counts per tier and type, what is due now, engine figures, and
        (``lifecycle=True``) the lifecycle metrics of :mod:`tierstore.analytics.lifecycle`
        — survival per type, access counts at archive or delete, reactivation,
        memory value, tier sizes over time; these read the whole event log."""
        self.engine.check_open()
        self.flush()
        return reads.stats(self.engine, lifecycle=lifecycle)

    def verify(self) -> Any:
        """Check the catalog, warm shards, hot checkpoints and archive objects
        against their checksums; changes nothing. Returns an
        :class:`tierstore.core.integrity.IntegrityReport`."""
        self.engine.check_open()
        return integrity.verify(self.engine)

    def repair(self) -> Any:
        """Rebuild what the catalog can rebuild (warm shards, hot checkpoints,
        pending archive batches); returns what is still wrong."""
        self.engine.check_writable()
        return integrity.repair(self.engine)  # takes the sweep lock itself

    def metrics_text(self) -> str:
        """Counters and gauges in the Prometheus text exposition format."""
        self.engine.check_open()
        return metrics_text(self.engine)

    # ------------------------------------------------------------------ close

    def checkpoint(self) -> int:
        """Save every changed hot index to disk; returns how many were saved."""
        self.engine.check_writable()
        return self.engine.hot.checkpoint()

    def close(self) -> None:
        """Flush access updates, checkpoint hot indexes, close the catalog and
        release the store. Idempotent. Calls made from other threads from now
        on raise StoreClosedError; a sweep under way stops after its current
        batch, and a restore, verify or repair under way is waited for."""
        self.engine.close()

"""The hot tier: one in-memory index per namespace.

A namespace below ``exact_threshold`` live memories is searched exactly by a
Numba kernel over a contiguous float32 matrix (an empty hnswlib index alone
costs ~2.5 MB); past it, the namespace gets an hnswlib index (inner product on
L2-normalised vectors) whose labels are slot numbers. Metadata lives beside it
as structure-of-arrays columns (``F``, ``I``, ``tags``; see
:mod:`tierstore.kernels.columns`) so the kernels read it without Python objects.

Locking: ``lock`` (readers-writer) guards structure — adding rows, removing,
growing arrays, building or compacting the index; searches and access updates
hold it shared. ``access_lock`` serialises in-place updates of the columns
(accesses, feedback, pins) and the flush that copies dirty rows out, so access
counts are exact under concurrency.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import hnswlib
import numpy as np

from tierstore.errors import CorruptDataError
from tierstore.kernels import columns as C
from tierstore.kernels import inner_products, rank_and_record, top_candidates
from tierstore.records import Explain, Hit, Memory
from tierstore.rules.lifetime import confidence_at, weight_at
from tierstore.rules.scoring import CompiledPolicy, QueryContext
from tierstore.rules.setting_checks import check_hnsw, check_int, check_number
from tierstore.rules.tags import TagVocab
from tierstore.rules.validation import check_vector, load_metadata
from tierstore.storage.catalog import Catalog, MemoryRow, stack_embeddings
from tierstore.storage.faults import crash_point
from tierstore.storage.fileio import fsync_file, sha256_file
from tierstore.storage.heap import release_freed
from tierstore.storage.rwlock import RWLock
from tierstore.tiers.slot_texts import SlotTexts

_INITIAL_CAPACITY = 16
_COUNT_MAX = 2**31 - 1  # the int32 columns' largest access count
# A namespace of fewer slots is never compacted (its dead slots cost less than
# the rebuilds). Low, because a platform's namespaces are many and small:
# memories pass through each one's hot tier every day, and at 256 every
# namespace held up to ~300 slots of arrays (~0.5 MB at 384 dims) for a
# handful of live memories.
_COMPACT_MIN_SLOTS = 2 * _INITIAL_CAPACITY
_THREADED_MIN = 256  # vectors from which an insert or a batch query uses every core


@dataclass(frozen=True)
class HotSettings:
    exact_threshold: int = 2048  # live memories above which a namespace gets an hnswlib index
    hnsw_m: int = 16  # graph degree
    hnsw_ef_construction: int = 200
    hnsw_ef_search: int = 64  # not saved by hnswlib: set again after every load
    compact_dead_fraction: float = 0.5  # rebuild when this share of slots is dead

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise InvalidInputError naming the first field out of its range:
        ``exact_threshold`` an int >= 0; ``hnsw_m`` an int in [2, 10000];
        ``hnsw_ef_construction``, ``hnsw_ef_search`` ints >= 1;
        ``compact_dead_fraction`` a finite number in [0, 1]."""
        check_int("HotSettings", "exact_threshold", self.exact_threshold, 0)
        check_hnsw("HotSettings", self.hnsw_m, self.hnsw_ef_construction, self.hnsw_ef_search)
        check_number("HotSettings", "compact_dead_fraction", self.compact_dead_fraction, 0.0, 1.0)


class RankedSlots(NamedTuple):
    """Result of a hot search, still in slot terms, packed as the kernel
    returns it (see ``R_*`` in :mod:`tierstore.kernels.columns`): column
    ``j`` of ``rf`` holds the j-th hit's score, normalised and raw factors and
    a copy of the ``SNAPSHOT_F`` rows of its ``F`` column; of ``ri``, its slot
    and the ``SNAPSHOT_I`` rows of its ``I`` column."""

    rf: np.ndarray
    ri: np.ndarray
    superseded: int = -1  # how many hits are superseded (R_TTL_OVERRIDE 0); -1: not counted

    @property
    def slots(self) -> np.ndarray:
        return self.ri[C.R_SLOT]

    @property
    def raw(self) -> np.ndarray:
        """Raw factors, ``(m, 5)``."""
        return self.rf[C.R_RAW : C.R_RAW + 5].T

    @property
    def norm(self) -> np.ndarray:
        """Normalised factors, ``(m, 5)``."""
        return self.rf[C.R_NORM : C.R_NORM + 5].T


# RankedSlots in one C call (namedtuple's __new__ and _make are Python code)
_new_tuple = tuple.__new__
_NO_HITS = RankedSlots(np.zeros((C.NRF, 0)), np.zeros((C.NRI, 0), np.int64), 0)


class SlotStrings(NamedTuple):
    """A namespace's per-slot string lists. Search snapshots hold them by
    reference: a slot's entries never change once set, and a compaction
    replaces the lists (and this tuple), so a snapshot keeps the old ones."""

    namespace: str
    ids: list[str | None]
    contents: SlotTexts
    sources: list[str]
    tags: list[tuple[str, ...]]
    metadata: list[str | None]  # compact JSON text, parsed when a Memory is built


class HotSnapshot:
    """Captured state of some hot slots, packed as :class:`RankedSlots`:
    column ``j`` of ``rf``/``ri`` is one slot (its columns and raw factors,
    among them the decayed confidence and the weight, at capture time), with
    the namespace's string lists held by reference (:class:`SlotStrings`).

    As the source of search hits (see :class:`~tierstore.records.Hit`) it
    gives their ``ids`` and ``scores`` (read off the captured columns on
    first use) and ``explains`` (made by the search when asked for);
    ``memory(j)`` builds hit j's Memory on first use, from values the search
    captured."""

    __slots__ = ("strings", "type_names", "rf", "ri", "_ids", "_scores", "explains", "_memories", "_cols")

    def __init__(
        self,
        strings: SlotStrings,
        type_names: Sequence[str],
        rf: np.ndarray,
        ri: np.ndarray,
        scores: list[float] | None = None,
        explains: list[Explain] | None = None,
    ) -> None:
        self.strings = strings
        self.type_names = type_names
        self.rf = rf
        self.ri = ri
        self._ids: Sequence[str] | None = None
        self._scores = scores
        self.explains = explains
        self._memories: list[Memory | None] | None = None
        self._cols: tuple[list[Any], ...] | None = None

    # Ids and scores are read off the columns on first use: right after
    # hnswlib's search every cache is cold, and each step the search itself
    # skips there costs microseconds; a caller pays them when it reads.

    @property
    def ids(self) -> Sequence[str]:
        """The hits' ids, fetched from the namespace's id list on first read
        (itemgetter fetches them in one C loop, where the cache misses of a
        large list overlap; a comprehension would take them in turn)."""
        ids = self._ids
        if ids is None:
            slots = self.ri[C.R_SLOT].tolist()
            every = self.strings.ids
            ids = self._ids = itemgetter(*slots)(every) if len(slots) > 1 else tuple(every[s] for s in slots)
        return ids

    @property
    def scores(self) -> list[float]:
        scores = self._scores
        if scores is None:
            scores = self._scores = self.rf[C.R_SCORE].tolist()
        return scores

    def memory(self, j: int) -> Memory:
        """Hit j's Memory (built on first use, then kept)."""
        built = self._memories
        if built is None:
            built = self._memories = [None] * self.rf.shape[1]
        m = built[j]
        if m is None:
            m = built[j] = self.build(j)
        return m

    def content(self, j: int) -> str:
        """Hit j's text, without building its Memory."""
        return self.strings.contents[int(self.ri[C.R_SLOT, j])]

    def metadata(self, j: int) -> dict[str, Any] | None:
        """Hit j's metadata (a fresh dict; ``None``: none), without building its Memory."""
        meta = self.strings.metadata[int(self.ri[C.R_SLOT, j])]
        return None if meta is None else load_metadata(meta)

    def _columns(self) -> tuple[list[Any], ...]:
        """The columns a Memory is built from, as lists, every hit's at once:
        a caller that reads one hit's memory usually reads them all (an
        adapter, the server), and five conversions cost what five per hit did."""
        cols = self._cols
        if cols is None:
            rf, ri = self.rf, self.ri
            cols = self._cols = (
                rf[C.R_F :].T.tolist(),  # per hit: C.SNAPSHOT_F
                ri[C.R_I : C.R_BEFORE].T.tolist(),  # per hit: C.SNAPSHOT_I
                ri[C.R_SLOT].tolist(),
                rf[C.R_RAW + 2].tolist(),  # confidence, decayed
                rf[C.R_RAW + 4].tolist(),  # weight
            )
        return cols

    def build(self, j: int, embedding: np.ndarray | None = None) -> Memory:
        snap_f, snap_i, slots, confidence, weight = self._columns()
        created, last_access, ttl, anchor, due, override = snap_f[j]
        type_idx, access_count, pinned = snap_i[j]
        s = slots[j]
        expires = anchor + ttl
        strings = self.strings
        return Memory(
            id=strings.ids[s],
            namespace=strings.namespace,
            content=strings.contents[s],
            memory_type=self.type_names[type_idx],
            created_at=created,
            last_accessed_at=last_access,
            access_count=access_count,
            confidence=confidence[j],
            source=strings.sources[s],
            tags=strings.tags[s],
            ttl_seconds=None if math.isnan(override) else override,
            pinned=pinned != 0,
            tier="hot",
            weight=weight[j],
            expires_at=expires if math.isfinite(expires) else None,
            due_at=due if math.isfinite(due) else None,
            embedding=embedding,
            metadata=None if (meta := strings.metadata[s]) is None else load_metadata(meta),
        )


def columns_from_rows(
    rows: Sequence[MemoryRow], type_idx: dict[str, int], tag_ids: Sequence[Sequence[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernel columns ``(F, I, tags)`` for catalog rows, one column per row
    (the layout of :mod:`tierstore.kernels.columns`)."""
    k = len(rows)
    nan = math.nan
    # one conversion of every row's floats (a column assignment per row costs several times more)
    F = np.empty((C.NF, k), np.float64, order="F")
    F[:] = (
        np.array(
            [
                (
                    r.created_at,
                    r.last_accessed_at,
                    r.w_ref,
                    r.t_ref,
                    r.half_life,
                    r.confidence,
                    r.t_conf,
                    r.ttl,
                    r.ttl_anchor,
                    r.due_at,
                    r.ctx_mult,
                    nan if r.conf_llm is None else r.conf_llm,
                    nan if r.conf_rule is None else r.conf_rule,
                    nan if r.conf_feedback is None else r.conf_feedback,
                    nan if r.ttl_seconds is None else r.ttl_seconds,
                )
                for r in rows
            ],
            np.float64,
        )
        .reshape(k, C.NF)
        .T
    )
    I = np.zeros((C.NI, k), np.int32, order="F")  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
    I[C.I_TYPE] = [type_idx[r.memory_type] for r in rows]
    # int32 columns: a count the catalog holds above 2**31 - 1 (never reached by counting) is held at it
    I[C.I_ACCESS_COUNT] = I[C.I_FLUSHED_COUNT] = [min(r.access_count, _COUNT_MAX) for r in rows]
    I[C.I_PINNED] = [1 if r.pinned else 0 for r in rows]
    I[C.I_ALIVE] = 1
    width = max((len(t) for t in tag_ids), default=0)
    tags = np.full((k, max(width, 1)), -1, np.int32)
    for j, t in enumerate(tag_ids):
        if t:
            tags[j, : len(t)] = t
    return F, I, tags


# hnswlib's fixed allocation per index: 65 536 label-operation mutexes of 40 bytes (glibc's std::mutex)
_GRAPH_FIXED_BYTES = 65_536 * 40


def graph_bytes(capacity: int, count: int, dim: int, m: int) -> int:
    """Resident bytes of an hnswlib graph, estimated from its layout
    (hnswalg.h) for ``capacity`` elements allocated, ``count`` stored, float32
    vectors of ``dim`` and degree ``m``: per allocated element its lock and
    level (constructed up front); per stored element its level-0 record
    (vector, 2·m links and their count, label), link-list pointer,
    visited-list entry, upper levels (1/(m-1) of a level on average, m links
    each) and label-map node; plus the fixed label locks. The level-0 block
    of the slots not yet used is allocated but not touched, so not resident."""
    per_slot = 40 + 4
    per_item = dim * 4 + 2 * m * 4 + 4 + 8 + 8 + 2 + (m * 4 + 4) / max(1, m - 1) + 40
    return int(capacity * per_slot + count * per_item) + _GRAPH_FIXED_BYTES


class HotNamespace:
    """Hot memories of one namespace."""

    def __init__(self, name: str, dim: int, settings: HotSettings, vocab: TagVocab, type_names: Sequence[str]) -> None:
        self.name = name
        self._type_idx = {t: i for i, t in enumerate(type_names)}
        self.dim = dim
        self.settings = settings
        self.vocab = vocab
        self.lock = RWLock()
        self.access_lock = threading.Lock()
        self.n = 0  # slots used (live + dead)
        self.live = 0
        self.cap = 0
        self.F = np.zeros((C.NF, 0), np.float64, order="F")
        self.I = np.zeros((C.NI, 0), np.int32, order="F")
        self.tags = np.full((0, 4), -1, np.int32)
        self.rids = np.zeros(0, np.int64)
        self._every_slot = np.zeros(0, np.int64)  # see slot_range
        self.ids: list[str | None] = []
        self.contents = SlotTexts()
        self.sources: list[str] = []
        self.tag_names: list[tuple[str, ...]] = []
        self.metadata: list[str | None] = []
        self.strings = SlotStrings(name, self.ids, self.contents, self.sources, self.tag_names, self.metadata)
        self.slot_of: dict[str, int] = {}
        self.vectors: np.ndarray | None = np.zeros((0, dim), np.float32)
        self.index: hnswlib.Index | None = None
        self.changes_since_checkpoint = 0

    # -- structure (callers hold lock.write()) ------------------------------

    def grow(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(_INITIAL_CAPACITY, self.cap)
        while cap < need:
            # a quarter more each time, not double: the graph allocates every slot of its capacity up
            # front (~1.7 KB at 384 dims), so doubling left up to half of a large namespace's graph unused
            cap = max(cap + _INITIAL_CAPACITY, cap + cap // 4)
        F = np.zeros((C.NF, cap), np.float64, order="F")
        F[:, : self.n] = self.F[:, : self.n]
        I = np.zeros((C.NI, cap), np.int32, order="F")  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
        I[:, : self.n] = self.I[:, : self.n]
        tags = np.full((cap, self.tags.shape[1]), -1, np.int32)
        tags[: self.n] = self.tags[: self.n]
        rids = np.zeros(cap, np.int64)
        rids[: self.n] = self.rids[: self.n]
        self.F, self.I, self.tags, self.rids = F, I, tags, rids
        self.contents.reserve(cap)
        if self.vectors is not None:
            vec = np.zeros((cap, self.dim), np.float32)
            vec[: self.n] = self.vectors[: self.n]
            self.vectors = vec
        if self.index is not None and self.index.get_max_elements() < cap:
            self.index.resize_index(cap)
        self.cap = cap

    def slot_range(self) -> np.ndarray:
        """Slots ``0 .. n - 1`` (int64): an exact search's candidates when it
        wants every slot. Made on first use and kept (a namespace searched by
        its graph never pays 8 bytes a slot for it)."""
        every = self._every_slot
        if every.shape[0] < self.n:
            every = self._every_slot = np.arange(max(self.n, self.cap), dtype=np.int64)
        return every[: self.n]

    def _widen_tags(self, width: int) -> None:
        if width <= self.tags.shape[1]:
            return
        new_w = self.tags.shape[1]
        while new_w < width:
            new_w *= 2
        tags = np.full((self.tags.shape[0], new_w), -1, np.int32)
        tags[:, : self.tags.shape[1]] = self.tags
        self.tags = tags

    def add_rows(
        self, rows: Sequence[MemoryRow], vectors: np.ndarray | None, slots: Sequence[int] | None = None
    ) -> None:
        """Insert memories (hold ``lock.write()``). ``vectors`` are normalised
        float32 rows. ``slots`` places rows at given slots of a reloaded
        checkpoint whose index already holds their vectors (``vectors`` is then
        ``None``); by default rows are appended."""
        if not rows:
            return
        k = len(rows)
        if slots is None:
            slot_arr = np.arange(self.n, self.n + k, dtype=np.int64)
        else:
            slot_arr = np.asarray(slots, dtype=np.int64)
        top = int(slot_arr.max()) + 1
        self.grow(top)
        tag_ids = [self.vocab.ids(r.tags) for r in rows]
        self._widen_tags(max((len(t) for t in tag_ids), default=0))
        self._pad_strings(top)
        F, I, tags = columns_from_rows(rows, self._type_idx, tag_ids)  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
        self.F[:, slot_arr] = F
        self.I[:, slot_arr] = I
        self.tags[slot_arr, :] = -1
        self.tags[slot_arr, : tags.shape[1]] = tags
        for r, s in zip(rows, slot_arr.tolist()):
            self.rids[s] = r.rid
            self.ids[s] = r.id
            self.contents[s] = r.content
            self.sources[s] = r.source
            self.tag_names[s] = tuple(r.tags)
            self.metadata[s] = r.metadata
            self.slot_of[r.id] = s
        if vectors is not None:
            if self.index is not None:
                self.index.add_items(vectors, slot_arr, num_threads=build_threads(k))
            else:
                assert self.vectors is not None
                self.vectors[slot_arr] = vectors
        self.n = max(self.n, top)
        self.live += k
        self.changes_since_checkpoint += k
        if self.index is None and self.live > self.settings.exact_threshold:
            self._build_index()

    def _pad_strings(self, top: int) -> None:
        """The per-slot string lists long enough for slots below ``top`` (new slots empty)."""
        while len(self.ids) < top:
            self.ids.append(None)
            self.sources.append("")
            self.tag_names.append(())
            self.metadata.append(None)

    def stage_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """Insert normalised float32 ``vectors`` into the index at the next
        slots, not live yet (hold ``lock.write()``; an indexed namespace
        only), and return those slots: the graph insert, the costly part of
        an add, then runs while the rows' commit is in flight. Afterwards
        :meth:`add_rows` with ``slots=`` makes the committed rows live and
        :meth:`discard_staged` drops the others (dead slots, as removed ones)."""
        assert self.index is not None, "stage_vectors: an indexed namespace only"
        k = vectors.shape[0]
        slots = np.arange(self.n, self.n + k, dtype=np.int64)
        top = self.n + k
        self.grow(top)
        self._pad_strings(top)
        self.index.add_items(vectors, slots, num_threads=build_threads(k))
        self.n = top  # the slots are taken whatever the commit decides: a later add never reuses a graph label
        return slots

    def discard_staged(self, slots: Sequence[int]) -> None:
        """Drop staged slots no row took (hold ``lock.write()``): the commit
        failed, or the row merged into a duplicate. They stay dead slots."""
        assert self.index is not None
        for s in slots:
            self.index.mark_deleted(int(s))
        self.changes_since_checkpoint += 1

    def _new_index(self, capacity: int) -> hnswlib.Index:
        s = self.settings
        index = hnswlib.Index(space="ip", dim=self.dim)
        index.init_index(
            max_elements=max(capacity, 16),
            M=s.hnsw_m,
            ef_construction=s.hnsw_ef_construction,
            random_seed=100,
            allow_replace_deleted=False,
        )
        index.set_ef(s.hnsw_ef_search)
        index.set_num_threads(1)
        return index

    def _build_index(self) -> None:
        """Move from exact search to an hnswlib index (hold ``lock.write()``)."""
        assert self.vectors is not None
        live = np.flatnonzero(self.I[C.I_ALIVE, : self.n]).astype(np.int64)
        index = self._new_index(self.cap)
        if live.size:
            index.add_items(self.vectors[live], live, num_threads=build_threads(live.size))
        self.index = index
        self.vectors = None
        self.changes_since_checkpoint += 1

    def remove(self, slots: Sequence[int]) -> None:
        """Drop memories from the hot tier (hold ``lock.write()``)."""
        for s in slots:
            if self.I[C.I_ALIVE, s] == 0:
                continue
            self.I[C.I_ALIVE, s] = 0
            self.I[C.I_DIRTY, s] = 0
            mid = self.ids[s]
            if mid is not None and self.slot_of.get(mid) == s:
                del self.slot_of[mid]
            # ids, contents, ... of a dead slot stay until compaction: search
            # snapshots hold these lists by reference.
            if self.index is not None:
                self.index.mark_deleted(int(s))
            self.live -= 1
            self.changes_since_checkpoint += 1
        dead = self.n - self.live
        if self.n >= _COMPACT_MIN_SLOTS and dead > self.settings.compact_dead_fraction * self.n:
            self._compact()

    def _compact(self) -> None:
        """Renumber live slots densely and rebuild the index (hold ``lock.write()``).

        hnswlib keeps deleted nodes in the graph; past a dead fraction they
        slow queries and waste memory, so the namespace is rebuilt."""
        live = np.flatnonzero(self.I[C.I_ALIVE, : self.n]).astype(np.int64)
        had_index = self.index is not None
        if self.index is not None:
            vecs = (
                np.asarray(self.index.get_items(live, return_type="numpy"), np.float32)
                if live.size
                else np.zeros((0, self.dim), np.float32)
            )
        else:
            assert self.vectors is not None
            vecs = self.vectors[live].copy()
        k = live.size
        F = self.F[:, live].copy()
        I = self.I[:, live].copy()  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
        tags = self.tags[live].copy()
        rids = self.rids[live].copy()
        ids = [self.ids[s] for s in live.tolist()]
        contents = SlotTexts.of(self.contents[s] for s in live.tolist())
        sources = [self.sources[s] for s in live.tolist()]
        tag_names = [self.tag_names[s] for s in live.tolist()]
        metadata = [self.metadata[s] for s in live.tolist()]
        self.n = self.live = self.cap = 0
        self.F = np.zeros((C.NF, 0), order="F")
        self.I = np.zeros((C.NI, 0), np.int32, order="F")
        self.tags = np.full((0, tags.shape[1] if tags.ndim == 2 else 4), -1, np.int32)
        self.rids = np.zeros(0, np.int64)
        use_index = k > self.settings.exact_threshold // 2 and self.index is not None
        self.index = None
        self.vectors = np.zeros((0, self.dim), np.float32)
        self.contents = contents  # before grow: it reserves room in the new texts, not in those snapshots hold
        self.grow(max(k, 1))
        self.F[:, :k] = F
        self.I[:, :k] = I
        self.tags[:k] = tags
        self.rids[:k] = rids
        self.ids, self.contents, self.sources, self.tag_names, self.metadata = (
            ids,
            contents,
            sources,
            tag_names,
            metadata,
        )
        self.strings = SlotStrings(self.name, ids, contents, sources, tag_names, metadata)
        self.slot_of = {mid: i for i, mid in enumerate(ids) if mid is not None}
        self.vectors[:k] = vecs
        self.n = self.live = k
        if use_index or k > self.settings.exact_threshold:
            self._build_index()
        self.changes_since_checkpoint += 1
        if had_index:  # the old graph: freed, not yet given back (small arrays are not worth a trim)
            release_freed()

    # -- footprint -------------------------------------------------------------

    def nbytes(self) -> int:
        """Bytes this namespace holds in memory: its columns, texts and ids
        counted exactly, its hnswlib graph estimated from hnswlib's layout
        (:func:`graph_bytes`; hnswlib does not report what it holds). Not
        counted: the Python lists of sources, tags and metadata (shared
        strings and tuples). Read without the lock: a figure, not a snapshot."""
        arrays = (self.F, self.I, self.tags, self.rids, self._every_slot, self.vectors)
        out = sum(a.nbytes for a in arrays if a is not None) + self.contents.nbytes()
        ids = list(self.ids)  # a copy to iterate: a writer may append meanwhile
        out += sys.getsizeof(self.ids) + sys.getsizeof(self.slot_of)
        out += sum(sys.getsizeof(i) for i in ids if i is not None)
        index = self.index
        if index is not None:
            out += graph_bytes(index.get_max_elements(), index.element_count, self.dim, self.settings.hnsw_m)
        return out

    # -- queries (callers hold lock.read()) ----------------------------------

    def search(
        self,
        q: np.ndarray,
        k: int,
        cp: CompiledPolicy,
        ctx: QueryContext,
        type_allowed: np.ndarray,
        min_confidence: float,
        now: float,
        record: bool = False,
    ) -> RankedSlots:
        """Best ``k`` live slots for query ``q`` (hold ``lock.read()``): a
        contiguous float32 vector of the namespace's dimension, not
        necessarily normalised (the kernel divides by its length).
        ``record``: count an access at ``now`` on every hit returned (the
        kernel does it under ``access_lock``, after copying their columns).

        Candidates are the most similar memories, oversampled
        (``k·oversample``, at least ``min_candidates``): all of them in an
        exact namespace, hnswlib's in an indexed one. The fused rerank kernel
        scores, filters and masks them; when filters leave fewer than ``k``,
        the candidate set widens until every live memory has been considered.
        A query the kernel does not rank as given (zero, NaN, inf, or a
        length outside the kernel's band) is checked here, raising
        InvalidVectorError, or normalised and searched again.
        """
        live = self.live
        if live == 0:
            check_vector(q, self.dim, "query")  # no kernel runs to measure it
            return _NO_HITS
        sc = cp.policy.scoring
        want = min(live, max(k * sc.oversample, sc.min_candidates, k))
        index = self.index
        exact = index is None
        qf = ctx.packed[0 if exact else 1]
        sims = inner_products(q, self.vectors, self.n) if exact else None
        while True:
            if index is None:
                assert sims is not None  # computed above when exact
                if want >= live:
                    cand, cand_scores = self.slot_range(), sims
                else:
                    cand = top_candidates(sims, self.I[C.I_ALIVE], self.n, want)
                    cand_scores = sims[cand]
            else:
                try:
                    # k positional: pybind11's keyword parsing costs more than the rest of the call
                    # (1, want) arrays, passed on as they are: a row view costs more than the kernel's reshape
                    cand, cand_scores = index.knn_query(q, want)
                except RuntimeError:
                    # hnswlib could not reach `want` live nodes (many deletions):
                    # score every live slot exactly instead.
                    cand = np.flatnonzero(self.I[C.I_ALIVE, : self.n]).astype(np.int64)
                    cand_scores = np.asarray(index.get_items(cand, return_type="numpy"), np.float32) @ q
                    qf = ctx.packed[0]
                    want = live
            args = (q, cand, cand_scores, self.F, self.I, self.tags, qf, ctx.packed_tags, type_allowed, now)
            if record:  # the accesses of this pass's hits, if it is the last: k of them, or every live slot tried
                with self.access_lock:
                    rf, ri, n2, superseded = rank_and_record(
                        *args, min_confidence, k, k if want < live else 0, cp.access
                    )
            else:
                rf, ri, n2, superseded = rank_and_record(*args, min_confidence, k, -1, cp.access)
            if ri.shape[1] >= k:
                return _new_tuple(RankedSlots, (rf, ri, superseded))
            if not C.QUERY_N2_MIN <= n2 <= C.QUERY_N2_MAX:
                # not ranked as given: raises for zero, NaN, inf; else normalised
                q = check_vector(q, self.dim, "query")
                return self.search(q, k, cp, ctx, type_allowed, min_confidence, now, record)
            if want >= live:
                return _new_tuple(RankedSlots, (rf, ri, superseded))
            want = min(live, want * 4)

    def vector(self, slot: int) -> np.ndarray:
        if self.index is not None:
            return np.asarray(self.index.get_items([int(slot)], return_type="numpy")[0], np.float32)
        assert self.vectors is not None
        return self.vectors[slot].copy()

    def vectors_of(self, slots: np.ndarray) -> np.ndarray:
        if slots.size == 0:
            return np.zeros((0, self.dim), np.float32)
        if self.index is not None:
            return np.asarray(self.index.get_items(slots, return_type="numpy"), np.float32)
        assert self.vectors is not None
        return self.vectors[slots].copy()

    def memory(self, slot: int, cp: CompiledPolicy, now: float, with_embedding: bool = False) -> Memory:
        """A snapshot of the memory in ``slot``."""
        F = self.F
        w = weight_at(float(F[C.F_W_REF, slot]), float(F[C.F_T_REF, slot]), float(F[C.F_HALF_LIFE, slot]), now)
        conf = confidence_at(float(F[C.F_CONF, slot]), float(F[C.F_T_CONF, slot]), cp.conf_half_life, now)
        rf = np.zeros((C.NRF, 1))
        rf[C.R_RAW + 2, 0] = conf
        rf[C.R_RAW + 4, 0] = w
        rf[C.R_F :, 0] = self.F[list(C.SNAPSHOT_F), slot]
        ri = np.zeros((C.NRI, 1), np.int64)
        ri[C.R_SLOT, 0] = slot
        ri[C.R_I : C.R_BEFORE, 0] = self.I[list(C.SNAPSHOT_I), slot]
        ri[C.R_BEFORE, 0] = -1
        return HotSnapshot(self.strings, cp.type_names, rf, ri).build(
            0, embedding=self.vector(slot) if with_embedding else None
        )

    def hits(self, ranked: RankedSlots, cp: CompiledPolicy, explain: bool) -> list[Hit]:
        """The ranked slots as :class:`Hit` objects (hold ``lock.read()``).

        Their Memory snapshots are built on demand from the columns the
        kernel copied and the namespace's string lists, held by reference."""
        rf, ri = ranked.rf, ranked.ri
        n = ri.shape[1]
        if n == 0:
            return []
        if explain:
            scores = rf[C.R_SCORE].tolist()
            explains = list(map(cp.explain, ranked.raw.tolist(), ranked.norm.tolist(), scores, repeat("hot", n)))
            snap = HotSnapshot(self.strings, cp.type_names, rf, ri, scores, explains)
        else:
            snap = HotSnapshot(self.strings, cp.type_names, rf, ri)
        return list(map(Hit, repeat(snap, n), range(n)))

    # -- catalog write-back (callers hold access_lock) -------------------------

    def take_dirty(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """State rows (``catalog.STATE_COLUMNS``, then the rid) of every changed live slot, and the
        accesses counted since the last flush as access-log rows ``(ns, id,
        day, count)``; clears the dirty flags (hold ``access_lock``).

        Column by column, not slot by slot: it runs under the access lock and
        the GIL, which every search of the namespace waits for, and after a
        busy second it has tens of thousands of slots to read."""
        F, I = self.F, self.I  # noqa: E741 (I: the int32 columns beside F, as in HotTier.I)
        dirty = np.flatnonzero(I[C.I_DIRTY, : self.n])
        if dirty.size == 0:
            return [], []
        I[C.I_DIRTY, dirty] = 0
        live = dirty[I[C.I_ALIVE, dirty] != 0]
        if live.size == 0:
            return [], []
        f = F[:, live]
        i = I[:, live]

        def unless(values: np.ndarray, missing: np.ndarray) -> list[Any]:
            out = values.tolist()
            for j in np.flatnonzero(missing).tolist():
                out[j] = None
            return out

        ttl, due, fb, override = f[C.F_TTL], f[C.F_DUE], f[C.F_CONF_FEEDBACK], f[C.F_TTL_OVERRIDE]
        states = list(
            zip(
                f[C.F_LAST_ACCESS].tolist(),
                i[C.I_ACCESS_COUNT].tolist(),
                unless(fb, np.isnan(fb)),
                f[C.F_CONF].tolist(),
                f[C.F_T_CONF].tolist(),
                i[C.I_PINNED].tolist(),
                f[C.F_W_REF].tolist(),
                f[C.F_T_REF].tolist(),
                f[C.F_HALF_LIFE].tolist(),
                unless(ttl, ~np.isfinite(ttl)),
                f[C.F_TTL_ANCHOR].tolist(),
                f[C.F_CTX_MULT].tolist(),
                unless(due, ~np.isfinite(due)),
                unless(override, np.isnan(override)),
                self.rids[live].tolist(),
            )
        )
        delta = i[C.I_ACCESS_COUNT] - i[C.I_FLUSHED_COUNT]
        counted = np.flatnonzero(delta > 0)
        if counted.size == 0:
            return states, []
        slots = live[counted]
        I[C.I_FLUSHED_COUNT, slots] = i[C.I_ACCESS_COUNT, counted]
        ids, name = self.ids, self.name
        days = (f[C.F_LAST_ACCESS, counted] // 86400).astype(np.int64).tolist()
        accesses = [(name, ids[s], d, c) for s, d, c in zip(slots.tolist(), days, delta[counted].tolist())]
        return states, accesses

    # -- checkpoints -------------------------------------------------------------

    def _ckpt_path(self, directory: Path, suffix: str) -> Path:
        """``<directory>/<namespace><suffix>``. Not Path.with_suffix, which would
        replace the part of a dotted namespace after its last dot."""
        return directory / f"{self.name}{suffix}"

    def save_checkpoint(self, directory: Path) -> None:
        """Write the hnswlib index and its slot -> rid map, then a manifest with
        their SHA-256 (hold ``lock.read()``). Exact namespaces need none: their
        vectors come back from the catalog."""
        if self.index is None:
            for suffix in (".hnsw", ".slots", ".json"):
                try:
                    self._ckpt_path(directory, suffix).unlink()
                except FileNotFoundError:
                    pass
            return
        directory.mkdir(parents=True, exist_ok=True)
        tmp_index = self._ckpt_path(directory, ".hnsw.tmp")
        self.index.save_index(str(tmp_index))
        slots = np.where(self.I[C.I_ALIVE, : self.n] != 0, self.rids[: self.n], -1).astype("<i8")
        tmp_slots = self._ckpt_path(directory, ".slots.tmp")
        tmp_slots.write_bytes(slots.tobytes())
        manifest = {
            "format": "tierstore-hot-checkpoint",
            "version": 1,
            "namespace": self.name,
            "dim": self.dim,
            "slots": int(self.n),
            "capacity": int(self.index.get_max_elements()),
            "index_sha256": sha256_file(tmp_index),
            "slots_sha256": hashlib.sha256(slots.tobytes()).hexdigest(),
        }
        for tmp in (tmp_index, tmp_slots):
            fsync_file(tmp)
        os.replace(tmp_index, self._ckpt_path(directory, ".hnsw"))
        os.replace(tmp_slots, self._ckpt_path(directory, ".slots"))
        crash_point("checkpoint.after_index")
        tmp_manifest = self._ckpt_path(directory, ".json.tmp")
        tmp_manifest.write_text(json.dumps(manifest))
        fsync_file(tmp_manifest)
        # The manifest is renamed last: a crash before this leaves the old
        # manifest, whose checksums no longer match, so the files are rebuilt.
        os.replace(tmp_manifest, self._ckpt_path(directory, ".json"))
        self.changes_since_checkpoint = 0

    def load_checkpoint(self, directory: Path) -> tuple[hnswlib.Index, np.ndarray] | None:
        """The checkpointed index and slot -> rid map, or ``None`` if there is
        none. Raises CorruptDataError (naming the file) on a checksum mismatch."""
        mpath = self._ckpt_path(directory, ".json")
        if not mpath.exists():
            return None
        try:
            manifest = json.loads(mpath.read_text())
        except (OSError, ValueError) as exc:
            raise CorruptDataError(f"hot checkpoint manifest {mpath} is unreadable: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("namespace") != self.name:
            raise CorruptDataError(f"hot checkpoint manifest {mpath} belongs to another namespace")
        ipath, spath = self._ckpt_path(directory, ".hnsw"), self._ckpt_path(directory, ".slots")
        for path, key in ((ipath, "index_sha256"), (spath, "slots_sha256")):
            if not path.exists() or sha256_file(path) != manifest.get(key):
                raise CorruptDataError(f"hot checkpoint file {path} fails its checksum")
        if manifest.get("dim") != self.dim:
            raise CorruptDataError(f"hot checkpoint {ipath} has dimension {manifest.get('dim')}, expected {self.dim}")
        slots = np.frombuffer(spath.read_bytes(), dtype="<i8").astype(np.int64)
        index = hnswlib.Index(space="ip", dim=self.dim)
        index.load_index(str(ipath), max_elements=int(manifest["capacity"]))
        index.set_ef(self.settings.hnsw_ef_search)  # ef is not saved by hnswlib
        index.set_num_threads(1)
        return index, slots


def build_threads(n: int) -> int:
    """hnswlib threads for inserting (or querying) ``n`` vectors: all cores for
    big batches (hnswlib releases the GIL), one for small ones (thread start-up
    dominates). A number, never -1: -1 means the index's default, which
    ``_new_index`` sets to 1 for single queries, so -1 inserted on one core."""
    return max(1, os.cpu_count() or 1) if n >= _THREADED_MIN else 1


class HotTier:
    """Every loaded namespace's hot index. Namespaces load lazily from the
    catalog on first use (from a checkpoint when one is valid)."""

    def __init__(
        self,
        directory: Path,
        dim: int,
        settings: HotSettings,
        vocab: TagVocab,
        type_names: Sequence[str],
        catalog: Catalog,
    ) -> None:
        self.directory = directory
        self.dim = dim
        self.settings = settings
        self.vocab = vocab
        self.type_names = tuple(type_names)
        self.catalog = catalog
        self._spaces: dict[str, HotNamespace] = {}
        self._loading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.checkpoint_lock = threading.Lock()  # checkpoint files: one writer, or a reader, at a time
        self.checkpoint_errors: list[str] = []

    def get(self, ns: str) -> HotNamespace | None:
        """The namespace if loaded, else ``None`` (never loads)."""
        return self._spaces.get(ns)

    def loaded(self) -> list[HotNamespace]:
        return list(self._spaces.values())

    @contextmanager
    def guard(self, ns: str) -> Iterator[HotNamespace | None]:
        """Exclusive access to the namespace for a move: yields it with its
        write lock held if loaded; else yields ``None`` while holding its load
        lock, so it cannot load (from a catalog about to change) meanwhile."""
        with self._lock:
            lock = self._loading.setdefault(ns, threading.Lock())
        with lock:
            space = self._spaces.get(ns)
            if space is None:
                yield None
                return
            with space.lock.write():
                yield space

    def ensure(self, ns: str) -> HotNamespace:
        """The namespace, loading it from the catalog on first use."""
        space = self._spaces.get(ns)
        if space is not None:
            return space
        with self._lock:
            lock = self._loading.setdefault(ns, threading.Lock())
        with lock:
            space = self._spaces.get(ns)
            if space is None:
                space = self._load(ns)
                self._spaces[ns] = space
            return space

    def _load(self, ns: str) -> HotNamespace:
        from tierstore.kernels.columns import TIER_HOT

        space = HotNamespace(ns, self.dim, self.settings, self.vocab, self.type_names)
        rows = list(self.catalog.iter_rows(ns, TIER_HOT))
        try:
            ckpt = space.load_checkpoint(self.directory)
        except CorruptDataError as exc:
            # A damaged checkpoint is only a cache: rebuild from the catalog.
            self.checkpoint_errors.append(str(exc))
            ckpt = None
        with space.lock.write():
            if ckpt is None:
                space.add_rows(rows, stack_embeddings([r.embedding for r in rows], self.dim))
                return space
            index, slot_rids = ckpt
            space.index = index
            space.vectors = None
            space.grow(max(len(slot_rids), 1))
            space.n = len(slot_rids)
            rid_slot = {int(r): s for s, r in enumerate(slot_rids.tolist()) if r >= 0}
            known = [(r, rid_slot[r.rid]) for r in rows if r.rid in rid_slot]
            fresh = [r for r in rows if r.rid not in rid_slot]
            used = {s for _, s in known}
            for s in rid_slot.values():
                if s not in used:
                    try:
                        index.mark_deleted(s)
                    except RuntimeError:
                        pass  # already marked in the checkpoint
            space.add_rows([r for r, _ in known], None, slots=[s for _, s in known])
            space.add_rows(fresh, stack_embeddings([r.embedding for r in fresh], self.dim))
            space.changes_since_checkpoint = len(fresh) + (len(rid_slot) - len(used))
        return space

    def checkpoint(self, force: bool = False) -> int:
        """Checkpoint every namespace with unsaved index changes; returns how
        many. One checkpoint at a time (``checkpoint_lock``): two writers would
        share the temporary files, and a reader (``verify``) would see an index
        beside the previous manifest."""
        done = 0
        with self.checkpoint_lock:
            for space in self.loaded():
                if not force and space.changes_since_checkpoint == 0:
                    continue
                with space.lock.read():
                    space.save_checkpoint(self.directory)
                done += 1
        return done

    def drop(self, ns: str) -> None:
        self._spaces.pop(ns, None)

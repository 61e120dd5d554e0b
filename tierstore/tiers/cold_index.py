"""The cold search index: archived memories stay findable by meaning.

An archived memory's vector leaves the catalog, but its 1-bit sign code
(``ceil(dim / 64)`` uint64 words: 48 bytes at 384 dimensions) stays, in the
table ``cold_codes``. A cold search:

1. :meth:`ColdIndex.candidates` scans the namespace's codes by Hamming
   distance (``kernels.hamming_topk``), reads the best
   :func:`first_stage_count` of them again against the float query
   (``kernels.sign_scores``: the codes as ±1 vectors, a far closer estimate
   of the cosine) and keeps the best ``m`` row ids (:func:`candidate_count`);
2. the caller looks their rows up in the catalog, and :func:`exact_candidates`
   reads the candidates' int8 codes (column ``code8``: a float32 scale and
   one int8 per component, :func:`encode_code8`; one query, not kept in
   memory) and keeps the best :func:`exact_count` of them by
   ``kernels.int8_scores`` (within ~0.001 of the cosine), with every
   candidate that has no int8 code (archived before them); each code also
   bounds its cosine (:class:`CodeEstimates`: ``Σ|q_j| · scale / 2``), and
   the caller keeps only the rows whose score may reach the best ``k``
   whatever their exact cosine within those bounds
   (``RowRanker.may_rank``: a few of the 20);
3. :func:`fetch_vectors` reads the exact vectors of those from the archive
   objects (ranged GETs grouped per object, objects fetched concurrently, a
   small cache in front; each vector's bytes alone where the index keeps its
   place, see :meth:`ColdIndex.vector_places`, else its whole record), and
   :func:`exact_rescore` gives the cosine similarities the fused score uses.

Step 2 exists because step 3's reads are the cost: ~100 candidates lie in
~85 archive objects at a platform's scale (one ranged GET each, ~2 ms of
client CPU on S3), ~20 in ~20.

``benchmarks/cold_recall.py`` measured the choices of step 1 (1-bit codes
read in two stages; the default ``m``); see ``docs/benchmarks.md``, "Cold
index recall". ``benchmarks/cold_search_cost.py`` measures what a search
reads.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from tierstore.errors import CorruptDataError, InvalidInputError, InvalidVectorError
from tierstore.kernels import (
    code_words,
    hamming_topk,
    inner_products,
    int8_codes,
    int8_scores,
    sign_code,
    sign_codes,
    sign_scores,
)
from tierstore.rules.validation import check_namespace, check_vector
from tierstore.storage.catalog import COLD_CODES_SCHEMA  # noqa: F401  (re-exported: the table lives in the catalog's schema)
from tierstore.storage.lru import LRU
from tierstore.tiers.cold import ColdTier, Location

# Candidates rescored exactly for a search of k: max(MIN_CANDIDATES,
# OVERSAMPLE * k); recall@10 0.99 on sentence embeddings at m = 100, where
# the Hamming order alone needs m = 400 (docs/benchmarks.md).
OVERSAMPLE = 10
MIN_CANDIDATES = 100
# Rows the Hamming scan hands to the asymmetric stage for m candidates.
FIRST_STAGE_MIN = 1000
FIRST_STAGE_OVERSAMPLE = 10
# Candidates whose exact vectors a search for k hits reads, chosen by their int8 codes among the
# candidate_count(k): max(EXACT_MIN, EXACT_OVERSAMPLE * k). Chosen from measurements made before the
# stage was built: benchmarks/cold_recall.py (docs/benchmarks.md, "Cold index recall") found int8 codes
# rank the exact top 10 within their best 20 (recall@10 1.000 at m = 20 on every data set), and an ad
# hoc count (docs/scale.md) found a user's 100 candidates at day ~280 in 85 archive objects, their best
# 20 in 20 (one ranged GET per object). 2 k keeps that ratio for k > 10. Checked since with
# benchmarks/cold_search_cost.py --ab (100 000 archived, 200 queries): the same hits as reading all 100
# for every query (recall@10 0.996 both), archive objects read per search 64 -> 18 as swept, 8 -> 3 laid out.
EXACT_MIN = 20
EXACT_OVERSAMPLE = 2
# verify(): a stored int8 code decodes to within this cosine of its archived vector, else it is damaged.
CODE8_MIN_COSINE = 0.99

# Threads fetching archive objects at once (fetch_vectors), unless the store reads serially.
FETCH_WORKERS = 8
# Threads of the process's fetch pool, which every search's fetch shares (each uses at most its own
# max_workers of them at once): an object store's latency, not CPU, is what they overlap.
FETCH_POOL_THREADS = 32

_fetch_pool: ThreadPoolExecutor | None = None
_fetch_pool_lock = threading.Lock()


def fetch_pool() -> ThreadPoolExecutor:
    """The process's pool of archive-fetch threads, made on first use.

    One pool for every search: a pool per search started up to
    :data:`FETCH_WORKERS` threads per search and joined them after, CPU an
    object-store search paid on every call. Its idle threads wait; they end
    with the interpreter. A forked child makes its own (the parent's threads
    do not exist there)."""
    global _fetch_pool
    pool = _fetch_pool
    if pool is None:
        with _fetch_pool_lock:
            if _fetch_pool is None:
                _fetch_pool = ThreadPoolExecutor(FETCH_POOL_THREADS, thread_name_prefix="tierstore-cold-fetch")
            pool = _fetch_pool
    return pool


def _forget_fetch_pool() -> None:
    global _fetch_pool, _fetch_pool_lock
    _fetch_pool, _fetch_pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_fetch_pool)

_NO_MASK = np.empty(0, np.int8)
QueryFn = Callable[[str, Sequence[Any]], Sequence[tuple[Any, ...]]]


def candidate_count(k: int) -> int:
    """How many code-scan candidates a search for ``k`` hits rescores exactly."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")
    return max(MIN_CANDIDATES, OVERSAMPLE * int(k))


def exact_count(k: int) -> int:
    """How many of a search's candidates (:func:`candidate_count`) are read exactly: ``max(20, 2 k)``."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")
    return max(EXACT_MIN, EXACT_OVERSAMPLE * int(k))


def first_stage_count(m: int) -> int:
    """How many rows the Hamming scan keeps for :func:`kernels.sign_scores`
    to choose ``m`` candidates from: ``max(1000, 10 m)`` (a few µs of table
    look-ups per hundred rows; the Hamming scan is the cheap, coarse filter)."""
    return max(FIRST_STAGE_MIN, FIRST_STAGE_OVERSAMPLE * int(m))


# ---------------------------------------------------------------------------
# catalog rows


def _finite_matrix(vectors: Any) -> np.ndarray:
    """``vectors`` as a contiguous float32 ``(n, d)`` array, ``d >= 1``, every value finite."""
    try:
        arr = np.ascontiguousarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        raise InvalidVectorError("vectors are not numeric") from None
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise InvalidInputError(f"vectors must have shape (n, d) with d >= 1, got {arr.shape}")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise InvalidVectorError(f"vectors[{bad}] contains NaN or infinite values")
    return arr


def encode_codes(vectors: Any) -> list[bytes]:
    """The sign code of each row of ``vectors`` (``(n, d)``, finite) as the
    ``cold_codes.code`` blob: ``8 · ceil(d / 64)`` bytes, little-endian words."""
    codes = sign_codes(_finite_matrix(vectors)).astype("<u8", copy=False)
    return [row.tobytes() for row in codes]


def code8_size(dim: int) -> int:
    """Bytes of a ``cold_codes.code8`` blob at ``dim`` dimensions: a float32 scale and ``dim`` int8."""
    return 4 + int(dim)


def encode_code8(vectors: Any) -> list[bytes]:
    """The int8 code of each row of ``vectors`` (``(n, d)``, finite) as the
    ``cold_codes.code8`` blob (:func:`code8_size` bytes): the row's scale
    ``s = max|v_i| / 127`` (1 for an all-zero row) as a little-endian
    float32, then ``round(v_i / s)`` as d int8 (``kernels.int8_codes``)."""
    codes, scales = int8_codes(_finite_matrix(vectors))
    head = scales.astype("<f4", copy=False)
    return [head[i].tobytes() + codes[i].tobytes() for i in range(codes.shape[0])]


def decode_code8(blob: Any, dim: int) -> np.ndarray | None:
    """The vector a ``code8`` blob stands for (float32 ``(dim,)``: scale × each
    int8), or None when it is not a code of ``dim`` dimensions (not bytes, the
    wrong length, or a scale that is not a positive finite number)."""
    if not isinstance(blob, bytes) or len(blob) != code8_size(dim):
        return None
    scale = np.frombuffer(blob, "<f4", 1)[0]
    if not (np.isfinite(scale) and scale > 0):
        return None
    return (np.frombuffer(blob, np.int8, dim, 4).astype(np.float32) * scale).astype(np.float32)


# Writes one memory's codes and the place of its vector (rid, ns, code, vector_at, vector_crc, code8).
CODE_SQL = "INSERT OR REPLACE INTO cold_codes (rid, ns, code, vector_at, vector_crc, code8) VALUES (?, ?, ?, ?, ?, ?)"
# Meta ``cold_codes`` once every cold memory has a code and its vector's place
# (stores that said "complete" had codes without places: backfilled again).
CODES_COMPLETE = "placed"


def insert_codes(conn: sqlite3.Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    """Write ``(rid, ns, code)``, ``(rid, ns, code, vector_at, vector_crc)``
    or ``(rid, ns, code, vector_at, vector_crc, code8)`` rows inside the
    caller's transaction (no commit): ``vector_at``, where the embedding
    starts in the memory's record frame, and ``vector_crc``, the CRC32 of its
    bytes (:func:`archive.vector_at`, :func:`archive.vector_crc`; None when
    not known); ``code8``, the int8 code (:func:`encode_code8`; None: not
    kept). A row already there is replaced: rids are never reused, so that is
    the same memory archived again by a retried batch. Every row is checked
    before anything is written."""
    checked = []
    for row in rows:
        if not isinstance(row, tuple) or len(row) not in (3, 5, 6):
            raise InvalidInputError(
                f"a cold code row is (rid, ns, code[, vector_at, vector_crc[, code8]]), got {row!r}"
            )
        rid, ns, code, at, crc, code8 = (*row, None, None, None)[:6]  # the missing ones None
        _check_rid(rid)
        check_namespace(ns)
        if not isinstance(code, bytes) or not code or len(code) % 8:
            raise InvalidInputError(f"the code of rid {rid} must be a non-empty multiple of 8 bytes")
        if (at is None) != (crc is None) or (
            at is not None and not (_is_int(at) and _is_int(crc) and at >= 0 and 0 <= crc < 2**32)
        ):
            raise InvalidInputError(
                f"the vector place of rid {rid} must be two non-negative integers "
                f"(a CRC32 below 2**32) or two Nones, got {(at, crc)!r}"
            )
        if code8 is not None and (not isinstance(code8, bytes) or len(code8) < 5):
            raise InvalidInputError(f"the int8 code of rid {rid} must be None or a scale and components (bytes)")
        checked.append((int(rid), ns, code, None if at is None else int(at), None if crc is None else int(crc), code8))
    conn.executemany(CODE_SQL, checked)


def delete_codes(conn: sqlite3.Connection, rids: Iterable[int]) -> None:
    """Delete the codes of ``rids`` inside the caller's transaction (absent rids are ignored)."""
    checked = [(_check_rid(r),) for r in rids]
    conn.executemany("DELETE FROM cold_codes WHERE rid = ?", checked)


def _check_count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidInputError(f"{what} must be a non-negative integer, got {value!r}")
    return int(value)


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def _check_rid(rid: Any) -> int:
    if not _is_int(rid):
        raise InvalidInputError(f"a rid must be an integer, got {rid!r}")
    return int(rid)


# ---------------------------------------------------------------------------
# the index


@dataclass(frozen=True)
class _Codes:
    """One namespace's codes as loaded: immutable, shared by concurrent scans."""

    rids: np.ndarray  # int64 (n,), ascending
    codes: np.ndarray  # uint64 (n, words)
    vector_at: np.ndarray  # int32 (n,): where the embedding starts in its frame; -1 where not known
    vector_crc: np.ndarray  # uint32 (n,): the CRC32 of its bytes

    @property
    def nbytes(self) -> int:
        return self.rids.nbytes + self.codes.nbytes + self.vector_at.nbytes + self.vector_crc.nbytes


_nbytes_of = attrgetter("nbytes")


class ColdIndex:
    """Per-namespace sign codes of cold memories, loaded lazily from the catalog.

    ``query(sql, params)`` returns rows (``Catalog.query``). A namespace is
    read on first use and kept until :meth:`invalidate` (the caller invalidates
    after each commit that adds or removes cold codes of the namespace) or
    until evicted: loaded namespaces are kept least-recently-used first within
    ``max_bytes``. Thread-safe; scans run without a lock (the kernel releases
    the GIL).
    """

    def __init__(self, query: QueryFn, dim: int, *, max_bytes: int = 256 * 2**20) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidInputError(f"dim must be a positive integer, got {dim!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidInputError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
        self._query = query
        self.dim = dim
        self.words = int(code_words(dim))
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # the newest load stays even alone over max_bytes (the LRU never evicts its last entry)
        self._loaded: LRU[str, _Codes] = LRU(max_weight=max_bytes, weight=_nbytes_of)
        # A load stores its result only if no invalidation of its namespace
        # (a generation) or of everything (the epoch) happened since it began:
        # otherwise it might have read the catalog before the change.
        self._generation: dict[str, int] = {}
        self._epoch = 0
        self._load_locks: dict[str, threading.Lock] = {}
        # Namespaces that may have codes (None: not known): primed by the
        # store's writer at open, grown by every invalidation, so that a
        # namespace with nothing archived is known to be empty without a read.
        self._with_codes: set[str] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the loaded codes and row ids."""
        return self._loaded.weight

    def prime(self) -> None:
        """Read which namespaces have codes (one query), so that
        :meth:`count_if_loaded` and :meth:`count` answer 0 for the others
        without a read. Only for the store's writer: every later change of
        the codes goes through its :meth:`invalidate`."""
        names = {str(r[0]) for r in self._query("SELECT DISTINCT ns FROM cold_codes", ())}
        with self._lock:
            self._with_codes = names

    def invalidate(self, ns: str | None = None) -> None:
        """Forget the loaded codes of ``ns`` (every namespace when None)."""
        with self._lock:
            if ns is None:
                self._epoch += 1
                self._loaded.clear()
                self._with_codes = None
                return
            if self._with_codes is not None:
                self._with_codes.add(ns)
            self._generation[ns] = self._generation.get(ns, 0) + 1
            self._loaded.pop(ns)

    def add(self, ns: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """After the commit that archived ``rows`` (``(rid, code, vector_at,
        vector_crc)``, as :func:`query_codes` returns them) into ``ns``: loaded
        codes take them in, without reading the namespace again (a platform
        archives into most of its namespaces every night, and each one's
        next search would otherwise read all its codes back); a load under
        way is discarded as by :meth:`invalidate`. A row whose rid is loaded
        already replaces it."""
        if not rows:
            return
        new = _codes_of(rows, self.words, ns, self.dim)
        with self._lock:
            if self._with_codes is not None:
                self._with_codes.add(ns)
            self._generation[ns] = self._generation.get(ns, 0) + 1
            entry = self._loaded.peek(ns)
            if entry is None:
                return
            self._loaded.put(ns, merged_codes(entry, new))

    def generation(self, ns: str) -> tuple[int, int]:
        """A token that changes whenever ``ns``'s codes change (an add, an
        invalidation): :meth:`discard` takes it."""
        with self._lock:
            return self._epoch, self._generation.get(ns, 0)

    def discard(self, ns: str, rids: Sequence[int], token: tuple[int, int]) -> None:
        """Drop ``rids`` from ``ns``'s loaded codes: memories a search found
        no longer cold (deleted, restored) — unless the codes changed since
        ``token`` (:meth:`generation`, taken before the search read them),
        when a rid might have been archived again meanwhile. Loaded codes
        only grow between loads (a sweep's archive adds to them); dropping
        what a search met keeps them clean without reading the namespace
        again."""
        if not len(rids):
            return
        with self._lock:
            if (self._epoch, self._generation.get(ns, 0)) != token:
                return
            self._drop(ns, rids)

    def forget(self, ns: str, rids: Sequence[int]) -> None:
        """After the commit that deleted ``rids`` (cold memories of ``ns``):
        drop them from ``ns``'s loaded codes, as :meth:`add` takes archived
        ones in; a load under way is discarded as by :meth:`invalidate`. A
        deleted memory's rid is never archived again. Without it a sweep's
        deletes stayed in a long-running process's loaded codes until a
        search met them among its candidates (:meth:`discard`), each one
        then read as a candidate without a code."""
        if not len(rids):
            return
        with self._lock:
            self._generation[ns] = self._generation.get(ns, 0) + 1
            self._drop(ns, rids)

    def _drop(self, ns: str, rids: Sequence[int]) -> None:
        """``rids`` out of ``ns``'s loaded codes, if loaded (hold the lock)."""
        entry = self._loaded.peek(ns)
        if entry is None:
            return
        keep = ~np.isin(entry.rids, np.asarray(rids, np.int64))
        if keep.all():
            return
        self._loaded.put(ns, _Codes(entry.rids[keep], entry.codes[keep], entry.vector_at[keep], entry.vector_crc[keep]))

    def known_empty(self, ns: str) -> bool:
        """True when ``ns`` is known to have no code (nothing archived), without a lock or a read: the
        search's hot path asks this first. False means it may have some (or it is not known)."""
        with_codes = self._with_codes  # one read: invalidate() may replace it with None meanwhile
        return with_codes is not None and ns not in with_codes

    def count_if_loaded(self, ns: str) -> int | None:
        """:meth:`count` if the namespace's codes are loaded, else None (loading reads the catalog)."""
        with self._lock:
            entry = self._loaded.peek(ns)
            if entry is None:
                return 0 if self._with_codes is not None and ns not in self._with_codes else None
        return int(entry.rids.shape[0])

    def count(self, ns: str) -> int:
        """Cold memories of ``ns`` with a code (loads the namespace)."""
        check_namespace(ns)
        with self._lock:
            if self._with_codes is not None and ns not in self._with_codes and ns not in self._loaded:
                return 0
        return int(self._codes(ns).rids.shape[0])

    def best_estimate(self, ns: str, q: np.ndarray, first_stage: int = 64) -> float:
        """An estimate of the best cosine similarity between the unit query
        ``q`` and the archived memories of ``ns``, from their codes alone (no
        object-store read): the ``first_stage`` nearest codes in Hamming
        distance, then each one's sign score over ``sqrt(2·d/π)``, the sign
        score's expected value per unit of cosine (exact for isotropic
        vectors; MiniLM's differ by a few hundredths). ``-inf`` when the
        namespace has nothing archived. Loads the namespace."""
        entry = self._codes(ns)
        if entry.rids.shape[0] == 0:
            return -math.inf
        rows, _ = hamming_topk(sign_code(q), entry.codes, first_stage, _NO_MASK)
        return float(sign_scores(q, entry.codes, rows).max()) / math.sqrt(2.0 * self.dim / math.pi)

    def candidates(
        self, ns: str, query_vector: Any, m: int, allowed_rids: Any = None, *, first_stage: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``m`` cold memories of ``ns`` whose codes best match the query:
        ``(rids int64, hamming int32)``, best first.

        The Hamming scan keeps ``first_stage`` rows (default
        :func:`first_stage_count`; ``first_stage <= m`` skips the second
        stage), ordered by (distance, rid); ``sign_scores`` reorders them (a
        stable sort: ties keep that order) and the first ``m`` are returned
        with their Hamming distances in bits. With ``allowed_rids`` only those
        rows are considered. Fewer than ``m`` come back when fewer exist."""
        check_namespace(ns)
        q = check_vector(query_vector, self.dim, "query")
        m = _check_count(m, "m")
        first = first_stage_count(m) if first_stage is None else _check_count(first_stage, "first_stage")
        allowed = None
        if allowed_rids is not None:
            try:
                allowed = np.asarray(allowed_rids, dtype=np.int64).ravel()
            except (TypeError, ValueError, OverflowError):
                raise InvalidInputError("allowed_rids must be a sequence of integer rids") from None
        entry = self._codes(ns)
        mask = _NO_MASK if allowed is None else np.isin(entry.rids, allowed)
        rows, dist = hamming_topk(sign_code(q), entry.codes, max(m, first), mask)
        if first > m:  # the second stage; also when fewer than m rows exist, so the order is the same
            best = np.argsort(-sign_scores(q, entry.codes, rows), kind="stable")[:m]
            rows, dist = rows[best], dist[best]
        return entry.rids[rows], dist

    def _codes(self, ns: str) -> _Codes:
        with self._lock:
            entry = self._loaded.get(ns)
            if entry is not None:
                return entry
            load_lock = self._load_locks.setdefault(ns, threading.Lock())
        with load_lock:  # one load per namespace at a time; the others wait for it
            with self._lock:
                entry = self._loaded.peek(ns)
                if entry is not None:
                    return entry
                stamp = (self._epoch, self._generation.get(ns, 0))
            entry = self._load(ns)
            with self._lock:
                if stamp == (self._epoch, self._generation.get(ns, 0)) and ns not in self._loaded:
                    self._loaded.put(ns, entry)
            return entry

    def vector_places(self, ns: str, rids: Sequence[int]) -> np.ndarray:
        """``(vector_at, vector_crc)`` of each of ``rids`` (int64 ``(n, 2)``):
        where its embedding starts in its record frame and the CRC32 of its
        bytes; ``-1, -1`` where not known (a rid without a code, or a code
        written before places were kept). Loads the namespace."""
        entry = self._codes(check_namespace(ns))
        want = np.asarray(rids, dtype=np.int64).ravel()
        out = np.full((want.shape[0], 2), -1, np.int64)
        if entry.rids.shape[0] and want.shape[0]:
            at = np.minimum(np.searchsorted(entry.rids, want), entry.rids.shape[0] - 1)
            found = entry.rids[at] == want
            known = found.copy()
            known[found] = entry.vector_at[at[found]] >= 0
            out[known, 0] = entry.vector_at[at[known]]
            out[known, 1] = entry.vector_crc[at[known]]
        return out

    def int8_codes(self, rids: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The int8 codes of ``rids`` as the catalog holds them: ``(codes int8
        (n, dim), scales float32 (n,), known bool (n,))``, in the order given.
        Read from the catalog on each call (one query per 500 rids), not kept
        with the loaded sign codes: at ``4 + dim`` bytes a row they would be
        eight times their size, and a search needs only its candidates'. A rid
        whose code is not known (NULL: archived before int8 codes were kept;
        no row; a blob that is not a code of ``dim``, which verify() reports;
        a store not yet upgraded) has ``known`` False and a zero row."""
        try:
            want = np.asarray(rids, dtype=np.int64).ravel().tolist()
        except (TypeError, ValueError, OverflowError):
            raise InvalidInputError("rids must be a sequence of integer rids") from None
        n = len(want)
        codes = np.zeros((n, self.dim), np.int8)
        scales = np.zeros(n, np.float32)
        known = np.zeros(n, np.bool_)
        size = code8_size(self.dim)
        found = query_code8(self._query, want)
        blobs = [found.get(rid) for rid in want]
        good = [b for b in blobs if isinstance(b, bytes) and len(b) == size]
        sized = np.fromiter((isinstance(b, bytes) and len(b) == size for b in blobs), np.bool_, n)
        if good:  # decoded in one pass: a loop of per-row numpy calls cost more than the query
            raw = np.frombuffer(b"".join(good), np.uint8).reshape(-1, size)
            head = raw[:, :4].copy().view("<f4").ravel()
            valid = np.isfinite(head) & (head > 0)
            at = np.flatnonzero(sized)[valid]
            scales[at] = head[valid]
            codes[at] = raw[valid, 4:].view(np.int8)
            known[at] = True
        return codes, scales, known

    def _load(self, ns: str) -> _Codes:
        return _codes_of(query_codes(self._query, "WHERE ns = ? ORDER BY rid", (ns,)), self.words, ns, self.dim)


def merged_codes(entry: _Codes, new: _Codes) -> _Codes:
    """``entry`` (rids ascending) with the rows of ``new`` (any order) merged
    in by rid, a row of ``new`` replacing ``entry``'s of the same rid. New
    arrays (a loaded entry is shared with scans under way); O(n + m log m):
    each night's archive adds a few rows to a namespace of thousands, which a
    concatenation and a sort of the whole cost again and again (a sweep's
    largest cost that grew with the archive, in the platform year)."""
    order = np.argsort(new.rids, kind="stable")
    rids, codes, at, crc = new.rids[order], new.codes[order], new.vector_at[order], new.vector_crc[order]
    if rids.shape[0] > 1:  # a rid given twice: its last row, as a replacement would leave it
        last = np.append(rids[1:] != rids[:-1], True)
        rids, codes, at, crc = rids[last], codes[last], at[last], crc[last]
    pos = np.searchsorted(entry.rids, rids)
    same = pos < entry.rids.shape[0]
    same[same] = entry.rids[pos[same]] == rids[same]
    out = [entry.rids, entry.codes, entry.vector_at, entry.vector_crc]
    if same.any():
        out = [a.copy() for a in out]
        for a, b in zip(out, (rids, codes, at, crc)):
            a[pos[same]] = b[same]
    fresh = ~same
    if fresh.any():
        where = pos[fresh].tolist()
        out = [_spliced(a, b[fresh], where) for a, b in zip(out, (rids, codes, at, crc))]
    return _Codes(out[0], out[1], out[2], out[3])


def _spliced(a: np.ndarray, b: np.ndarray, where: list[int]) -> np.ndarray:
    """``a`` with row ``b[j]`` inserted before ``a[where[j]]`` (``where``
    nondecreasing). A few rows go in as slices around them (one copy of
    ``a``; ``np.insert`` on a 2-d array cost ten times as much); many, by a
    sort."""
    if len(where) > 64:
        merged = np.concatenate([a, b])
        order = np.argsort(np.concatenate([np.arange(a.shape[0]) * 2 + 1, np.asarray(where) * 2]), kind="stable")
        return merged[order]
    pieces = []
    prev = 0
    for j, p in enumerate(where):
        pieces.append(a[prev:p])
        pieces.append(b[j : j + 1])
        prev = p
    pieces.append(a[prev:])
    return np.concatenate(pieces)


def _codes_of(rows: Sequence[tuple[Any, ...]], words: int, ns: str, dim: int) -> _Codes:
    """``(rid, code, vector_at, vector_crc)`` rows, in the order given, as
    arrays; a code of the wrong size raises CorruptDataError."""
    size = 8 * words
    codes_col = [r[1] for r in rows]
    # checked in C (a namespace's first search after a start loads all its codes); the row at fault, if
    # any, is found one by one
    if not (set(map(type, codes_col)) <= {bytes} and set(map(len, codes_col)) <= {size}):
        for rid, code, _, _ in rows:
            if not isinstance(code, bytes) or len(code) != size:
                got = len(code) if isinstance(code, bytes) else type(code).__name__
                raise CorruptDataError(
                    f"cold_codes row {rid} of namespace {ns!r} holds a code of {got} "
                    f"bytes, expected {size} (dimension {dim})"
                )
    rids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    codes = np.frombuffer(b"".join(codes_col), "<u8").astype(np.uint64).reshape(len(rows), words)
    at, crc = _places_of(rows)
    return _Codes(rids, codes, at, crc)


def _places_of(rows: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """``(vector_at int32, vector_crc uint32)`` of ``(rid, code, vector_at,
    vector_crc)`` rows. A place that is not two integers in range (NULL, or
    damaged) is not known (-1): the whole record is read, and verify()
    reports a damaged one. (A damaged place that still reads as an integer
    costs the same: its bytes fail the CRC.)"""
    at = _column_in(rows, 2, 2**31)
    crc = _column_in(rows, 3, 2**32)
    unknown = (at < 0) | (crc < 0)
    at[unknown], crc[unknown] = -1, 0
    return at.astype(np.int32), crc.astype(np.uint32)


def _column_in(rows: Sequence[tuple[Any, ...]], col: int, end: int) -> np.ndarray:
    """Column ``col`` of ``rows`` as int64, -1 where a value is not an int in ``[0, end)``."""
    values = [r[col] for r in rows]
    if set(map(type, values)) <= {int}:  # the usual case, checked in C: every value an int
        try:
            out = np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64: damaged, found one by one below
            pass
        else:
            out[(out < 0) | (out >= end)] = -1
            return out
    return np.fromiter((v if type(v) is int and 0 <= v < end else -1 for v in values), np.int64, len(values))


def query_codes(query: QueryFn, tail: str = "", params: Sequence[Any] = ()) -> Sequence[tuple[Any, ...]]:
    """``SELECT rid, code, vector_at, vector_crc FROM cold_codes <tail>``,
    with NULL places where the table predates their columns (a read-only
    look at a store not yet upgraded): one query in the usual case."""
    try:
        return query(f"SELECT rid, code, vector_at, vector_crc FROM cold_codes {tail}", params)
    except sqlite3.OperationalError as exc:
        if "no such column" not in str(exc):
            raise
        return query(f"SELECT rid, code, NULL, NULL FROM cold_codes {tail}", params)


def query_code8(query: QueryFn, rids: Sequence[int]) -> dict[int, Any]:
    """``rid -> code8`` of those of ``rids`` whose ``cold_codes.code8`` is not
    NULL, as stored (not checked); one query per 500 rids. Empty where the
    table predates the column (a read-only look at a store not yet upgraded)."""
    out: dict[int, Any] = {}
    want = list(rids)
    for start in range(0, len(want), 500):
        chunk = want[start : start + 500]
        marks = ",".join("?" * len(chunk))
        try:
            found = query(f"SELECT rid, code8 FROM cold_codes WHERE rid IN ({marks}) AND code8 IS NOT NULL", chunk)
        except sqlite3.OperationalError as exc:
            if "no such column" not in str(exc):
                raise
            return {}
        out.update((int(rid), blob) for rid, blob in found)
    return out


def code8_agrees(blob: Any, embedding: bytes) -> bool:
    """Whether a stored ``code8`` is the int8 code of ``embedding`` (a
    record's float32 little-endian bytes): a code of its dimension that
    decodes to within a cosine of :data:`CODE8_MIN_COSINE` of it (a fresh
    code is within ~0.0001 at 384 dimensions; a damaged one ranks its memory wrongly)."""
    vec = np.frombuffer(embedding, "<f4").astype(np.float64)
    got = decode_code8(blob, vec.shape[0])
    if got is None:
        return False
    norms = float(np.linalg.norm(got)) * float(np.linalg.norm(vec))
    if norms == 0.0:
        return not got.any() and not vec.any()
    return float(got.astype(np.float64) @ vec) / norms >= CODE8_MIN_COSINE


# ---------------------------------------------------------------------------
# the int8 stage


# Float rounding's share of a code estimate's error bound: int8_scores sums in float64 and rounds once to
# float32, exact_rescore sums 384 float32 products; both within ~1e-6 of the true cosine.
_ROUNDING_SLACK = 1e-5


@dataclass(frozen=True)
class CodeEstimates:
    """Cosines of a unit query with archived vectors, estimated from their
    int8 codes (:meth:`ColdIndex.int8_codes`), each with a bound on its error:
    the exact cosine lies in ``[approx - err, approx + err]``. ``err`` is
    ``Σ_j |q_j| · scale / 2`` (each component within half a step of its
    code) plus rounding's share; ``inf`` where the code is not known. Arrays
    float64 ``(n,)`` in the order of ``rids``."""

    rids: list[int]
    approx: np.ndarray
    err: np.ndarray

    @property
    def known(self) -> np.ndarray:
        return np.isfinite(self.err)

    def of(self, rids: Sequence[int]) -> CodeEstimates:
        """The estimates of ``rids`` (each one of :attr:`rids`), in their order."""
        if list(rids) == self.rids:
            return self
        at = {r: i for i, r in enumerate(self.rids)}
        pos = np.fromiter((at[r] for r in rids), np.int64, len(rids))
        return CodeEstimates(list(rids), self.approx[pos], self.err[pos])

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(low, high)``: float32 cosine bounds, clipped to [-1, 1], rounded
        outwards; ``(-1, 1)`` where the code is not known."""
        low = np.nextafter(np.clip(self.approx - self.err, -1.0, 1.0).astype(np.float32), np.float32(-2.0))
        high = np.nextafter(np.clip(self.approx + self.err, -1.0, 1.0).astype(np.float32), np.float32(2.0))
        return low, high


def code_estimates(index: ColdIndex, query: Any, rids: Sequence[int]) -> CodeEstimates:
    """The :class:`CodeEstimates` of the unit ``query`` with ``rids`` (one
    catalog read of their int8 codes)."""
    q = check_vector(query, index.dim, "query")
    want = [int(r) for r in rids]
    codes, scales, known = index.int8_codes(want)
    approx = int8_scores(q, codes, scales).astype(np.float64)
    err = np.full(len(want), np.inf)
    l1 = float(np.abs(q.astype(np.float64)).sum())
    err[known] = l1 * scales[known].astype(np.float64) / 2.0 + _ROUNDING_SLACK
    return CodeEstimates(want, approx, err)


def exact_candidates(
    index: ColdIndex,
    query: Any,
    rids: Sequence[int],
    k: int,
    always: Collection[int] = (),
    estimates: CodeEstimates | None = None,
) -> list[int]:
    """Which of a cold search's candidates ``rids`` to read exactly: positions
    into ``rids``, ascending.

    The :func:`exact_count` best by their int8 codes (``kernels.int8_scores``
    against the unit ``query``: within ~0.001 of the cosine; ties to the
    earlier position), every candidate whose int8 code is not known (only its
    exact vector can rank it) and every one in ``always`` (keyword
    candidates: chosen by their words, not their meaning). When no more than
    :func:`exact_count` are given, all of them, without a read. ``rids``:
    distinct rids of ``index``'s memories, as :meth:`ColdIndex.candidates`
    gives them (or the subset a caller keeps). ``estimates``: the codes'
    estimates of (at least) ``rids``, read already (:func:`code_estimates`);
    else they are read here."""
    want = exact_count(k)
    n = len(rids)
    if n <= want:
        return list(range(n))
    est = code_estimates(index, query, rids) if estimates is None else estimates.of(rids)
    approx, known = est.approx, est.known
    scored = np.flatnonzero(known)
    best = scored[np.argsort(-approx[scored], kind="stable")[:want]]
    keep = ~known
    keep[best] = True
    if always:
        forced = set(always)
        keep |= np.fromiter((r in forced for r in rids), np.bool_, n)
    return np.flatnonzero(keep).tolist()


# ---------------------------------------------------------------------------
# exact vectors from the archive


class VectorCache:
    """Archived vectors by ``(object key, offset)``, least recently used first
    out, within ``max_bytes`` of vector data. Archive objects are immutable and
    their keys never reused, so an entry never goes stale: nothing invalidates
    it. Thread-safe. Each vector is kept as its own little-endian bytes
    (immutable, and no view keeps a larger block alive); :meth:`get` returns
    a read-only array over them."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidInputError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        # a vector over max_bytes is not kept: it would evict everything and stay alone
        self._items: LRU[tuple[str, int], bytes] = LRU(max_weight=max_bytes, weight=len, keep_oversize=False)

    @property
    def nbytes(self) -> int:
        """Bytes of the cached vectors."""
        return self._items.weight

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str, offset: int) -> np.ndarray | None:
        with self._lock:
            blob = self._items.get((key, offset))
        return None if blob is None else np.frombuffer(blob, "<f4")

    def get_many(self, places: Sequence[tuple[str, int]]) -> list[np.ndarray | None]:
        """:meth:`get` of each ``(key, offset)``, under one lock."""
        with self._lock:
            found = self._items.get_many(places)
        return [None if blob is None else np.frombuffer(blob, "<f4") for blob in found]

    def put(self, key: str, offset: int, vector: np.ndarray | bytes) -> None:
        self.put_many([(key, offset)], [vector])

    def put_many(self, places: Sequence[tuple[str, int]], vectors: Sequence[np.ndarray | bytes]) -> None:
        """:meth:`put` of each ``(key, offset)`` and vector, under one lock:
        a float32 array (copied), or its little-endian bytes (kept as they
        are: what an archive read returns, no copy)."""
        blobs = [v if type(v) is bytes else np.ascontiguousarray(v, dtype="<f4").tobytes() for v in vectors]
        with self._lock:
            self._items.put_many(places, blobs)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def fetch_vectors(
    cold_tier: ColdTier,
    locations: Sequence[Location],
    cache: VectorCache | None = None,
    max_workers: int | None = None,
    ids: Sequence[str] | None = None,
    errors: list[BaseException] | None = None,
    places: Any = None,
) -> np.ndarray:
    """The archived vectors at ``locations``: float32 ``(len(locations), dim)``, in order.

    Cache hits first; the misses are read by ``ColdTier.vectors_by_object``
    (per object, neighbouring records in one ranged GET; a location with a
    known place, ``places[i] = (vector_at, vector_crc)`` as
    :meth:`ColdIndex.vector_places` gives them, is read as its embedding's
    bytes alone, checked against that CRC32; the others, and any whose bytes
    fail the check, as whole records, each checked against its CRC32 and
    dimension, only the id and embedding decoded), the
    objects concurrently on up to ``max_workers`` threads (object-store
    latency, not CPU, is what they overlap; default :data:`FETCH_WORKERS`), or
    in one pass on this thread for a store whose ``serial_reads`` is true: a
    local directory, where a read takes tens of µs and threads only add their
    start-up and GIL hand-offs (p50 24 -> 9 ms for 100 candidates from ~64
    objects in ``benchmarks/cold_search_cost.py --ab``); the vectors read go
    into the cache in one call at the end. A missing object raises ObjectNotFoundError, a
    damaged record CorruptDataError; the other fetches are then abandoned.
    ``ids``: the memory each location should hold (as the catalog says); a
    record of another memory there is CorruptDataError too. ``errors``: when
    given, an object that fails (missing, damaged, unreachable) does not stop
    the others: its exception is appended there and its rows are left NaN (a
    search that reaches the cold tier serves what it can read)."""
    if max_workers is None:
        max_workers = 1 if getattr(cold_tier.store, "serial_reads", False) is True else FETCH_WORKERS
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise InvalidInputError(f"max_workers must be a positive integer, got {max_workers!r}")
    locs = list(locations)
    for loc in locs:
        if not isinstance(loc, Location):
            raise InvalidInputError(f"locations must be Location objects, got {type(loc).__name__}")
    place_list = None
    if places is not None:
        try:
            arr = np.asarray(places, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise InvalidInputError("places must be (vector_at, vector_crc) integer pairs") from None
        if arr.shape != (len(locs), 2):
            raise InvalidInputError(f"places must have shape ({len(locs)}, 2), got {arr.shape}")
        place_list = arr.tolist()
    out = np.empty((len(locs), cold_tier.dim), np.float32)
    missed: list[int] = []
    hits = cache.get_many([(loc.key, loc.offset) for loc in locs]) if cache is not None else [None] * len(locs)
    for i, hit in enumerate(hits):
        if hit is not None and hit.shape == (cold_tier.dim,):
            out[i] = hit
        else:
            missed.append(i)
    if not missed:
        return out
    read: list[int] = []  # positions read and checked, for the cache
    blobs: dict[int, bytes] = {}  # their vectors' bytes, kept by the cache as they are

    def take(idxs: list[int], found: list[tuple[str | None, bytes]] | BaseException) -> None:
        # one object's outcome: its vectors into ``out``, or its failure
        if not isinstance(found, BaseException):
            try:
                for i, (mid, emb) in zip(idxs, found):
                    # no id (None): a vector read alone, its CRC the memory's own
                    if ids is not None and mid is not None and mid != ids[i]:
                        raise CorruptDataError(
                            f"archive object {locs[i].key} at byte {locs[i].offset} holds "
                            f"{mid!r}, the catalog expects {ids[i]!r}"
                        )
                    out[i] = np.frombuffer(emb, "<f4")
                    blobs[i] = emb
            except CorruptDataError as exc:
                found = exc
            else:
                read.extend(idxs)
                return
        if errors is None:
            raise found
        out[idxs] = np.nan
        errors.append(found)

    by_key: dict[str, list[int]] = {}
    for i in missed:
        by_key.setdefault(locs[i].key, []).append(i)

    def places_of(idxs: list[int]) -> list[list[int]] | None:
        return None if place_list is None else [place_list[i] for i in idxs]

    if len(by_key) <= 1 or max_workers == 1:
        # one pass over every object: no call, thread or cache write per object
        for idxs, found in cold_tier.vectors_by_object([locs[i] for i in missed], places_of(missed)):
            take([missed[j] for j in idxs], found)
    else:
        # the objects dealt to at most max_workers tasks of the shared pool, each reading its share in turn
        groups = list(by_key.values())
        shares = [groups[w::max_workers] for w in range(min(max_workers, len(groups)))]
        stop = threading.Event()  # an object failed (errors not kept): the other tasks stop between objects

        def fetch_share(share: list[list[int]]) -> None:
            for idxs in share:
                if stop.is_set():
                    return
                try:
                    for got, found in cold_tier.vectors_by_object([locs[i] for i in idxs], places_of(idxs)):
                        take([idxs[j] for j in got], found)
                except BaseException:
                    stop.set()
                    raise

        pool = fetch_pool()
        futures = [pool.submit(fetch_share, share) for share in shares]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:  # its task set ``stop``
            for f in futures:
                f.cancel()  # the queued ones; running ones stop at their next object and are discarded
            raise failed[0].exception()  # type: ignore[misc]
    if cache is not None and read:
        cache.put_many([(locs[i].key, locs[i].offset) for i in read], [blobs[i] for i in read])
    return out


def fetch_row_vectors(
    index: ColdIndex,
    cold_tier: ColdTier,
    cache: VectorCache | None,
    ns: str,
    rows: Sequence[Any],
    errors: list[BaseException] | None = None,
) -> np.ndarray:
    """:func:`fetch_vectors` for cold catalog ``rows`` of ``ns``: their
    locations, the ids they must hold and the places ``index`` keeps."""
    return fetch_vectors(
        cold_tier,
        [Location(r.cold_key, r.cold_offset, r.cold_length) for r in rows],
        cache,
        ids=[r.id for r in rows],
        errors=errors,
        places=index.vector_places(ns, [r.rid for r in rows]),
    )


def exact_rescore(query: Any, vectors: np.ndarray) -> np.ndarray:
    """Cosine similarity (float32) of ``query`` with each row of ``vectors``
    (``(n, dim)``, L2-normalised as every stored vector is): the same kernel
    and rounding as the hot tier's exact search, so scores from both tiers
    compare directly. The query is checked and normalised first."""
    X = np.ascontiguousarray(vectors, dtype=np.float32)
    if X.ndim != 2:
        raise InvalidInputError(f"vectors must have shape (n, dim), got {X.shape}")
    q = check_vector(query, X.shape[1], "query")
    return inner_products(q, X, X.shape[0])

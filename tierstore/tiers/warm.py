"""The warm tier: immutable on-disk shards per namespace.

A shard is a directory ``warm/<ns>/<name>/`` holding ``rids.i64`` (catalog row
ids, little-endian int64), either ``vectors.f32`` (a flat float32 matrix, for
small shards) or ``index.hnsw`` (an hnswlib index labelled by row position),
and ``manifest.json`` with the SHA-256 of each file, written last.

Shards never change. A memory leaves a shard (promoted, archived, deleted) by
a catalog update alone: the catalog says which rows are still in which shard,
so every other row of the shard is a tombstone. A shard whose live fraction
falls below ``rebuild_live_fraction`` is rebuilt from the catalog's vectors.

Shards load lazily into an LRU cache bounded in bytes (hnswlib's
``load_index`` reads the whole file; there is no mmap).

A shard is a cache of the catalog, which keeps every warm memory's vector: its
files are written without fsync (a crash may leave a shard truncated or
missing; the checksum says so), and a shard that fails to load is skipped by
searches and rebuilt from the catalog by the next sweep.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

import hnswlib
import numpy as np

from tierstore.errors import CorruptDataError
from tierstore.kernels import inner_products, top_candidates
from tierstore.rules.setting_checks import check_hnsw, check_int, check_number
from tierstore.storage.catalog import Catalog
from tierstore.storage.fileio import sha256_file
from tierstore.storage.lru import LRU

FORMAT = "tierstore-warm-shard"
_LIST_ATTEMPTS = 4  # re-reads of a namespace's shard list when shards are replaced during a search


@dataclass(frozen=True)
class WarmSettings:
    cache_bytes: int = 256 * 1024 * 1024  # loaded shards kept in memory, at most
    flat_threshold: int = 4096  # shards with more vectors get an hnswlib index
    hnsw_m: int = 16
    hnsw_ef_construction: int = 100
    hnsw_ef_search: int = 64
    rebuild_live_fraction: float = 0.5  # rebuild a shard when fewer of its rows are live
    merge_above: int = 8  # merge a namespace's shards when it has more than this many

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise InvalidInputError naming the first field out of its range:
        ``cache_bytes``, ``flat_threshold`` ints >= 0; ``hnsw_m`` an int in
        [2, 10000]; ``hnsw_ef_construction``, ``hnsw_ef_search``,
        ``merge_above`` ints >= 1; ``rebuild_live_fraction`` a finite number
        in [0, 1]."""
        check_int("WarmSettings", "cache_bytes", self.cache_bytes, 0)
        check_int("WarmSettings", "flat_threshold", self.flat_threshold, 0)
        check_hnsw("WarmSettings", self.hnsw_m, self.hnsw_ef_construction, self.hnsw_ef_search)
        check_number("WarmSettings", "rebuild_live_fraction", self.rebuild_live_fraction, 0.0, 1.0)
        check_int("WarmSettings", "merge_above", self.merge_above, 1)


@dataclass(frozen=True)
class ShardInfo:
    shard: int  # catalog id
    ns: str
    name: str  # directory under warm/
    kind: str  # "flat" or "hnsw"
    count: int


@dataclass
class LoadedShard:
    info: ShardInfo
    rids: np.ndarray
    vectors: np.ndarray | None
    index: hnswlib.Index | None
    nbytes: int


_nbytes_of = attrgetter("nbytes")


class WarmTier:
    def __init__(self, directory: Path, dim: int, settings: WarmSettings, catalog: Catalog) -> None:
        self.directory = directory
        self.dim = dim
        self.settings = settings
        self.catalog = catalog
        # loaded shards within settings.cache_bytes; the newest stays even alone over it
        self._cache: LRU[int, LoadedShard] = LRU(max_weight=settings.cache_bytes, weight=_nbytes_of)
        self._lock = threading.Lock()
        self._by_ns: dict[str, list[ShardInfo]] | None = None
        self.errors: list[str] = []
        self.damaged: dict[int, ShardInfo] = {}  # shards that failed to load, to rebuild

    @property
    def cache_nbytes(self) -> int:
        """Bytes of the loaded shards kept (at most ``settings.cache_bytes``, but the newest)."""
        return self._cache.weight

    # -- shard list ------------------------------------------------------------

    def _load_list(self, namespaces: Sequence[str] = ()) -> dict[str, list[ShardInfo]]:
        """The shards of ``namespaces`` (every namespace when empty), by namespace."""
        by_ns: dict[str, list[ShardInfo]] = {}
        where, params = "", list(namespaces)
        if params:
            where = f" WHERE ns IN ({','.join('?' * len(params))})"
        for shard, ns, name, kind, count in self.catalog.query(
            f"SELECT shard, ns, name, kind, count FROM shards{where} ORDER BY shard", params
        ):
            by_ns.setdefault(ns, []).append(ShardInfo(shard, ns, name, kind, count))
        return by_ns

    def shards_if_listed(self, ns: str) -> list[ShardInfo] | None:
        """:meth:`shards`, or None if the shard list was not read yet (reading it touches the disk)."""
        by_ns = self._by_ns
        return None if by_ns is None else by_ns.get(ns, [])

    def shards(self, ns: str) -> list[ShardInfo]:
        by_ns = self._by_ns
        if by_ns is None:
            with self._lock:
                if self._by_ns is None:
                    self._by_ns = self._load_list()
                by_ns = self._by_ns
        return by_ns.get(ns, [])

    def refresh(self, namespaces: Iterable[str] | None = None) -> None:
        """Re-read the shard list after the catalog changed it: the shards of
        ``namespaces`` only, when given (a night's sweep changes a few
        namespaces' shards at a time; the whole list of a platform's store
        is thousands of rows)."""
        with self._lock:
            if namespaces is None:
                self._by_ns = self._load_list()
                return
            if self._by_ns is None:
                return  # never read: the next shards() reads it whole
            names = sorted(set(namespaces))
            by_ns = dict(self._by_ns)  # a new dict: readers hold the old one without a lock
            for i in range(0, len(names), 500):
                part = names[i : i + 500]
                fresh = self._load_list(part)
                for ns in part:
                    if ns in fresh:
                        by_ns[ns] = fresh[ns]
                    else:
                        by_ns.pop(ns, None)
            self._by_ns = by_ns

    # -- writing ---------------------------------------------------------------

    def write_shard(self, ns: str, rids: np.ndarray, vectors: np.ndarray) -> tuple[str, str]:
        """Write a new shard's files (not yet in the catalog); returns its
        ``(name, kind)``. The directory appears complete or not at all."""
        name = f"{ns}/{uuid.uuid4().hex}"
        final = self.directory / name
        tmp = self.directory / ns / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir(parents=True)
        try:
            rids = np.ascontiguousarray(rids, dtype="<i8")
            (tmp / "rids.i64").write_bytes(rids.tobytes())
            files = ["rids.i64"]
            if len(rids) > self.settings.flat_threshold:
                kind = "hnsw"
                s = self.settings
                index = hnswlib.Index(space="ip", dim=self.dim)
                index.init_index(
                    max_elements=len(rids), M=s.hnsw_m, ef_construction=s.hnsw_ef_construction, random_seed=100
                )
                index.add_items(vectors, np.arange(len(rids)), num_threads=-1)
                index.save_index(str(tmp / "index.hnsw"))
                files.append("index.hnsw")
            else:
                kind = "flat"
                (tmp / "vectors.f32").write_bytes(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
                files.append("vectors.f32")
            manifest = {
                "format": FORMAT,
                "version": 1,
                "namespace": ns,
                "dim": self.dim,
                "count": int(len(rids)),
                "kind": kind,
                "sha256": {f: sha256_file(tmp / f) for f in files},
            }
            (tmp / "manifest.json").write_text(json.dumps(manifest))
            os.replace(tmp, final)  # no fsync: see the module docstring
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return name, kind

    def remove_files(self, name: str) -> None:
        shutil.rmtree(self.directory / name, ignore_errors=True)

    def forget(self, shard: int) -> None:
        """Drop a shard from the cache (after it left the catalog)."""
        with self._lock:
            self._cache.pop(shard)
            self.damaged.pop(shard, None)

    def remove_orphans(self) -> int:
        """Delete shard directories the catalog does not know (a crash between
        writing a shard and committing it). Returns how many."""
        known = {name for (name,) in self.catalog.query("SELECT name FROM shards")}
        removed = 0
        if not self.directory.exists():
            return 0
        for ns_dir in self.directory.iterdir():
            if not ns_dir.is_dir():
                continue
            for d in ns_dir.iterdir():
                if f"{ns_dir.name}/{d.name}" not in known:
                    shutil.rmtree(d, ignore_errors=True)
                    removed += 1
        return removed

    # -- reading ---------------------------------------------------------------

    def load(self, info: ShardInfo) -> LoadedShard:
        with self._lock:
            hit = self._cache.get(info.shard)
            if hit is not None:
                return hit
        loaded = self._read(info)
        with self._lock:
            if info.shard not in self._cache:  # else loaded by another thread meanwhile: keep that one
                self._cache.put(info.shard, loaded)
            kept = self._cache.peek(info.shard)
            return loaded if kept is None else kept

    def _read(self, info: ShardInfo) -> LoadedShard:
        d = self.directory / info.name
        mpath = d / "manifest.json"
        try:
            manifest = json.loads(mpath.read_text())
        except (OSError, ValueError) as exc:
            raise CorruptDataError(f"warm shard manifest {mpath} is unreadable: {exc}") from None
        # Every field must be what the catalog and this store expect: a damaged
        # manifest is caught even where the damage would not fail a checksum.
        files = ["rids.i64", "index.hnsw" if info.kind == "hnsw" else "vectors.f32"]
        expect = {
            "format": FORMAT,
            "version": 1,
            "namespace": info.ns,
            "dim": self.dim,
            "count": info.count,
            "kind": info.kind,
        }
        if not isinstance(manifest, dict) or any(manifest.get(k) != v for k, v in expect.items()):
            raise CorruptDataError(f"warm shard manifest {mpath} does not match the catalog's shard {info.name}")
        digests = manifest.get("sha256")
        if not isinstance(digests, dict) or sorted(digests) != sorted(files):
            raise CorruptDataError(f"warm shard manifest {mpath} lists the wrong files")
        for f in files:
            path = d / f
            if not path.exists() or sha256_file(path) != digests[f]:
                raise CorruptDataError(f"warm shard file {path} fails its checksum")
        rids = np.frombuffer((d / "rids.i64").read_bytes(), dtype="<i8").astype(np.int64)
        if len(rids) != info.count or manifest.get("dim") != self.dim:
            raise CorruptDataError(f"warm shard {d} does not match the catalog (count or dimension)")
        if info.kind == "hnsw":
            index = hnswlib.Index(space="ip", dim=self.dim)
            index.load_index(str(d / "index.hnsw"), max_elements=len(rids))
            index.set_ef(self.settings.hnsw_ef_search)  # not saved by hnswlib
            index.set_num_threads(1)
            nbytes = (d / "index.hnsw").stat().st_size + rids.nbytes
            return LoadedShard(info, rids, None, index, nbytes)
        vectors = np.frombuffer((d / "vectors.f32").read_bytes(), dtype="<f4").astype(np.float32)
        vectors = vectors.reshape(len(rids), self.dim)
        return LoadedShard(info, rids, vectors, None, vectors.nbytes + rids.nbytes)

    def verify(self, info: ShardInfo) -> str | None:
        """Re-read a shard from disk (not from the cache) and check every file
        against its manifest; the problem found (naming the file), or None."""
        try:
            self._read(info)
        except CorruptDataError as exc:
            return str(exc)
        except (OSError, ValueError, RuntimeError) as exc:  # e.g. hnswlib refusing a file that passed
            return f"warm shard {self.directory / info.name} does not load: {type(exc).__name__}: {exc}"
        return None

    def candidates(self, ns: str, q: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``want`` most similar rows of each of the namespace's shards:
        ``(rids, cosines)``, tombstones included (the caller checks the catalog).
        A shard that fails to load is skipped and reported in ``errors`` (and
        in ``damaged``, for the next sweep to rebuild). A shard replaced while
        this call read it (a concurrent compaction or rebuild removes the old
        files once the catalog lists the new shard) is not an error: the call
        starts over with the new list."""
        for attempt in range(_LIST_ATTEMPTS):
            out = self._candidates(self.shards(ns), q, want, last=attempt == _LIST_ATTEMPTS - 1)
            if out is not None:
                return out
        raise AssertionError("unreachable")  # pragma: no cover - the last attempt always returns

    def _listed(self, info: ShardInfo) -> bool:
        with self._lock:
            by_ns = self._by_ns
        return by_ns is not None and info in by_ns.get(info.ns, [])

    def _candidates(
        self, infos: Sequence[ShardInfo], q: np.ndarray, want: int, last: bool
    ) -> tuple[np.ndarray, np.ndarray] | None:
        rid_parts, sim_parts = [], []
        for info in infos:
            try:
                shard = self.load(info)
            except (CorruptDataError, OSError, RuntimeError) as exc:
                if not self._listed(info):
                    if last:
                        continue
                    return None  # replaced meanwhile: read the new shard list
                if info.shard not in self.damaged:
                    self.damaged[info.shard] = info
                    message = (
                        str(exc)
                        if isinstance(exc, CorruptDataError)
                        else (f"warm shard {self.directory / info.name} is unreadable: {type(exc).__name__}: {exc}")
                    )
                    self.errors.append(message)
                    del self.errors[:-100]
                continue
            n = len(shard.rids)
            if n == 0:
                continue
            k = min(want, n)
            if shard.index is not None:
                labels, dists = shard.index.knn_query(q, k=k)
                pos = labels[0].astype(np.int64)
                sims = 1.0 - dists[0]
            else:
                assert shard.vectors is not None
                all_sims = inner_products(q, shard.vectors, n)
                pos = top_candidates(all_sims, np.ones(n, np.int64), n, k)
                sims = all_sims[pos]
            rid_parts.append(shard.rids[pos])
            sim_parts.append(sims.astype(np.float32))
        if not rid_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return np.concatenate(rid_parts), np.concatenate(sim_parts)

    def vectors(self, info: ShardInfo) -> tuple[np.ndarray, np.ndarray]:
        """All rids and vectors of a shard (for merging)."""
        shard = self.load(info)
        if shard.index is not None:
            vecs = np.asarray(shard.index.get_items(np.arange(len(shard.rids)), return_type="numpy"), np.float32)
        else:
            assert shard.vectors is not None
            vecs = shard.vectors
        return shard.rids, vecs

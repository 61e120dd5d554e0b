"""``TierStoreStore``: a LangGraph ``BaseStore`` backed by a TierStore."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
)

from tierstore.errors import InvalidInputError, StoreConfigError
from tierstore.integrations.filters import check_filter, matches
from tierstore.integrations.langgraph.fieldvectors import VECTORS_KEY, best_cosine, encode_vectors, unit_rows
from tierstore.integrations.langgraph.namespaces import check_labels, check_prefix, decode, encode
from tierstore.integrations.policy import check_adapter_policy
from tierstore.records import Memory
from tierstore.rules.validation import check_metadata
from tierstore.store import TierStore

Ranking = Literal["fused", "similarity"]


class TierStoreStore(BaseStore):
    """LangGraph's store interface over a :class:`~tierstore.TierStore`.

    Each LangGraph namespace is one tierstore namespace (see
    :mod:`.namespaces`), each item one memory whose id is the item's key,
    whose content is its indexed text (or its value as JSON) and whose
    metadata holds the value and LangGraph's fields. An item with a TTL
    (``ttl`` minutes, or ``ttl_config["default_ttl"]``) is a memory of
    ``memory_type`` (which must refresh on read) with that TTL; one without
    is pinned (never expires). ``sweep_ttl`` runs the store's sweep: an
    expired item is archived to the cold tier — gone for LangGraph, but
    ``TierStore.restore`` brings it back — rather than deleted.

    index: LangGraph's ``IndexConfig`` (``embed`` an ``Embeddings``, a
    function or ``"provider:model"``; ``fields`` JSON paths, default the whole
    value); ``dims`` must equal the store's dimension. Without it, items are
    not embedded and searches filter only. As in LangGraph's stores, each
    text an item's fields yield is embedded separately and a query scores
    the item by its best text (see :mod:`tierstore.integrations.langgraph.fieldvectors`).

    ranking: ``"similarity"`` (default) ranks query searches by cosine
    similarity and returns it as ``Item.score``, as LangGraph's stores do;
    ``"fused"`` by the store's fused score (similarity, recency, confidence,
    weight), returned as the score — tierstore's own ranking, which scores
    an item with several texts by their mean vector (the one vector the
    store keeps per memory). Filter-only searches and listings follow the
    order items were first put (namespaces in sorted order). An update
    keeps ``created_at`` (as LangGraph's SQLite and Postgres stores do).
    Namespaces may be given as tuples or lists."""

    supports_ttl = True

    def __init__(
        self,
        store: TierStore,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        ranking: Ranking = "similarity",
        prefix: str = "lg",
        memory_type: str = "fact",
        source: str = "langgraph",
    ) -> None:
        if not isinstance(store, TierStore):
            raise InvalidInputError(f"store must be a TierStore, got {type(store).__name__}")
        if ranking not in ("fused", "similarity"):
            raise InvalidInputError(f"ranking must be 'fused' or 'similarity', got {ranking!r}")
        policy = store.policy
        policy.type_index(memory_type)
        if not policy.types[memory_type].refresh_on_read:
            raise StoreConfigError(
                f"memory type {memory_type!r} does not refresh its TTL on read; LangGraph's "
                "refresh_ttl needs one that does (the default 'fact' does)"
            )
        check_adapter_policy(policy, "a LangGraph store")
        self.store = store
        self.prefix = check_prefix(prefix)
        self.ranking = ranking
        self.memory_type = memory_type
        self.source = source
        self.ttl_config = ttl
        self.index_config = index
        self.embeddings = None
        self._fields: list[tuple[str, Any]] = []
        if index is not None:
            dims = index.get("dims")
            if dims is not None and dims != store.dim:
                raise StoreConfigError(f"IndexConfig dims={dims} but the store's dimension is {store.dim}")
            self.embeddings = ensure_embeddings(index.get("embed"))
            self._fields = [(p, tokenize_path(p) if p != "$" else p) for p in (index.get("fields") or ["$"])]
        self._seq_lock = threading.Lock()
        self._last_seq = 0
        self._placeholder = np.zeros(store.dim, np.float32)
        self._placeholder[0] = 1.0  # the vector of an item that is not embedded (never ranked by it)

    # -- batch ------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: reads see the store as it was before the batch's puts,
        which apply last, the last put of a key winning (as InMemoryStore)."""
        ops = [_with_tuple_namespace(op) for op in ops]
        queries = [op.query for op in ops if isinstance(op, SearchOp) and op.query and self.embeddings]
        vectors = dict(zip(queries, self.embeddings.embed_documents(queries))) if queries else {}  # type: ignore[union-attr]
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op, vectors.get(op.query) if op.query else None))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise InvalidInputError(f"unknown operation {type(op).__name__}")
        if puts:
            self._apply_puts(list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (the store is thread-safe)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    # -- reads ------------------------------------------------------------

    def _omit_expired(self) -> bool:
        return bool(self.ttl_config and self.ttl_config.get("omit_expired"))

    def _visible(self, m: Memory, now: float) -> bool:
        """An item LangGraph would return: not archived (its TTL ran out and a
        sweep moved it), and not past its expiry when ``omit_expired``."""
        if m.tier == "cold":
            return False
        return not (self._omit_expired() and m.expires_at is not None and m.expires_at <= now)

    def _get(self, op: GetOp) -> Item | None:
        ns = encode(self.prefix, op.namespace)
        m = self.store.get(ns, op.key) if op.key else None
        if m is None or m.metadata is None or not self._visible(m, self.store.now()):
            return None
        if op.refresh_ttl:
            self._refresh(ns, [m])
        return _item(op.namespace, m, Item)

    def _refresh(self, ns: str, memories: Sequence[Memory]) -> None:
        """Restart the TTL of those of ``memories`` that have one (an access: it refreshes on read)."""
        ids = [m.id for m in memories if m.metadata and m.metadata.get("ttl") is not None]
        if ids:
            self.store.touch(ns, ids)

    def _namespaces(self) -> list[tuple[str, tuple[str, ...]]]:
        """``(tierstore namespace, LangGraph namespace)`` of this prefix, sorted by the tuple."""
        out = []
        for ns in self.store.namespaces():
            labels = decode(self.prefix, ns)
            if labels is not None:
                out.append((ns, labels))
        return sorted(out, key=lambda p: p[1])

    def _items_of(self, ns: str, now: float, with_embedding: bool) -> list[Memory]:
        """The visible items of ``ns`` in first-put order."""
        ms = [
            m
            for m in self.store.memories(ns, with_embedding=with_embedding)
            if m.metadata is not None and "value" in m.metadata and self._visible(m, now)
        ]
        return sorted(ms, key=lambda m: m.metadata["seq"])  # type: ignore[index]

    def _search(self, op: SearchOp, query_vector: Sequence[float] | None) -> list[SearchItem]:
        flt = check_filter(op.filter)
        if not isinstance(op.limit, int) or not isinstance(op.offset, int) or op.limit < 0 or op.offset < 0:
            raise InvalidInputError(f"limit and offset must be non-negative integers, got {op.limit!r}, {op.offset!r}")
        now = self.store.now()
        n = len(op.namespace_prefix)
        chosen = [(ns, t) for ns, t in self._namespaces() if t[:n] == op.namespace_prefix]
        use_query = query_vector is not None
        found: list[tuple[str, tuple[str, ...], Memory]] = []
        for ns, labels in chosen:
            for m in self._items_of(ns, now, with_embedding=use_query and self.ranking == "similarity"):
                if matches(m.metadata["value"], flt):  # type: ignore[index]
                    found.append((ns, labels, m))
        page: list[tuple[float | None, tuple[str, tuple[str, ...], Memory]]]
        if not use_query:
            page = [(None, f) for f in found[op.offset : op.offset + op.limit]]
        else:
            scored, scoreless = self._rank(found, np.asarray(query_vector, np.float32))
            page = [(s, f) for s, f in scored[op.offset : op.offset + op.limit]]
            if scoreless and len(page) < op.limit:  # as InMemoryStore: unembedded items fill the page
                page += [(None, f) for f in scoreless[: op.limit - len(page)]]
        if op.refresh_ttl:
            by_ns: dict[str, list[Memory]] = {}
            for _, (ns, _, m) in page:
                by_ns.setdefault(ns, []).append(m)
            for ns, ms in by_ns.items():
                self._refresh(ns, ms)
        out = []
        for score, (_, labels, m) in page:
            item = _item(labels, m, SearchItem)
            item.score = score
            out.append(item)
        return out

    def _rank(
        self, found: list[tuple[str, tuple[str, ...], Memory]], q: np.ndarray
    ) -> tuple[list[tuple[float, Any]], list[Any]]:
        """Embedded items ranked (best first; ties in first-put order) with
        their scores, and the items without an embedding."""
        embedded = [f for f in found if f[2].metadata["indexed"]]  # type: ignore[index]
        scoreless = [f for f in found if not f[2].metadata["indexed"]]  # type: ignore[index]
        if not embedded:
            return [], scoreless
        if self.ranking == "similarity":
            qn = q.astype(np.float64) / np.linalg.norm(q)
            sims = [best_cosine(f[2].metadata, f[2].embedding, qn) for f in embedded]  # type: ignore[arg-type]
            order = sorted(range(len(embedded)), key=lambda i: -sims[i])
            return [(sims[i], embedded[i]) for i in order], scoreless
        # fused: the store's own ranking of each namespace whole (search clamps k
        # to what the namespace holds), merged by score
        scores: dict[tuple[str, str], float] = {}
        for ns in dict.fromkeys(f[0] for f in embedded):
            for h in self.store.search(ns, q, k=1 << 30, include_cold=False, record_access=False):
                scores[(ns, h.id)] = h.score
        ranked = [(scores[(f[0], f[2].id)], i) for i, f in enumerate(embedded) if (f[0], f[2].id) in scores]
        ranked.sort(key=lambda p: (-p[0], p[1]))
        return [(s, embedded[i]) for s, i in ranked], scoreless

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        now = self.store.now()
        names = [t for ns, t in self._namespaces() if self._items_of(ns, now, with_embedding=False)]
        if op.match_conditions:
            names = [t for t in names if all(_matches(c, t) for c in op.match_conditions)]
        if op.max_depth is not None:
            names = sorted({t[: op.max_depth] for t in names})
        return names[op.offset : op.offset + op.limit]

    # -- writes -----------------------------------------------------------

    def _next_seq(self) -> int:
        with self._seq_lock:
            self._last_seq = max(self._last_seq + 1, time.time_ns())
            return self._last_seq

    def _apply_puts(self, puts: list[PutOp]) -> None:
        texts: list[list[str]] = []
        for op in puts:
            texts.append(self._texts(op) if op.value is not None else [])
        flat = [t for ts in texts for t in ts]
        vectors = iter(self.embeddings.embed_documents(flat)) if flat else iter(())  # type: ignore[union-attr]
        now = self.store.now()
        for op, ts in zip(puts, texts):
            ns = encode(self.prefix, op.namespace)
            old = self.store.get(ns, op.key) if op.key else None
            if op.value is None:
                if old is not None:
                    self.store.delete(ns, op.key)
                continue
            if not isinstance(op.value, dict):
                raise InvalidInputError(f"an item's value is a dict, got {type(op.value).__name__}")
            vs = [np.asarray(next(vectors), np.float64) for _ in ts]
            if op.ttl is not None and (
                not isinstance(op.ttl, (int, float)) or not op.ttl > 0 or not math.isfinite(op.ttl)
            ):
                raise InvalidInputError(f"ttl is a positive number of minutes, got {op.ttl!r}")
            # the metadata of the earlier version, whose bookkeeping (created_at, seq, vectors) carries over
            kept = (
                old.metadata
                if old is not None and old.tier != "cold" and old.metadata is not None and "seq" in old.metadata
                else None
            )
            # As InMemoryStore: a put with index=False leaves the vector an earlier put made
            stale = (
                not vs
                and op.index is False
                and kept is not None
                and kept.get("indexed")
                and old is not None
                and old.embedding is not None
            )
            created = kept["created_at"] if kept is not None else now
            meta: dict[str, Any] = {
                "value": op.value,
                "created_at": created,
                "updated_at": now,
                "seq": kept["seq"] if kept is not None else self._next_seq(),
                "indexed": bool(vs) or bool(stale),
                "ttl": op.ttl,
            }
            units = unit_rows(vs) if vs else None
            if units is not None and len(units) > 1:
                meta[VECTORS_KEY] = encode_vectors(units)
            elif stale and kept is not None and kept.get(VECTORS_KEY):
                meta[VECTORS_KEY] = kept[VECTORS_KEY]
            try:
                check_metadata(meta)  # JSON values only: InvalidInputError before anything changes
            except InvalidInputError as exc:
                if VECTORS_KEY not in meta:
                    raise
                raise InvalidInputError(
                    f"item {op.key!r} of {op.namespace!r}: its {len(meta[VECTORS_KEY])} indexed texts' "
                    f"vectors (dimension {self.store.dim}) are kept with it and do not fit: {exc}; index fewer "
                    "fields (IndexConfig fields, or put(index=[...]))"
                ) from None
            if units is not None:
                emb = units.mean(axis=0)
                content = "\n".join(ts)
            elif stale and old is not None:
                emb = old.embedding
                content = old.content
            else:
                emb = self._placeholder
                content = json.dumps(op.value, ensure_ascii=False, sort_keys=True)
            item: dict[str, Any] = {
                "content": content if content.strip() else "{}",
                "embedding": emb,
                "id": op.key,
                "memory_type": self.memory_type,
                "source": self.source,
                "confidence": 1.0,
                "metadata": meta,
            }
            if op.ttl is None:
                item["pinned"] = True
            else:
                item["ttl_seconds"] = float(op.ttl) * 60.0
            # an existing item is replaced in one transaction: readers and crashes see one version or the other
            self.store.upsert_batch(ns, [item])

    def _texts(self, op: PutOp) -> list[str]:
        """The texts of ``op.value`` to embed (none: the item is not embedded)."""
        if self.embeddings is None or op.index is False:
            return []
        fields = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        out: list[str] = []
        for _path, tokens in fields:
            out += get_text_at_path(op.value, tokens)
        return out

    # -- TTL --------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Run the store's sweep (every namespace's due work, TTLs included);
        returns how many memories left for the cold tier or were deleted."""
        report = self.store.sweep()
        return report.archived + report.deleted

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> None:
        """Sweep in the background every ``sweep_interval_minutes`` (default:
        ``ttl_config["sweep_interval_minutes"]``, else 5): the store's migrator."""
        minutes = sweep_interval_minutes
        if minutes is None:
            minutes = (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        if not isinstance(minutes, (int, float)) or not minutes > 0:
            raise InvalidInputError(f"sweep_interval_minutes must be a positive number, got {minutes!r}")
        self.store.start_migrator(interval_s=float(minutes) * 60.0)

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the background sweeper; True once it has stopped."""
        self.store.stop_migrator(timeout=30.0 if timeout is None else timeout)
        return True


def _with_tuple_namespace(op: Op) -> Op:
    """``op`` with its namespace (or prefix, or match paths) as a checked
    tuple: LangGraph's stores accept lists too (``store.search(["users"])``)."""
    if isinstance(op, (GetOp, PutOp)):
        return op._replace(namespace=check_labels(op.namespace))
    if isinstance(op, SearchOp):
        return op._replace(namespace_prefix=check_labels(op.namespace_prefix, allow_empty=True))
    if isinstance(op, ListNamespacesOp) and op.match_conditions:
        return op._replace(
            match_conditions=tuple(
                c._replace(path=check_labels(c.path, allow_empty=True)) if isinstance(c, MatchCondition) else c
                for c in op.match_conditions
            )
        )
    return op


def _item(labels: tuple[str, ...], m: Memory, cls: Callable[..., Any]) -> Any:
    meta = m.metadata or {}
    return cls(
        value=meta["value"],
        key=m.id,
        namespace=labels,
        created_at=datetime.fromtimestamp(meta["created_at"], UTC),
        updated_at=datetime.fromtimestamp(meta["updated_at"], UTC),
    )


def _matches(cond: MatchCondition, names: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(names) < len(path):
        return False
    if cond.match_type == "prefix":
        pairs = zip(names, path)
    elif cond.match_type == "suffix":
        pairs = zip(reversed(names), reversed(path))
    else:
        raise InvalidInputError(f"unsupported match type {cond.match_type!r}: 'prefix' or 'suffix'")
    return all(p == "*" or n == p for n, p in pairs)

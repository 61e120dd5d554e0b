"""Records returned to callers: Memory, Hit, Explain, SweepReport."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

TIER_NAMES = ("hot", "warm", "cold")


@dataclass(frozen=True, slots=True)
class Memory:
    """A snapshot of one memory. Times are POSIX seconds; ``confidence`` is the
    current (decayed) confidence in [0, 1]; ``weight`` is the decayed weight at
    the time of the snapshot; ``expires_at``/``due_at`` are ``None`` for never.
    ``embedding`` is the stored (L2-normalised) vector; search hits leave it
    ``None`` (use :meth:`TierStore.get`). ``metadata`` is the caller's
    free-form JSON (``add(metadata=...)``, a fresh dict per snapshot; ``None``
    when none was given), on every snapshot, hits included. ``key`` is the memory's slot
    (``add(key=...)``) and ``superseded_by`` the id of the memory that
    superseded it (explicitly, by key or automatically), while that holds;
    both are filled by :meth:`TierStore.get`, :meth:`TierStore.get_by_key` and
    the listings (:meth:`TierStore.memories`, ``memories_page``), and left
    ``None`` on search hits (an explained hit's ``explain`` carries
    ``superseded_by``)."""

    id: str
    namespace: str
    content: str
    memory_type: str
    created_at: float
    last_accessed_at: float
    access_count: int
    confidence: float
    source: str
    tags: tuple[str, ...]
    ttl_seconds: float | None
    pinned: bool
    tier: str
    weight: float
    expires_at: float | None
    due_at: float | None
    embedding: np.ndarray | None = field(default=None, repr=False, compare=False)
    key: str | None = None
    superseded_by: str | None = None
    metadata: dict[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True, slots=True)
class Explain:
    """Why a hit scored what it did.

    ``raw``: similarity (cosine), recency (2^(-age/half-life)), confidence
    (current), context (raw multiplier), weight (decayed W); for a type ranked
    without its use (policy ``types.<t>.ranked_by_use`` false) recency is 1,
    weight the type's W0 and confidence as last stated. ``normalised``:
    the same five in [0, 1] as the score uses them. ``weights``: the factor
    weights (weighted-sum mode). ``terms``: each factor's contribution; in
    weighted-sum mode they sum to ``score``, in product mode their product is
    ``score``. ``reached_because``: for a cold hit, why the search reached the
    cold tier (hot and warm answered weakly, or ``include_cold=True``).
    ``superseded_by``: the id of the memory that superseded this one, if one
    did; ``supersession`` says how (``"explicit"``, ``"key <key>"`` or
    ``"auto, similarity 0.930"``): a superseded memory was damped and expires
    at the next sweep; from the moment of the mark its score is multiplied by
    ``superseded_factor`` (policy ``supersession.superseded_factor``) and it
    ranks after the memory that superseded it whenever both are hits.
    ``resolution``: query-time resolution moved this hit (a newer statement
    of the same type that answers about as well ranks before an older one;
    policy ``supersession.resolve_margin``): what it was placed before, or
    what was placed before it."""

    mode: str
    raw: dict[str, float]
    normalised: dict[str, float]
    weights: dict[str, float]
    terms: dict[str, float]
    score: float
    tier: str
    reached_because: str | None = None  # a cold hit: why the search went to the cold tier
    superseded_by: str | None = None
    supersession: str | None = None
    superseded_factor: float | None = None
    resolution: str | None = None

    def __str__(self) -> str:
        parts = " ".join(f"{k}={self.normalised[k]:.3f}" for k in self.normalised)
        out = f"{self.mode} score={self.score:.4f} [{parts}] tier={self.tier}"
        if self.reached_because:
            out += f" ({self.reached_because})"
        if self.superseded_by is not None:
            out += f" superseded_by={self.superseded_by} ({self.supersession})"
            if self.superseded_factor is not None:
                out += f" x{self.superseded_factor:g}"
        if self.resolution:
            out += f" [{self.resolution}]"
        return out


class Hit:
    """One search result: ``id``, ``score``, ``memory`` (a :class:`Memory`
    snapshot taken at search time, without the embedding) and ``explain``
    (the score breakdown, when asked for).

    A hit is a view of row ``j`` of the search's results (``source``: ids,
    scores and explanations, and a ``memory(j)`` that builds the Memory on
    first use from values captured during the search), so a search allocates
    little per hit. :meth:`of` makes one from plain values."""

    __slots__ = ("_source", "_j")

    def __init__(self, source: Any, j: int) -> None:
        self._source = source
        self._j = j

    @classmethod
    def of(cls, id: str, score: float, memory: Memory, explain: Explain | None = None) -> Hit:
        return cls(HitRows([id], [score], [explain], [memory]), 0)

    @property
    def id(self) -> str:
        return self._source.ids[self._j]

    @property
    def score(self) -> float:
        return self._source.scores[self._j]

    @property
    def explain(self) -> Explain | None:
        explains = self._source.explains
        return None if explains is None else explains[self._j]

    @property
    def memory(self) -> Memory:
        return self._source.memory(self._j)

    @property
    def content(self) -> str:
        """``memory.content``, read without building the Memory (cheaper for a hot hit)."""
        return self._source.content(self._j)

    @property
    def metadata(self) -> dict[str, Any] | None:
        """``memory.metadata``, read without building the Memory (a hot hit parses it anew each time)."""
        return self._source.metadata(self._j)

    def set_explain(self, explain: Explain) -> None:
        """Replace this hit's explanation (the store adds what a search's
        columns do not hold, e.g. a supersession)."""
        self._source.explains[self._j] = explain

    def __repr__(self) -> str:
        return (
            f"Hit(id={self.id!r}, score={self.score:.6g}, tier={self.memory.tier!r},"
            f" content={self.memory.content[:40]!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Hit):
            return NotImplemented
        return (self.id, self.score, self.memory) == (other.id, other.score, other.memory)

    __hash__ = None  # type: ignore[assignment]


class HitRows:
    """The rows behind some hits, all built: ids, scores, explanations (or
    ``None`` when not asked for) and memories."""

    __slots__ = ("ids", "scores", "explains", "memories")

    def __init__(
        self, ids: list[str], scores: list[float], explains: list[Explain | None] | None, memories: list[Memory]
    ) -> None:
        self.ids = ids
        self.scores = scores
        self.explains = explains
        self.memories = memories

    def memory(self, j: int) -> Memory:
        return self.memories[j]

    def content(self, j: int) -> str:
        return self.memories[j].content

    def metadata(self, j: int) -> dict[str, Any] | None:
        return self.memories[j].metadata


@dataclass
class SweepReport:
    """What one migrator pass looked at and did. ``examined`` counts the due
    rows read from the catalog (never the whole store)."""

    now: float
    dry_run: bool = False  # counted what is due and what would be done; changed nothing
    examined: int = 0
    kept: int = 0
    demoted: int = 0
    archived: int = 0
    deleted: int = 0
    compacted: int = 0  # archive objects rewritten without their stale records
    remaining_due: int = 0
    elapsed_s: float = 0.0
    by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "dry_run": self.dry_run,
            "examined": self.examined,
            "kept": self.kept,
            "demoted": self.demoted,
            "archived": self.archived,
            "deleted": self.deleted,
            "compacted": self.compacted,
            "remaining_due": self.remaining_due,
            "elapsed_s": self.elapsed_s,
            "by_type": self.by_type,
            "errors": list(self.errors),
        }


@dataclass
class Stats:
    """Counts per tier and per type, plus engine figures."""

    total: int
    by_tier: dict[str, int]
    by_type: dict[str, dict[str, int]]
    namespaces: int
    pinned: int
    due_now: int
    hot_loaded: dict[str, str]  # namespace -> "exact" or "hnsw"
    catalog_commits: int
    lifecycle: dict[str, Any] = field(default_factory=dict)
    # bytes held in memory by part: "hot" (loaded namespaces' columns, texts, ids, graphs),
    # "warm_cache" (loaded warm shards), "cold_codes" (loaded archive codes), "vector_cache"
    # (archived vectors read); each cache is bounded by its setting
    memory_bytes: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_tier": dict(self.by_tier),
            "by_type": {k: dict(v) for k, v in self.by_type.items()},
            "namespaces": self.namespaces,
            "pinned": self.pinned,
            "due_now": self.due_now,
            "hot_loaded": dict(self.hot_loaded),
            "catalog_commits": self.catalog_commits,
            "lifecycle": self.lifecycle,
            "memory_bytes": dict(self.memory_bytes),
        }

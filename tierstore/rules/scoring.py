"""The policy as kernel inputs: per-type arrays, query contexts, explanations."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import mul

import numpy as np

from tierstore.kernels import columns as C
from tierstore.kernels import pack_access, pack_query
from tierstore.policy import SCORE_FACTORS, USE_FACTORS, Policy
from tierstore.records import Explain
from tierstore.rules.tags import TagVocab
from tierstore.storage.lru import LRU

_MAX_CONTEXTS = 4096  # query contexts (distinct sets of context tags) kept, least recently used out first
_EMPTY_I32 = np.empty(0, np.int32)
_EMPTY_F64 = np.empty(0, np.float64)


@dataclass(frozen=True)
class QueryContext:
    """Kernel inputs derived from a set of active context tags."""

    tags: tuple[str, ...]
    q_tags: np.ndarray  # sorted int32 ids of the context tags
    rule_tags: np.ndarray  # sorted int32 ids of memory tags with a retrieval multiplier
    rule_mult: np.ndarray  # float64 multiplier per rule_tags entry
    mask_tags: np.ndarray  # sorted int32 ids of memory tags masked in this context
    ctx_max: float  # largest raw context factor a memory can reach in this context
    ttl_tags: np.ndarray  # sorted int32 ids of memory tags with a TTL multiplier
    ttl_mult: np.ndarray
    # rerank parameters (without the time and the confidence filter), the
    # initial weights and the tag sets packed for rank_and_gather
    # (kernels.pack_query): float vectors [0] for candidate cosines, [1] for
    # inner-product distances, and the int32 tags (read-only; copy to change)
    packed: tuple[np.ndarray, np.ndarray]
    packed_tags: np.ndarray


def _sorted_pairs(d: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    if not d:
        return _EMPTY_I32, _EMPTY_F64
    keys = sorted(d)
    return np.array(keys, np.int32), np.array([d[k] for k in keys], np.float64)


class CompiledPolicy:
    """A :class:`Policy` turned into the arrays the kernels read."""

    def __init__(self, policy: Policy, vocab: TagVocab) -> None:
        self.policy = policy
        self.vocab = vocab
        types = list(policy.types.values())
        self.type_names = policy.type_names
        self.boost_by_type = np.array([t.boost for t in types], np.float64)
        self.refresh_by_type = np.array([1 if t.refresh_on_read else 0 for t in types], np.uint8)
        self.deletes_by_type = np.array([1 if t.sweep_deletes else 0 for t in types], np.uint8)
        self._deletes_by_name = {n: int(t.sweep_deletes) for n, t in policy.types.items()}
        self.w0_by_type = np.array([t.initial_weight for t in types], np.float64)
        # what the rerank kernel reads: W0, negated for a type ranked without its use
        self.rank_w0_by_type = np.array(
            [t.initial_weight if t.ranked_by_use else -t.initial_weight for t in types], np.float64
        )
        self.half_life_by_type = np.array([t.half_life_seconds for t in types], np.float64)
        self.ttl_by_type = np.array([math.inf if t.ttl_seconds is None else t.ttl_seconds for t in types], np.float64)
        th = policy.thresholds
        self.thresholds = np.array([th.demote, th.archive, th.delete, th.delete_below_confidence], np.float64)
        decay = policy.confidence.decay_half_life_seconds
        self.conf_half_life = math.inf if decay is None else float(decay)
        # the same, packed for the hot search's kernel, which records the hits' accesses itself
        self.access = pack_access(
            self.thresholds, self.conf_half_life, self.boost_by_type, self.refresh_by_type, self.deletes_by_type
        )
        sc = policy.scoring
        self.mode = sc.mode
        total = sum(sc.weights.get(f, 0.0) for f in SCORE_FACTORS)
        self.weights = {f: sc.weights.get(f, 0.0) / total for f in SCORE_FACTORS}
        self._weight_values = [self.weights[f] for f in SCORE_FACTORS]
        base = np.zeros(C.NP, np.float64)
        base[C.P_CONF_HALF_LIFE] = self.conf_half_life
        base[C.P_MODE] = C.MODE_PRODUCT if sc.mode == "product" else C.MODE_WEIGHTED_SUM
        base[C.P_RECENCY_HALF_LIFE] = sc.recency_half_life_seconds
        base[C.P_FLOOR] = sc.floor
        base[C.P_CONTEXT_BONUS] = sc.context_bonus
        for i, f in enumerate(SCORE_FACTORS):
            base[C.P_WEIGHTS + i] = self.weights[f]
        sup = policy.supersession
        base[C.P_SUPERSEDED_DEMOTION] = 1.0 - sup.superseded_factor
        # marks rank at once (a superseded memory after its successor, and a
        # cold-search hit); with a factor of 1 a mark only makes it expire
        self.marks_rank = sup.superseded_factor < 1.0
        self.resolve_margin = -1.0 if sup.resolve_margin is None else sup.resolve_margin
        tag_margin = sup.resolve_margin if sup.resolve_margin_shared_tag is None else sup.resolve_margin_shared_tag
        self.resolve_tag_margin = -1.0 if tag_margin is None else tag_margin
        self.resolve_min_gap = sup.resolve_min_gap
        self.resolve_conf_margin = sup.confidence_margin
        self.resolve_word_margin = -1.0 if sup.resolve_margin_same_wording is None else sup.resolve_margin_same_wording
        self.resolves = sup.resolve_margin is not None or tag_margin is not None
        base[C.P_RESOLVE] = 1.0 if self.resolves else 0.0
        base[C.P_RESOLVE_MARGIN] = self.resolve_margin
        base[C.P_RESOLVE_TAG_MARGIN] = self.resolve_tag_margin
        base[C.P_RESOLVE_MIN_GAP] = self.resolve_min_gap
        base[C.P_RESOLVE_CONF_MARGIN] = self.resolve_conf_margin
        self._base_params = base
        self.cold_by_relevance = sc.cold_order == "relevance"
        # relevance: the fused score without the use factors (recency, weight)
        keep = [f not in USE_FACTORS for f in SCORE_FACTORS]
        self._relevance_mask = np.array(keep)
        kept = sum(w for w, k in zip(self._weight_values, keep) if k)
        self._relevance_weights = np.array(
            [w / kept if k and kept > 0 else 0.0 for w, k in zip(self._weight_values, keep)]
        )
        self.all_types = np.ones(len(types), np.uint8)  # type_allowed(None); callers only read it
        self._contexts: LRU[frozenset[str], QueryContext] = LRU(_MAX_CONTEXTS)
        self._lock = threading.Lock()
        # context(()): no tags, so nothing of the vocabulary is needed yet
        self.empty_context = self._build_context(())

    # -- per-memory lifetime ------------------------------------------------

    def half_life(self, type_idx: int, confidence: float, ctx_mult: float) -> float:
        """Effective half-life (seconds): the type's, scaled by confidence and context."""
        return float(self.half_life_by_type[type_idx]) * self.policy.half_life_scale(confidence) * ctx_mult

    def ttl(self, type_idx: int, confidence: float, ttl_override: float | None, ctx_mult: float) -> float:
        """Effective TTL (seconds, +inf: never). An explicit per-memory TTL is
        taken as given (no confidence scaling); context multipliers apply to both."""
        if ttl_override is not None and not math.isnan(ttl_override):
            return ttl_override * ctx_mult
        base = float(self.ttl_by_type[type_idx])
        if math.isinf(base):
            return math.inf
        return base * self.policy.ttl_scale(confidence) * ctx_mult

    def deletes_of(self, memory_types: Iterable[str]) -> np.ndarray:
        """The kernels' ``deletes`` column for memories of these types (int64:
        1 if the sweep may delete them, the type's ``sweep_deletes``)."""
        return np.array([self._deletes_by_name[t] for t in memory_types], np.int64)

    def half_lives(self, type_idx: np.ndarray, confidence: np.ndarray, ctx_mult: np.ndarray) -> np.ndarray:
        """:meth:`half_life` for arrays."""
        f = self.policy.confidence.half_life_floor
        return self.half_life_by_type[type_idx] * (f + (1.0 - f) * confidence) * ctx_mult

    def ttls(
        self, type_idx: np.ndarray, confidence: np.ndarray, ttl_override: np.ndarray, ctx_mult: np.ndarray
    ) -> np.ndarray:
        """:meth:`ttl` for arrays (``ttl_override`` NaN where absent)."""
        f = self.policy.confidence.ttl_floor
        with np.errstate(invalid="ignore"):  # inf * scale stays inf
            by_type = self.ttl_by_type[type_idx] * (f + (1.0 - f) * confidence)
        return np.where(np.isnan(ttl_override), by_type, ttl_override) * ctx_mult

    # -- queries ------------------------------------------------------------

    def type_allowed(self, memory_types: Iterable[str] | None) -> np.ndarray:
        if memory_types is None:
            return self.all_types
        allowed = np.zeros(len(self.type_names), np.uint8)
        for t in memory_types:
            allowed[self.policy.type_index(t)] = 1
        return allowed

    def params(self, now: float, min_confidence: float, ctx: QueryContext) -> np.ndarray:
        """The rerank parameter vector (``P_*``) of one query over candidate cosines."""
        p = ctx.packed[0][: C.NP].copy()
        p[C.P_NOW] = now
        p[C.P_MIN_CONF] = min_confidence
        return p

    def context(self, tags: Sequence[str]) -> QueryContext:
        """Kernel inputs for the active context ``tags`` (cached)."""
        if not tags:
            return self.empty_context
        key = frozenset(tags)
        with self._lock:
            hit = self._contexts.get(key)
            if hit is not None:
                return hit
        ctx = self._build_context(tuple(sorted(key)))
        with self._lock:
            # built by another thread meanwhile: replaced in its place, as a dict assignment does
            self._contexts.put(key, ctx, touch=False)
        return ctx

    def _build_context(self, tags: tuple[str, ...]) -> QueryContext:
        vocab = self.vocab
        pol = self.policy
        active = set(tags)
        retrieval: dict[int, float] = {}
        ttl: dict[int, float] = {}
        for rule in pol.context_rules:
            if rule.when not in active:
                continue
            for t in rule.tags:
                i = vocab.id(t)
                retrieval[i] = retrieval.get(i, 1.0) * rule.retrieval_multiplier
                ttl[i] = ttl.get(i, 1.0) * rule.ttl_multiplier
        masked: set[int] = set()
        for mrule in pol.mask_rules:
            if mrule.when in active:
                masked.update(vocab.id(t) for t in mrule.tags)
        if pol.mask_tag_prefix:
            masked.update(vocab.id(pol.mask_tag_prefix + c) for c in active)
        # Ids are assigned (not just looked up) so that a memory loaded later
        # with one of these tags gets the same id and the cached context stays right.
        q_ids = sorted({vocab.id(t) for t in tags})
        rule_tags, rule_mult = _sorted_pairs(retrieval)
        ttl_tags, ttl_mult = _sorted_pairs(ttl)
        boost = math.prod(m for m in retrieval.values() if m > 1.0) if retrieval else 1.0
        ctx_max = (1.0 + pol.scoring.context_bonus * len(q_ids)) * max(1.0, boost)
        q_tags = np.array(q_ids, np.int32)
        mask_tags = np.array(sorted(masked), np.int32)
        packed = []
        for distance in (0.0, 1.0):
            p = self._base_params.copy()
            p[C.P_CTX_MAX] = ctx_max
            p[C.P_DISTANCE] = distance
            qf, qi = pack_query(p, self.rank_w0_by_type, q_tags, rule_tags, rule_mult, mask_tags)
            qf.flags.writeable = qi.flags.writeable = False
            packed.append(qf)
        return QueryContext(
            tags=tags,
            q_tags=q_tags,
            rule_tags=rule_tags,
            rule_mult=rule_mult,
            mask_tags=mask_tags,
            ctx_max=ctx_max,
            ttl_tags=ttl_tags,
            ttl_mult=ttl_mult,
            packed=(packed[0], packed[1]),
            packed_tags=qi,
        )

    def ttl_multiplier(self, ctx: QueryContext, tag_ids: Iterable[int]) -> float:
        """Context TTL multiplier of one memory (product over its matched tags)."""
        m = 1.0
        if ctx.ttl_tags.shape[0] == 0:
            return m
        lookup = dict(zip(ctx.ttl_tags.tolist(), ctx.ttl_mult.tolist()))
        for t in tag_ids:
            m *= lookup.get(t, 1.0)
        return m

    def relevance(self, norm: np.ndarray) -> np.ndarray:
        """The fused score of each row of normalised factors ``norm`` (n, 5)
        without the use factors (recency and weight): in weighted-sum mode the
        other factors' weighted mean (their weights renormalised), in product
        mode their product. In [0, 1]."""
        if norm.shape[0] == 0:
            return np.empty(0)
        if self.mode == "product":
            return np.prod(norm[:, self._relevance_mask], axis=1)
        return norm @ self._relevance_weights

    # -- explanations -------------------------------------------------------

    def explain(self, raw: Sequence[float], norm: Sequence[float], score: float, tier: str) -> Explain:
        """One hit's breakdown from its raw and normalised factors (Python
        floats, in SCORE_FACTORS order). Runs once per hit of an explained
        search: C-level dict building, positional fields."""
        norm_d = dict(zip(SCORE_FACTORS, norm))
        if self.mode == "product":
            terms = norm_d.copy()
        else:
            terms = dict(zip(SCORE_FACTORS, map(mul, self._weight_values, norm)))
        return Explain(self.mode, dict(zip(SCORE_FACTORS, raw)), norm_d, self.weights.copy(), terms, float(score), tier)

"""The forgetting policy: data, not code.

A :class:`Policy` says how long each type of memory lives, how fast its weight
decays, how confidence and context stretch or shorten that life, when a memory
is demoted, archived or deleted, and how search ranks hits. It loads from a
dict or a TOML file; every error names the offending key.

Units: durations are seconds (TOML files may also write ``"90m"``, ``"36h"``,
``"30d"``, ``"2w"``); weights, confidences and thresholds are plain numbers,
confidences in [0, 1].
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from os import PathLike
from pathlib import Path
from typing import Any

from tierstore.errors import PolicyError
from tierstore.rules.dedupe import DEDUPE_MODES

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY

SCORING_MODES = ("product", "weighted_sum")
SCORE_FACTORS = ("similarity", "recency", "confidence", "context", "weight")
USE_FACTORS = ("recency", "weight")  # the factors that say how recently and how much a memory was used


@dataclass(frozen=True)
class TypePolicy:
    """Lifetime of one memory type.

    ttl_seconds: lifetime before expiry (``None``: never expires by age).
    half_life_seconds: time for the decayed weight to halve without use.
    boost: weight added by each access.
    initial_weight: weight at creation (W0).
    refresh_on_read: whether an access restarts the TTL.
    supersede_above: automatic supersession (see :mod:`tierstore.rules.auto_supersession`):
    a new memory of this type whose cosine similarity to a live one of the
    same type is at least this supersedes it (``None``: off).
    supersede_above_shared_tag: the same when the two share a tag (``None``:
    ``supersede_above`` applies to them too); at most ``supersede_above``.
    ranked_by_use: whether search ranks a memory of this type by its use
    (the recency and weight factors, and confidence decayed since its last
    feedback). False: those factors are neutral (recency and weight 1,
    confidence as last stated or confirmed) in the ranking, so a fact
    nobody asked about for weeks ranks by how well it answers; its lifetime
    (TTL, decay, migration) is unchanged.
    sweep_deletes: whether the sweep may delete a memory of this type (once
    its weight is below ``thresholds.delete`` and its decayed confidence below
    ``thresholds.delete_below_confidence``). False: it is archived instead and
    stays in the cold tier, findable and restorable, until the caller deletes
    it; supersession and feedback still rank it as they would.
    """

    ttl_seconds: float | None
    half_life_seconds: float
    boost: float = 0.5
    initial_weight: float = 1.0
    refresh_on_read: bool = False
    supersede_above: float | None = None
    supersede_above_shared_tag: float | None = None
    ranked_by_use: bool = True
    sweep_deletes: bool = True


@dataclass(frozen=True)
class Thresholds:
    """Decayed-weight thresholds of the migrator (demote > archive > delete).

    A hot memory whose weight falls to ``demote`` or below moves to warm; to
    ``archive`` or below (from hot or warm), to cold. A memory is deleted only
    when its weight is at or below ``delete`` *and* its (decayed) confidence at
    or below ``delete_below_confidence``; an expired memory is archived, or
    deleted if its confidence is at or below that bar. Pinned memories are
    never touched. A threshold of 0 turns its rule off (``delete = 0``: no
    weight-based deletion; ``delete_below_confidence = 0``: no deletion).
    """

    demote: float = 0.3
    archive: float = 0.1
    delete: float = 0.01
    delete_below_confidence: float = 0.3


@dataclass(frozen=True)
class ConfidencePolicy:
    """How confidence is formed, moves, and shortens a memory's life.

    Fused confidence is ``(a·llm + b·rule + g·feedback) / (a + b + g)`` over the
    signals present: ``llm`` is the caller's estimate (``add(confidence=...)``),
    ``rule`` the default for the memory's source (absent for unknown sources),
    ``feedback`` appears with the first feedback, starting from
    ``feedback_initial`` (``None``: from the memory's confidence at that
    moment, so that positive feedback never lowers it), and moves by
    ``feedback_step`` (explicit) or ``implicit_feedback_step`` of the distance
    to 1 (positive) or 0 (negative).

    A memory's TTL is scaled by ``ttl_floor + (1 - ttl_floor)·c`` and its
    half-life by ``half_life_floor + (1 - half_life_floor)·c``: a guess lives
    shorter than a certainty. Without positive feedback, confidence decays with
    ``decay_half_life_seconds`` (``None``: no decay).
    """

    llm_weight: float = 0.5
    rule_weight: float = 0.3
    feedback_weight: float = 0.2
    source_defaults: Mapping[str, float] = field(
        default_factory=lambda: {
            "user_declaration": 0.95,
            "user_confirmation": 0.99,
            "external_verified": 0.9,
            "tool_output": 0.85,
            "ai_summary": 0.8,
            "ai_inference": 0.7,
            "ai_guess": 0.6,
        }
    )
    feedback_initial: float | None = None
    feedback_step: float = 0.25
    implicit_feedback_step: float = 0.05
    negative_weight_penalty: float = 0.5
    ttl_floor: float = 0.25
    half_life_floor: float = 0.5
    decay_half_life_seconds: float | None = 180 * DAY


@dataclass(frozen=True)
class SupersessionPolicy:
    """Rules of automatic supersession common to every type (the per-type
    similarity bars are in :class:`TypePolicy`).

    confidence_margin: a new memory supersedes a live one automatically only
    if its confidence is at least the older one's current confidence minus
    this: a guess (confidence 0.5) never retires a user's statement (0.95),
    while a restatement need not beat a statement confirmed by feedback.
    """

    confidence_margin: float = 0.1
    # What a supersession mark does to ranking, from the moment it exists:
    # the superseded memory's score is multiplied by this, in (0, 1] (1: as
    # before, when a mark only made the memory expire at the next sweep),
    # and it is placed after the memory that superseded it whenever both
    # are hits; archived, it stays a cold-search hit (true history).
    superseded_factor: float = 0.5
    # Query-time resolution (issue 27): among a search's hits, a newer memory
    # of the same type whose similarity to the query is within this margin
    # of an older one's ranks before it: when two statements answer the
    # question about as well, the newer is more likely the current value.
    # Nothing is retired: the older stays a hit, after the newer, and its
    # explanation says why. None (TOML: false) turns it off.
    resolve_margin: float | None = 0.1
    # The margin when the two share a tag (a relation the caller named);
    # None: resolve_margin. At least resolve_margin.
    resolve_margin_shared_tag: float | None = 0.3
    # Two statements created closer together than this (seconds) are not
    # taken as one replacing the other: statements of one session describe
    # different things far more often than they correct each other.
    resolve_min_gap: float = 3600.0
    # A wider margin for two statements that share their wording (at least
    # two content words, half the shorter one's: "Frank works at Acme",
    # "Frank works at Globex"): the differing words are the value. None: off.
    resolve_margin_same_wording: float | None = None


# An older stored policy (before issue 27) read with these: a store keeps
# its behaviour unless the user opts in (Policy.from_stored_json).
SUPERSESSION_BEFORE_RESOLUTION = {
    "superseded_factor": 1.0,
    "resolve_margin": None,
    "resolve_margin_shared_tag": None,
    "resolve_margin_same_wording": None,
}
# scoring keys a store recorded before they existed, read with the behaviour
# of then: no archive estimate (issue 27), meaning alone (issue 28)
SCORING_BEFORE = {"cold_estimate": False, "keyword_weight": 0.0}


@dataclass(frozen=True)
class ContextRule:
    """While context ``when`` is active, memories carrying any of ``tags`` get
    their TTL and half-life multiplied by ``ttl_multiplier`` (the due times move)
    and their retrieval context factor by ``retrieval_multiplier``."""

    when: str
    tags: tuple[str, ...]
    ttl_multiplier: float = 1.0
    retrieval_multiplier: float = 1.0


@dataclass(frozen=True)
class MaskRule:
    """While context ``when`` is active, memories carrying any of ``tags`` are
    never returned by search. Memories tagged ``<mask_tag_prefix><context>``
    (the seed's ``_ignore_in_context_programming``) are masked without a rule."""

    when: str
    tags: tuple[str, ...]


@dataclass(frozen=True)
class ScoringPolicy:
    """How search ranks hits. Every factor is normalised to [0, 1].

    product: ``similarity × recency × confidence × context × weight``.
    weighted_sum: ``Σ w_f·factor_f / Σ w_f`` over the same five factors.

    similarity: cosine clipped to [0, 1]. recency: ``2^(-since_last_access /
    recency_half_life)``. confidence: current (decayed) confidence. context:
    ``(1 + context_bonus·matched_tags)·rule_multiplier`` divided by its largest
    possible value for the query. weight: decayed weight over the type's
    initial weight, capped at 1. recency, confidence and weight never drop
    below ``floor``, so decay damps a memory but never zeroes a result set.
    """

    # weighted_sum by default: measured on the forgetting-quality benchmark
    # (docs/benchmarks.md, suite g), product scoring lets recency and weight
    # overrule similarity, so rarely asked long-lived facts lose (recall@5
    # 0.42 against 0.82) — the seed's own warning about multiplying factors.
    mode: str = "weighted_sum"
    # Recency 0.05 (it was 0.15): with automatic supersession retiring
    # replaced statements, recency no longer has to tell a new value from an
    # old one, and at 0.15 a fact used yesterday outranked a rarely asked one
    # that matched the question clearly better (suite g: long-lived recall@5
    # 0.893 -> 0.992, live@1 0.749 -> 0.806, stale hits 0.058 -> 0.063;
    # suite h, with record_access_cold off: recall@10 0.818 -> 0.907,
    # stale-hit@1 0.140 -> 0.293 — docs/benchmarks.md, "Recency weight", has
    # every value tried).
    weights: Mapping[str, float] = field(
        default_factory=lambda: {
            "similarity": 0.65,
            "recency": 0.05,
            "confidence": 0.15,
            "context": 0.10,
            "weight": 0.05,
        }
    )
    recency_half_life_seconds: float = 7 * DAY
    floor: float = 0.02
    context_bonus: float = 0.2
    # 2k, at least 20: the forgetting-quality suite (g, MiniLM) scores the same
    # with 20, 30 or 40 candidates; fewer candidates are a cheaper search
    oversample: int = 2
    min_candidates: int = 20
    record_access: bool = True
    # Whether that access recording also reaches cold hits, which brings each
    # back hot (a reactivation). False (the default): a cold hit comes back
    # when it is used (touch) or restored, not because a search
    # returned it — otherwise every search that reaches the archive pulls its
    # k hits back into memory (suite h: 15 % of all turns hot at the end).
    record_access_cold: bool = False
    # Whether a search reaches the cold tier (archived memories, through their
    # codes and exact vectors): "auto" when the best hot or warm hit's cosine
    # similarity is below cold_similarity_bar (hot and warm answered weakly),
    # or always (true), or never (false). The bar is measured on two
    # workloads (docs/benchmarks.md, suites g and h): 0.6 matched 0.5 on h
    # and found 4 points more long-lived facts on g; 0.7 cost live@1 on g.
    include_cold: bool | str = "auto"
    cold_similarity_bar: float = 0.6
    # "auto" also reaches the cold tier when the archive may hold a memory
    # that matches as well as the hits found: the best archived memory's
    # similarity estimated from its sign code (no object-store read) is at
    # least the least similar hit's minus cold_estimate_slack. Without it, a
    # rarely asked fact, archived when its lifetime ran out, was found only
    # when nothing recent matched above the bar (suite i: issue 27).
    cold_estimate: bool = True
    cold_estimate_slack: float = 0.05
    # When the cold tier is searched, the archived memories more similar to the
    # query than every hot and warm hit rank first (among themselves by the
    # fused score), then the rest by the fused score: an archived memory that
    # matches better than anything recent is not buried under recent hits that
    # match worse (their recency and weight outweigh similarity otherwise).
    similar_first: bool = True
    # How archived memories are ordered among themselves (the cold pass's
    # choice of its k, and the similar-first group): "fused" (the default)
    # by the whole score; "relevance" leaves the use factors (recency,
    # weight) out, so that a memory re-used in passing (a greeting said every
    # day, deduplicated) does not outrank the one that answers — at the price
    # of newer statements no longer coming before older ones (suite h:
    # stale-hit@1 0.293 -> 0.400 at the same recall; docs/benchmarks.md).
    cold_order: str = "fused"
    # The keyword signal (issue 28): when a search has text, its similarity
    # factor is ``(1 - keyword_weight)·cosine + keyword_weight·keywords``,
    # keywords being the memory's BM25 over the query's words relative to
    # the best of the query's, above a floor (tierstore/core/hybrid.py); chosen on
    # suite h and a chat log (docs/benchmarks.md, issue 28). 0: meaning alone. A
    # policy stored before this key existed is read with 0 (keywords.stored_policy).
    keyword_weight: float = 0.2


def _default_types() -> dict[str, TypePolicy]:
    return {
        # Half-lives are shorter than TTLs on purpose: an unused memory leaves
        # the hot tier (demote at weight 0.3, ~1.7 half-lives) before it expires.
        "conversation": TypePolicy(HOUR, 20 * MINUTE, 0.5, 1.0, False),
        # Automatic supersession at write time is off for every type (it was
        # 0.7 / 0.6 for facts and preferences): similarity cannot tell
        # another value of a relation from a new one, and on suite i it
        # retired true facts (a second allergy retired the first). Query-time
        # resolution (SupersessionPolicy.resolve_margin) ranks the newer of
        # two statements first instead, and retires nothing. The bars stay
        # available per type; docs/benchmarks.md (suites g, h, i), issue 27.
        # A fact is ranked by how well it answers, not by how recently it
        # was used (ranked_by_use False): a true fact asked about once a
        # month otherwise loses its place in the top 5 to facts and chatter
        # used yesterday (suite i: 0.851 of the multi-valued facts plain
        # similarity finds kept, 1.000 without; suite g: long-lived
        # recall@5 0.988 -> 1.000, noise@1 0.032 -> 0.017;
        # docs/benchmarks.md, issue 27, "Facts ranked without use").
        # A fact holds until something replaces it: the sweep cannot know that
        # it stopped being true (a birthday, an allergy asked about twice a
        # year), so a fact nobody used is archived, never deleted by time
        # alone (docs/scale.md: the deletes from day 260 of the platform year).
        "fact": TypePolicy(30 * DAY, 10 * DAY, 0.5, 1.0, True, ranked_by_use=False, sweep_deletes=False),
        "preference": TypePolicy(7 * DAY, 3 * DAY, 0.5, 1.0, True),
        "task": TypePolicy(2 * DAY, DAY, 0.5, 1.0, False),
        "opinion": TypePolicy(3 * DAY, DAY, 0.5, 1.0, False),
    }


@dataclass(frozen=True)
class Policy:
    """The whole forgetting policy. Immutable; build a new one to change it."""

    types: Mapping[str, TypePolicy] = field(default_factory=_default_types)
    thresholds: Thresholds = field(default_factory=Thresholds)
    confidence: ConfidencePolicy = field(default_factory=ConfidencePolicy)
    context_rules: tuple[ContextRule, ...] = ()
    mask_rules: tuple[MaskRule, ...] = ()
    mask_tag_prefix: str = "_ignore_in_context_"
    scoring: ScoringPolicy = field(default_factory=ScoringPolicy)
    # re-adding the same content (normalised) in the same namespace and type
    # reinforces the existing memory: "exact", or "off" (see tierstore.rules.dedupe)
    dedupe: str = "exact"
    supersession: SupersessionPolicy = field(default_factory=SupersessionPolicy)

    # -- construction -------------------------------------------------------

    @classmethod
    def default(cls) -> Policy:
        """The seed's defaults: conversation 1 h, fact 30 d, preference 7 d,
        task 2 d, opinion 3 d."""
        return cls()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """Build a policy from defaults overridden by ``data``.

        Keys absent from ``data`` keep their default; an existing memory type
        may override some of its fields; a new type must give ``ttl`` and
        ``half_life``. Raises :class:`PolicyError` naming the bad key.
        """
        return _parse_policy(data)

    @classmethod
    def from_toml(cls, source: str | PathLike[str]) -> Policy:
        """Load from a TOML file path, or from TOML text if ``source`` is a
        string containing a newline or ``=``."""
        text: str
        if isinstance(source, str) and ("\n" in source or "=" in source):
            text = source
        else:
            path = Path(source)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise PolicyError(f"cannot read policy file {path}: {exc.strerror}") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"policy is not valid TOML: {exc}") from None
        return _parse_policy(data)

    @classmethod
    def from_json(cls, text: str) -> Policy:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyError(f"policy is not valid JSON: {exc}") from None
        return _parse_policy(data)

    @classmethod
    def from_stored_json(cls, text: str) -> Policy:
        """A policy a store recorded. One recorded before a key existed is
        read with that key's old behaviour where the default changed
        (supersession: :data:`SUPERSESSION_BEFORE_RESOLUTION`), so a store
        opened without a policy keeps behaving as it did."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PolicyError(f"policy is not valid JSON: {exc}") from None
        if isinstance(data, dict):
            sd = data.get("supersession")
            if isinstance(sd, dict) and "resolve_margin" not in sd:
                data = {**data, "supersession": {**SUPERSESSION_BEFORE_RESOLUTION, **sd}}
            sc = data.get("scoring")
            if sc is None or isinstance(sc, dict):
                data = {**data, "scoring": {**SCORING_BEFORE, **(sc or {})}}
            types = data.get("types")
            if isinstance(types, dict):  # every type was ranked by use, and deleted, before the keys existed
                data = {
                    **data,
                    "types": {
                        n: ({"ranked_by_use": True, "sweep_deletes": True, **t} if isinstance(t, dict) else t)
                        for n, t in types.items()
                    },
                }
        return _parse_policy(data)

    @classmethod
    def from_file(cls, path: str | PathLike[str]) -> Policy:
        """Load a policy file: JSON if its name ends in ``.json``, else TOML."""
        path = Path(path)
        if path.suffix.lower() != ".json":
            return cls.from_toml(path)
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PolicyError(f"cannot read policy file {path}: {exc.strerror}") from None

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable dict that :meth:`from_dict` reads back."""
        out: dict[str, Any] = {
            "types": {
                name: {
                    "ttl": t.ttl_seconds,
                    "half_life": t.half_life_seconds,
                    "boost": t.boost,
                    "initial_weight": t.initial_weight,
                    "refresh_on_read": t.refresh_on_read,
                    "supersede_above": t.supersede_above,
                    "supersede_above_shared_tag": t.supersede_above_shared_tag,
                    "ranked_by_use": t.ranked_by_use,
                    "sweep_deletes": t.sweep_deletes,
                }
                for name, t in self.types.items()
            },
            "thresholds": asdict(self.thresholds),
            "confidence": _confidence_to_dict(self.confidence),
            "context": [
                {
                    "when": r.when,
                    "tags": list(r.tags),
                    "ttl_multiplier": r.ttl_multiplier,
                    "retrieval_multiplier": r.retrieval_multiplier,
                }
                for r in self.context_rules
            ],
            "mask": [{"when": r.when, "tags": list(r.tags)} for r in self.mask_rules],
            "mask_tag_prefix": self.mask_tag_prefix,
            "scoring": _scoring_to_dict(self.scoring),
            "dedupe": self.dedupe,
            "supersession": asdict(self.supersession),
        }
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    # -- derived values -----------------------------------------------------

    @property
    def type_names(self) -> tuple[str, ...]:
        return tuple(self.types)

    def type_index(self, memory_type: str) -> int:
        """Position of ``memory_type`` in :attr:`type_names` (column encoding)."""
        try:
            return self.type_names.index(memory_type)
        except ValueError:
            from tierstore.errors import UnknownMemoryTypeError

            raise UnknownMemoryTypeError(
                f"unknown memory_type {memory_type!r}; the policy defines {', '.join(self.type_names)}"
            ) from None

    def rule_confidence(self, source: str) -> float | None:
        return self.confidence.source_defaults.get(source)

    def fuse_confidence(self, llm: float | None, rule: float | None, feedback: float | None) -> float:
        """Weighted mean of the confidence signals present, in [0, 1]."""
        c = self.confidence
        num = den = 0.0
        for value, weight in ((llm, c.llm_weight), (rule, c.rule_weight), (feedback, c.feedback_weight)):
            if value is not None and weight > 0.0:
                num += weight * value
                den += weight
        if den == 0.0:
            return 0.5 if llm is None else float(llm)
        return min(1.0, max(0.0, num / den))

    def ttl_scale(self, confidence: float) -> float:
        f = self.confidence.ttl_floor
        return f + (1.0 - f) * confidence

    def half_life_scale(self, confidence: float) -> float:
        f = self.confidence.half_life_floor
        return f + (1.0 - f) * confidence

    def with_changes(self, **changes: Any) -> Policy:
        """A copy with top-level fields replaced (``dataclasses.replace``)."""
        return replace(self, **changes)


# ---------------------------------------------------------------------------
# parsing and validation

_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|h|d|w)?\s*$")
_UNIT = {"s": 1.0, "m": MINUTE, "h": HOUR, "d": DAY, "w": WEEK, None: 1.0}
_TYPE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def parse_duration(value: Any, key: str, *, allow_none: bool = False) -> float | None:
    """Seconds from a number or a string like ``"30d"``; ``None``/``"never"``
    only where ``allow_none``. Raises PolicyError naming ``key``."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("never", "none", "inf")):
        if allow_none:
            return None
        raise PolicyError(f"{key}: a duration is required here, got {value!r}")
    if isinstance(value, bool):
        raise PolicyError(f"{key}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.match(value)
        if not m:
            raise PolicyError(f"{key}: expected a duration like 3600, '90m', '36h', '30d' or '2w', got {value!r}")
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    else:
        raise PolicyError(f"{key}: expected a duration, got {type(value).__name__}")
    if not math.isfinite(seconds) or seconds <= 0.0:
        raise PolicyError(f"{key}: a duration must be positive and finite, got {value!r}")
    return seconds


def _number(value: Any, key: str, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(f"{key}: expected a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise PolicyError(f"{key}: must be finite, got {value!r}")
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise PolicyError(f"{key}: must be {'>' if lo_open else '>='} {lo}, got {value!r}")
    if hi is not None and x > hi:
        raise PolicyError(f"{key}: must be <= {hi}, got {value!r}")
    return x


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(f"{key}: expected true or false, got {value!r}")
    return value


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PolicyError(f"{key}: expected a table, got {type(value).__name__}")
    return value


def _check_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for k in data:
        if k not in allowed:
            prefix = f"{where}." if where else ""
            raise PolicyError(f"{prefix}{k}: unknown key (expected one of {', '.join(sorted(allowed))})")


def _tags(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise PolicyError(f"{key}: expected a non-empty list of tags")
    out = []
    for i, t in enumerate(value):
        if not isinstance(t, str) or not t:
            raise PolicyError(f"{key}[{i}]: expected a non-empty string, got {t!r}")
        out.append(t)
    return tuple(out)


def _parse_type(name: str, data: Mapping[str, Any], base: TypePolicy | None) -> TypePolicy:
    where = f"types.{name}"
    data = _mapping(data, where)
    _check_keys(
        data,
        {
            "ttl",
            "half_life",
            "boost",
            "initial_weight",
            "refresh_on_read",
            "supersede_above",
            "supersede_above_shared_tag",
            "ranked_by_use",
            "sweep_deletes",
        },
        where,
    )
    if base is None:
        for required in ("ttl", "half_life"):
            if required not in data:
                raise PolicyError(f"{where}.{required}: required for a new memory type")
    ttl = parse_duration(data["ttl"], f"{where}.ttl", allow_none=True) if "ttl" in data else base.ttl_seconds  # type: ignore[union-attr]
    half_life = (
        parse_duration(data["half_life"], f"{where}.half_life") if "half_life" in data else base.half_life_seconds  # type: ignore[union-attr]
    )
    boost = _number(data["boost"], f"{where}.boost", lo=0.0) if "boost" in data else (base.boost if base else 0.5)
    w0 = (
        _number(data["initial_weight"], f"{where}.initial_weight", lo=0.0, lo_open=True)
        if "initial_weight" in data
        else (base.initial_weight if base else 1.0)
    )
    refresh = (
        _bool(data["refresh_on_read"], f"{where}.refresh_on_read")
        if "refresh_on_read" in data
        else (base.refresh_on_read if base else False)
    )
    bar = (
        _similarity_bar(data["supersede_above"], f"{where}.supersede_above")
        if "supersede_above" in data
        else (base.supersede_above if base else None)
    )
    if "supersede_above_shared_tag" in data:
        tag_bar = _similarity_bar(data["supersede_above_shared_tag"], f"{where}.supersede_above_shared_tag")
    elif "supersede_above" in data:
        # a bar given alone is the whole rule: "off" turns the type's automatic
        # supersession off, a number replaces an inherited shared-tag bar above it
        inherited = base.supersede_above_shared_tag if base else None
        tag_bar = None if bar is None or inherited is None or inherited > bar else inherited
    else:
        tag_bar = base.supersede_above_shared_tag if base else None
    if bar is not None and tag_bar is not None and tag_bar > bar:
        raise PolicyError(f"{where}.supersede_above_shared_tag: must be at most supersede_above ({bar}), got {tag_bar}")
    by_use = (
        _bool(data["ranked_by_use"], f"{where}.ranked_by_use")
        if "ranked_by_use" in data
        else (base.ranked_by_use if base else True)
    )
    deletes = (
        _bool(data["sweep_deletes"], f"{where}.sweep_deletes")
        if "sweep_deletes" in data
        else (base.sweep_deletes if base else True)
    )
    return TypePolicy(ttl, half_life, boost, w0, refresh, bar, tag_bar, by_use, deletes)  # type: ignore[arg-type]


def _similarity_bar(value: Any, key: str) -> float | None:
    """A cosine bar in (0, 1], or ``"off"`` / ``false`` / ``None`` (TOML has no null)."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return None
    if isinstance(value, str):
        raise PolicyError(f'{key}: expected a cosine similarity in (0, 1] or "off", got {value!r}')
    return _number(value, key, lo=0.0, hi=1.0, lo_open=True)


def _confidence_to_dict(c: ConfidencePolicy) -> dict[str, Any]:
    d = asdict(c)
    d["source_defaults"] = dict(c.source_defaults)
    d["decay_half_life"] = d.pop("decay_half_life_seconds")
    return d


def _scoring_to_dict(s: ScoringPolicy) -> dict[str, Any]:
    d = asdict(s)
    d["weights"] = dict(s.weights)
    d["recency_half_life"] = d.pop("recency_half_life_seconds")
    return d


def _parse_policy(data: Mapping[str, Any]) -> Policy:
    data = _mapping(data, "policy")
    _check_keys(
        data,
        {
            "types",
            "thresholds",
            "confidence",
            "context",
            "mask",
            "mask_tag_prefix",
            "scoring",
            "dedupe",
            "supersession",
        },
        "",
    )
    default = Policy()

    types: dict[str, TypePolicy] = dict(default.types)
    if "types" in data:
        for name, tdata in _mapping(data["types"], "types").items():
            if not _TYPE_NAME_RE.match(str(name)):
                raise PolicyError(f"types.{name}: a type name must match [A-Za-z0-9_.-]{{1,64}}")
            types[name] = _parse_type(name, tdata, types.get(name))

    thresholds = default.thresholds
    if "thresholds" in data:
        td = _mapping(data["thresholds"], "thresholds")
        _check_keys(td, {f.name for f in fields(Thresholds)}, "thresholds")
        values = asdict(thresholds)
        for k, v in td.items():
            values[k] = _number(v, f"thresholds.{k}", lo=0.0, hi=None if k != "delete_below_confidence" else 1.0)
        thresholds = Thresholds(**values)
        if not thresholds.demote > thresholds.archive > thresholds.delete:
            raise PolicyError(
                "thresholds: expected demote > archive > delete, got "
                f"{thresholds.demote} > {thresholds.archive} > {thresholds.delete}"
            )

    confidence = default.confidence
    if "confidence" in data:
        cd = _mapping(data["confidence"], "confidence")
        allowed = {f.name for f in fields(ConfidencePolicy)} - {"decay_half_life_seconds"} | {"decay_half_life"}
        _check_keys(cd, allowed, "confidence")
        values = asdict(confidence)
        values["source_defaults"] = dict(confidence.source_defaults)
        for k, v in cd.items():
            key = f"confidence.{k}"
            if k == "source_defaults":
                defaults = dict(values["source_defaults"])
                for src, cv in _mapping(v, key).items():
                    defaults[str(src)] = _number(cv, f"{key}.{src}", lo=0.0, hi=1.0)
                values["source_defaults"] = defaults
            elif k == "feedback_initial":
                values[k] = None if v is None else _number(v, key, lo=0.0, hi=1.0)
            elif k == "decay_half_life":
                values["decay_half_life_seconds"] = parse_duration(v, key, allow_none=True)
            elif k in ("llm_weight", "rule_weight", "feedback_weight", "negative_weight_penalty"):
                values[k] = _number(v, key, lo=0.0, hi=1.0 if k == "negative_weight_penalty" else None)
            else:
                values[k] = _number(v, key, lo=0.0, hi=1.0)
        confidence = ConfidencePolicy(**values)
        if confidence.llm_weight + confidence.rule_weight + confidence.feedback_weight <= 0.0:
            raise PolicyError("confidence: llm_weight + rule_weight + feedback_weight must be > 0")

    rules: list[ContextRule] = []
    if "context" in data:
        if not isinstance(data["context"], (list, tuple)):
            raise PolicyError("context: expected a list of rules ([[context]] in TOML)")
        for i, rd in enumerate(data["context"]):
            key = f"context[{i}]"
            rd = _mapping(rd, key)
            _check_keys(rd, {"when", "tags", "ttl_multiplier", "retrieval_multiplier"}, key)
            if not isinstance(rd.get("when"), str) or not rd.get("when"):
                raise PolicyError(f"{key}.when: expected a context tag (non-empty string)")
            if "tags" not in rd:
                raise PolicyError(f"{key}.tags: required")
            rules.append(
                ContextRule(
                    when=rd["when"],
                    tags=_tags(rd["tags"], f"{key}.tags"),
                    ttl_multiplier=_number(
                        rd.get("ttl_multiplier", 1.0), f"{key}.ttl_multiplier", lo=0.0, lo_open=True
                    ),
                    retrieval_multiplier=_number(
                        rd.get("retrieval_multiplier", 1.0), f"{key}.retrieval_multiplier", lo=0.0, lo_open=True
                    ),
                )
            )

    masks: list[MaskRule] = []
    if "mask" in data:
        if not isinstance(data["mask"], (list, tuple)):
            raise PolicyError("mask: expected a list of rules ([[mask]] in TOML)")
        for i, md in enumerate(data["mask"]):
            key = f"mask[{i}]"
            md = _mapping(md, key)
            _check_keys(md, {"when", "tags"}, key)
            if not isinstance(md.get("when"), str) or not md.get("when"):
                raise PolicyError(f"{key}.when: expected a context tag (non-empty string)")
            if "tags" not in md:
                raise PolicyError(f"{key}.tags: required")
            masks.append(MaskRule(when=md["when"], tags=_tags(md["tags"], f"{key}.tags")))

    prefix = default.mask_tag_prefix
    if "mask_tag_prefix" in data:
        if not isinstance(data["mask_tag_prefix"], str):
            raise PolicyError("mask_tag_prefix: expected a string (empty to disable)")
        prefix = data["mask_tag_prefix"]

    scoring = default.scoring
    if "scoring" in data:
        sd = _mapping(data["scoring"], "scoring")
        allowed = {f.name for f in fields(ScoringPolicy)} - {"recency_half_life_seconds"} | {"recency_half_life"}
        _check_keys(sd, allowed, "scoring")
        values = asdict(scoring)
        values["weights"] = dict(scoring.weights)
        for k, v in sd.items():
            key = f"scoring.{k}"
            if k == "mode":
                if v not in SCORING_MODES:
                    raise PolicyError(f"{key}: expected one of {', '.join(SCORING_MODES)}, got {v!r}")
                values["mode"] = v
            elif k == "weights":
                wd = _mapping(v, key)
                _check_keys(wd, set(SCORE_FACTORS), key)
                w = dict(values["weights"])
                for f, x in wd.items():
                    w[f] = _number(x, f"{key}.{f}", lo=0.0)
                if sum(w.values()) <= 0.0:
                    raise PolicyError(f"{key}: at least one weight must be > 0")
                values["weights"] = w
            elif k == "recency_half_life":
                values["recency_half_life_seconds"] = parse_duration(v, key)
            elif k in ("record_access", "record_access_cold", "similar_first", "cold_estimate"):
                values[k] = _bool(v, key)
            elif k == "cold_estimate_slack":
                values[k] = _number(v, key, lo=0.0, hi=1.0)
            elif k == "include_cold":
                if not (v == "auto" or isinstance(v, bool)):
                    raise PolicyError(f'{key}: expected "auto", true or false, got {v!r}')
                values["include_cold"] = v
            elif k == "cold_similarity_bar":
                values[k] = _number(v, key, lo=-1.0, hi=1.0)
            elif k == "cold_order":
                if v not in ("relevance", "fused"):
                    raise PolicyError(f'{key}: expected "relevance" or "fused", got {v!r}')
                values[k] = v
            elif k in ("oversample", "min_candidates"):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise PolicyError(f"{key}: expected an integer >= 1, got {v!r}")
                values[k] = v
            elif k == "keyword_weight":
                values[k] = _number(v, key, lo=0.0, hi=1.0)
            elif k == "floor":
                values[k] = _number(v, key, lo=0.0, hi=0.5)
            else:
                values[k] = _number(v, key, lo=0.0)
        scoring = ScoringPolicy(**values)

    dedupe = default.dedupe
    if "dedupe" in data:
        if data["dedupe"] not in DEDUPE_MODES:
            raise PolicyError(f"dedupe: expected one of {', '.join(DEDUPE_MODES)}, got {data['dedupe']!r}")
        dedupe = data["dedupe"]

    supersession = default.supersession
    if "supersession" in data:
        sd = _mapping(data["supersession"], "supersession")
        _check_keys(sd, {f.name for f in fields(SupersessionPolicy)}, "supersession")
        values = asdict(supersession)
        for k, v in sd.items():
            key = f"supersession.{k}"
            if k in ("resolve_margin", "resolve_margin_shared_tag", "resolve_margin_same_wording"):
                values[k] = None if v is None or v is False else _number(v, key, lo=0.0, hi=1.0)
            elif k == "superseded_factor":
                values[k] = _number(v, key, lo=0.0, hi=1.0, lo_open=True)
            elif k == "resolve_min_gap":
                values[k] = 0.0 if type(v) in (int, float) and v == 0 else parse_duration(v, key)
            else:
                values[k] = _number(v, key, lo=0.0, hi=1.0)
        margin, tag_margin = values["resolve_margin"], values["resolve_margin_shared_tag"]
        if tag_margin is not None and margin is not None and tag_margin < margin:
            raise PolicyError(
                f"supersession.resolve_margin_shared_tag: must be at least resolve_margin ({margin}), got {tag_margin}"
            )
        supersession = SupersessionPolicy(**values)

    return Policy(
        types=types,
        thresholds=thresholds,
        confidence=confidence,
        context_rules=tuple(rules),
        mask_rules=tuple(masks),
        mask_tag_prefix=prefix,
        scoring=scoring,
        dedupe=dedupe,
        supersession=supersession,
    )

"""Lifecycle analytics over the catalog's event log and access log.

The seed (§5.4) asks for evidence before tuning TTLs: a lifecycle log,
survival and reactivation metrics, a notion of memory value. The log exists:
every transition is an ``events`` row and accesses are counted per memory and
day in ``access_log``. This module turns them into numbers.

:func:`lifecycle_metrics` reads both tables (never the hot tier) and returns a
JSON-serialisable dict; :func:`compact_events` bounds their growth while
keeping those numbers meaningful. Times are POSIX seconds, durations seconds,
rates in [0, 1]. See ``docs/lifecycle.md`` for each definition.
"""

from __future__ import annotations

import json
import math
import sqlite3
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tierstore.core.engine import Engine, engine_of
from tierstore.errors import InvalidInputError

DAY = 86400.0
TIERS = ("hot", "warm", "cold")
EVENT_KINDS = ("create", "promote", "demote", "archive", "restore", "reactivate", "delete", "feedback", "pin", "unpin")
END_KINDS = ("archive", "delete")  # a memory's first life ends when it leaves the searchable tiers
LEAVE_KINDS = ("demote", "archive")  # moves out of hot that a reactivation can undo
# moves back into hot: restore (asked for), reactivate (a cold hit or touch that was used), promote (warm)
BACK_KINDS = ("restore", "reactivate", "promote")
# What brought a memory back, for the reactivation breakdown: a used cold hit
# or touch; a used warm hit; said again (a duplicate of an archived memory);
# any other restore (asked for, or a reversed supersession).
BACK_CAUSES = ("used", "promoted", "re-added", "restored")


def back_cause(kind: str, reason: str | None) -> str:
    """The :data:`BACK_CAUSES` entry of a ``BACK_KINDS`` event."""
    if kind == "reactivate":
        return "used"
    if kind == "promote":
        return "promoted"
    return "re-added" if reason == "re-added" else "restored"


# What compaction keeps by default, whatever its age: every tier transition.
# Survival, access counts at the end, reactivation and the tier series are all
# computed from these, so with this default they are unchanged by compaction.
# Old feedback, pin and unpin rows go; feedback is folded into per-memory tallies.
DEFAULT_KEEP_KINDS = ("create", "promote", "demote", "archive", "restore", "reactivate", "delete")

# Access-count histogram buckets (inclusive bounds; None: unbounded). Powers of
# two, because access counts are heavy-tailed.
ACCESS_BUCKETS: tuple[tuple[int, int | None], ...] = (
    (0, 0),
    (1, 1),
    (2, 3),
    (4, 7),
    (8, 15),
    (16, 31),
    (32, None),
)

TOP_VALUE = 10
CURVE_POINTS = 100  # survival curve points kept per type (the report plots them)

FOLD_TABLE = "lifecycle_feedback_folded"
FOLD_META = "lifecycle.folded"
_FOLD_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {FOLD_TABLE} (
    ns          TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    memory_type TEXT,                  -- kept for memories whose events were all dropped
    positive    INTEGER NOT NULL,      -- feedback rows folded by compact_events
    negative    INTEGER NOT NULL,
    PRIMARY KEY (ns, id)
) WITHOUT ROWID
"""


# ---------------------------------------------------------------------------
# small pure helpers (exported for tests and the report)


def kaplan_meier(durations: Sequence[float], ended: Sequence[bool]) -> list[tuple[float, float]]:
    """Kaplan–Meier survival curve: ``[(t, S(t))]`` starting at ``(0, 1)``,
    one point per distinct end time (seconds). A censored duration (still
    alive) counts as at risk up to and including its time; ends at the same
    time are processed before censorings, the usual convention."""
    pairs = sorted(zip(durations, ended), key=lambda p: (p[0], not p[1]))
    n = len(pairs)
    curve = [(0.0, 1.0)]
    s = 1.0
    i = 0
    while i < n:
        t = pairs[i][0]
        deaths = at_t = 0
        while i + at_t < n and pairs[i + at_t][0] == t:
            deaths += 1 if pairs[i + at_t][1] else 0
            at_t += 1
        at_risk = n - i
        if deaths:
            s *= 1.0 - deaths / at_risk
            curve.append((float(t), s))
        i += at_t
    return curve


def survival_quantile(curve: Sequence[tuple[float, float]], ended_fraction: float) -> float | None:
    """The first time at which at least ``ended_fraction`` (in (0, 1]) of the
    memories have ended, i.e. ``S(t) <= 1 - ended_fraction``; ``None`` if the
    curve never gets there (too many still alive to tell)."""
    target = 1.0 - ended_fraction + 1e-12
    for t, s in curve:
        if s <= target:
            return t
    return None


def access_bucket_label(lo: int, hi: int | None) -> str:
    if hi is None:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _bucket_index(count: int) -> int:
    for i, (lo, hi) in enumerate(ACCESS_BUCKETS):
        if count >= lo and (hi is None or count <= hi):
            return i
    return 0  # negative counts cannot happen; keep them visible in the first bucket


def _thin(curve: list[tuple[float, float]], limit: int) -> list[list[float]]:
    """At most ``limit`` points of a step curve, always keeping the first and last."""
    if len(curve) <= limit:
        return [[t, s] for t, s in curve]
    step = (len(curve) - 1) / (limit - 1)
    idx = sorted({round(i * step) for i in range(limit)})
    return [[curve[i][0], curve[i][1]] for i in idx]


def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def _median(xs: Sequence[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    m = len(s) // 2
    return float(s[m]) if len(s) % 2 else (s[m - 1] + s[m]) / 2.0


def _table_exists(eng: Engine, name: str) -> bool:
    return eng.catalog.query_one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) is not None


def folded_state(store: Any) -> dict[str, Any]:
    """What compaction folded so far: ``cutoff`` (seconds or None), dropped
    ``events`` per kind, net ``tiers`` change of dropped transitions, and the
    same per memory type (``tiers_by_type``)."""
    return _parse_folded(engine_of(store).catalog.get_meta(FOLD_META))


def _parse_folded(raw: str | None) -> dict[str, Any]:
    base: dict[str, Any] = {"cutoff": None, "events": {}, "tiers": {t: 0 for t in TIERS}}
    try:
        data = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        # written only by compact_events; unreadable means damaged: count nothing folded
        data = {}
    if isinstance(data, dict):
        base.update({k: data[k] for k in base if k in data})
    base["tiers"] = {t: int(base["tiers"].get(t, 0)) for t in TIERS}
    by_type = data.get("tiers_by_type") if isinstance(data, dict) else None
    if isinstance(by_type, dict):
        base["tiers_by_type"] = {
            str(k): {t: int(v.get(t, 0)) for t in TIERS} for k, v in by_type.items() if isinstance(v, dict)
        }
    else:
        # Compacted before types were folded: the per-tier totals are exact,
        # their types unknown; counting them as "unknown" keeps the sums right.
        base["tiers_by_type"] = {"unknown": dict(base["tiers"])} if any(base["tiers"].values()) else {}
    return base


def _now(eng: Engine, now: float | None) -> float:
    if now is None:
        return float(eng.now())
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise InvalidInputError(f"now must be a finite number of seconds, got {now!r}")
    return float(now)


# ---------------------------------------------------------------------------
# metrics


def lifecycle_metrics(store: Any, *, now: float | None = None, reactivation_days: float = 7.0) -> dict[str, Any]:
    """Lifecycle metrics of a store from its event log and access log.

    now: evaluate as of this time (seconds; default the store's clock): events
    after it are ignored, memories alive at it are censored at it.
    reactivation_days: the window (days) within which a demoted or archived
    memory coming back to hot counts as a reactivation.

    Returns a JSON-serialisable dict with the sections ``events`` (rows per
    kind, folded ones included), ``survival`` (per type: Kaplan–Meier median
    and p90 time to archive or delete, ended and censored counts, the curve),
    ``access_at_end`` (histogram and mean of access counts when a memory was
    first archived or deleted), ``reactivation`` (rate, numerator,
    denominator, per kind and type, and what brought them back:
    ``by_cause``, :data:`BACK_CAUSES`), ``value`` (retrievals × positive-feedback
    rate: per type mean and the top 10), ``tiers`` (daily hot/warm/cold counts
    rebuilt from the events; ``by_type``: per type at ``now``), ``policy``
    (each type's TTL, half-life, boost, initial weight; the thresholds) and
    ``compaction``. ``store``: a TierStore or its engine.
    """
    eng = engine_of(store)
    eng.check_open()
    now = _now(eng, now)
    if (
        isinstance(reactivation_days, bool)
        or not isinstance(reactivation_days, (int, float))
        or not (math.isfinite(reactivation_days) and reactivation_days > 0)
    ):
        raise InvalidInputError(f"reactivation_days must be a positive number of days, got {reactivation_days!r}")
    window = float(reactivation_days) * DAY
    eng.flush()  # pending access counts reach access_log first
    folded = folded_state(eng)

    # One pass over the events in order. The event log is append-only and
    # ordered by (t, seq); seq breaks ties between events of one instant.
    by_kind: dict[str, int] = {k: 0 for k in EVENT_KINDS}
    types: dict[tuple[str, str], str] = {}
    lives: list[dict[str, Any]] = []  # one per create: start, type, end
    open_life: dict[tuple[str, str], dict[str, Any]] = {}
    ends: list[tuple[str, int]] = []  # (type, access count) at each memory's first end
    ended_keys: set[tuple[str, str]] = set()  # memories whose current life has ended (first end only)
    pending: dict[tuple[str, str], list[tuple[float, str, str]]] = {}  # leave events awaiting a comeback
    # (leave kind, type, delay, what brought it back): delay and cause None when it did not come back in time
    react: list[tuple[str, str, float | None, str | None]] = []
    feedback: dict[tuple[str, str], list[int]] = {}
    day_deltas: dict[int, list[int]] = {}  # POSIX day -> net change of (hot, warm, cold)
    type_deltas: dict[str, list[int]] = {}  # memory type -> net change of (hot, warm, cold) up to now
    cur = eng.catalog.reader().execute(
        "SELECT t, ns, id, kind, from_tier, to_tier, reason, access_count, memory_type FROM events"
        " WHERE t <= ? ORDER BY t, seq",
        (now,),
    )
    for t, ns, mid, kind, from_tier, to_tier, reason, access_count, mtype in cur:
        key = (ns, mid)
        by_kind[kind] = by_kind.get(kind, 0) + 1
        if mtype:
            types[key] = mtype
        mtype = types.get(key, mtype or "unknown")
        if kind == "create":
            life = {"type": mtype, "start": t, "end": None, "end_kind": None}
            lives.append(life)
            open_life[key] = life
            ended_keys.discard(key)
            for _leave_t, leave_kind, leave_type in pending.pop(key, []):
                react.append((leave_kind, leave_type, None, None))  # the id was reused: that memory is gone
        if kind in END_KINDS and key not in ended_keys:
            # The first archive or delete ends the memory's (first) life.
            ended_keys.add(key)
            ended = open_life.pop(key, None)
            if ended is not None:
                ended["end"], ended["end_kind"] = t, kind
            ends.append((mtype, int(access_count or 0)))
        if kind in LEAVE_KINDS:
            pending.setdefault(key, []).append((t, kind, mtype))
        elif kind in BACK_KINDS:
            cause = back_cause(kind, reason)
            for leave_t, leave_kind, leave_type in pending.pop(key, []):
                delay = t - leave_t
                react.append(
                    (leave_kind, leave_type, delay, cause) if delay <= window else (leave_kind, leave_type, None, None)
                )
        elif kind == "delete":
            for _leave_t, leave_kind, leave_type in pending.pop(key, []):
                react.append((leave_kind, leave_type, None, None))
        if kind == "feedback" and reason:
            tally = feedback.setdefault(key, [0, 0])
            if reason.endswith("negative"):
                tally[1] += 1
            elif reason.endswith("positive"):
                tally[0] += 1
        if from_tier != to_tier and (from_tier in TIERS or to_tier in TIERS):
            d = day_deltas.setdefault(int(t // DAY), [0, 0, 0])
            # A memory's type never changes, so per-type deltas add up exactly.
            td = type_deltas.setdefault(mtype, [0, 0, 0])
            if from_tier in TIERS:
                d[TIERS.index(from_tier)] -= 1
                td[TIERS.index(from_tier)] -= 1
            if to_tier in TIERS:
                d[TIERS.index(to_tier)] += 1
                td[TIERS.index(to_tier)] += 1
    # Leave events still waiting: reactivation is undecided while the window is open.
    open_count: dict[tuple[str, str], int] = {}
    for items in pending.values():
        for leave_t, leave_kind, leave_type in items:
            if leave_t + window <= now:
                react.append((leave_kind, leave_type, None, None))
            else:
                open_count[(leave_kind, leave_type)] = open_count.get((leave_kind, leave_type), 0) + 1

    for kind, n in folded["events"].items():
        by_kind[kind] = by_kind.get(kind, 0) + int(n)

    tiers = _tier_series(day_deltas, type_deltas, folded, now)
    return {
        "now": now,
        "events": {"total": sum(by_kind.values()), "by_kind": by_kind},
        "survival": _survival(lives, now, tiers["by_type"]),
        "access_at_end": _access_at_end(ends),
        "reactivation": _reactivation(react, open_count, reactivation_days),
        "value": _value(eng, now, types, feedback),
        "tiers": tiers,
        "policy": _policy_summary(eng),
        "compaction": {"cutoff": folded["cutoff"], "folded_events": dict(folded["events"])},
    }


def _survival(lives: list[dict[str, Any]], now: float, tiers_now: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """Per type and for all: the first lives' Kaplan–Meier summary, and
    ``alive_now``, the memories hot or warm at ``now`` (``tiers_now``: per
    type, counts per tier) — a restored memory among them, although its
    first life ended."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for life in lives:
        groups.setdefault(life["type"], []).append(life)

    def alive_now(mtype: str | None) -> int:
        rows = tiers_now.values() if mtype is None else [tiers_now.get(mtype, {})]
        return sum(int(r.get("hot", 0)) + int(r.get("warm", 0)) for r in rows)

    def summary(items: list[dict[str, Any]], mtype: str | None) -> dict[str, Any]:
        durations = [(life["end"] if life["end"] is not None else now) - life["start"] for life in items]
        flags = [life["end"] is not None for life in items]
        curve = kaplan_meier(durations, flags)
        ended = sum(flags)
        return {
            "memories": len(items),
            "ended": ended,
            "censored": len(items) - ended,
            "archived": sum(1 for life in items if life["end_kind"] == "archive"),
            "deleted": sum(1 for life in items if life["end_kind"] == "delete"),
            "median_s": survival_quantile(curve, 0.5),
            "p90_s": survival_quantile(curve, 0.9),
            "mean_ended_s": (sum(d for d, f in zip(durations, flags) if f) / ended) if ended else None,
            "longest_s": max(durations, default=None),  # the longest observed, ended or alive
            "alive_now": alive_now(mtype),
            "curve": _thin(curve, CURVE_POINTS),
        }

    return {"by_type": {t: summary(groups[t], t) for t in sorted(groups)}, "all": summary(lives, None)}


def _access_at_end(ends: list[tuple[str, int]]) -> dict[str, Any]:
    counts = [0] * len(ACCESS_BUCKETS)
    per_type: dict[str, list[int]] = {}
    for mtype, n in ends:
        counts[_bucket_index(n)] += 1
        per_type.setdefault(mtype, []).append(n)
    total = len(ends)
    return {
        "count": total,
        "mean": (sum(n for _, n in ends) / total) if total else None,
        "buckets": [
            {"label": access_bucket_label(lo, hi), "lo": lo, "hi": hi, "count": c}
            for (lo, hi), c in zip(ACCESS_BUCKETS, counts)
        ],
        "by_type": {t: {"count": len(v), "mean": sum(v) / len(v)} for t, v in sorted(per_type.items())},
    }


def _reactivation(
    react: list[tuple[str, str, float | None, str | None]], open_count: dict[tuple[str, str], int], days: float
) -> dict[str, Any]:
    def summary(items: list[tuple[str, str, float | None, str | None]], pending: int) -> dict[str, Any]:
        delays = [delay for _, _, delay, cause in items if cause is not None and delay is not None]  # came back
        num = len(delays)
        by_cause = {c: sum(1 for r in items if r[3] == c) for c in BACK_CAUSES}
        return {
            "numerator": num,
            "denominator": len(items),
            "rate": _rate(num, len(items)),
            "pending": pending,
            "median_delay_s": _median(delays),
            "by_cause": by_cause,
        }

    out = summary(react, sum(open_count.values()))
    out["window_days"] = float(days)
    out["by_kind"] = {
        k: summary([r for r in react if r[0] == k], sum(n for (kk, _), n in open_count.items() if kk == k))
        for k in LEAVE_KINDS
    }
    type_names = sorted({r[1] for r in react} | {t for _, t in open_count})
    out["by_type"] = {}
    for t in type_names:
        part = summary([r for r in react if r[1] == t], sum(n for (_, tt), n in open_count.items() if tt == t))
        part["by_kind"] = {
            k: summary([r for r in react if r[1] == t and r[0] == k], open_count.get((k, t), 0)) for k in LEAVE_KINDS
        }
        out["by_type"][t] = part
    return out


def _value(
    eng: Engine, now: float, types: dict[tuple[str, str], str], feedback: dict[tuple[str, str], list[int]]
) -> dict[str, Any]:
    """Memory value = retrievals × positive-feedback rate (seed §5.4).

    retrievals: accesses counted in access_log up to ``now``'s day.
    positive-feedback rate: positive / (positive + negative) feedback rows,
    explicit and implicit alike; a memory without feedback is *unrated* and
    has no value (it is counted, not guessed)."""
    retrievals: dict[tuple[str, str], int] = {}
    for ns, mid, count in eng.catalog.query(
        "SELECT ns, id, sum(count) FROM access_log WHERE day <= ? GROUP BY ns, id", (int(now // DAY),)
    ):
        retrievals[(ns, mid)] = int(count)
    fb = {k: list(v) for k, v in feedback.items()}
    if _table_exists(eng, FOLD_TABLE):
        for ns, mid, mtype, pos, neg in eng.catalog.query(
            f"SELECT ns, id, memory_type, positive, negative FROM {FOLD_TABLE}"
        ):
            if pos or neg:
                tally = fb.setdefault((ns, mid), [0, 0])
                tally[0] += int(pos)
                tally[1] += int(neg)
            if mtype and (ns, mid) not in types:
                types[(ns, mid)] = mtype
    keys = set(retrievals) | set(fb)
    missing = [k for k in keys if k not in types]
    for i in range(0, len(missing), 400):  # memories whose events were compacted away
        chunk = missing[i : i + 400]
        cond = " OR ".join("(ns = ? AND id = ?)" for _ in chunk)
        for ns, mid, mtype in eng.catalog.query(
            f"SELECT ns, id, memory_type FROM memories WHERE {cond}", [x for k in chunk for x in k]
        ):
            types[(ns, mid)] = mtype
    rows: list[dict[str, Any]] = []
    for key in keys:
        pos, neg = fb.get(key, (0, 0))
        n = retrievals.get(key, 0)
        rate = _rate(pos, pos + neg)
        rows.append(
            {
                "ns": key[0],
                "id": key[1],
                "memory_type": types.get(key, "unknown"),
                "retrievals": n,
                "positive": pos,
                "negative": neg,
                "positive_rate": rate,
                "value": None if rate is None else n * rate,
            }
        )
    per_type: dict[str, dict[str, Any]] = {}
    for r in rows:
        t = per_type.setdefault(r["memory_type"], {"memories": 0, "rated": 0, "retrievals": 0, "_sum": 0.0})
        t["memories"] += 1
        t["retrievals"] += r["retrievals"]
        if r["value"] is not None:
            t["rated"] += 1
            t["_sum"] += r["value"]
    for t in per_type.values():
        total = t.pop("_sum")
        t["mean_value"] = (total / t["rated"]) if t["rated"] else None
    rated = [r for r in rows if r["value"] is not None]
    rated.sort(key=lambda r: (-r["value"], -r["retrievals"], r["ns"], r["id"]))
    top = rated[:TOP_VALUE]
    if top:
        cond = " OR ".join("(ns = ? AND id = ?)" for _ in top)
        content = {
            (ns, mid): c
            for ns, mid, c in eng.catalog.query(
                f"SELECT ns, id, content FROM memories WHERE {cond}", [x for r in top for x in (r["ns"], r["id"])]
            )
        }
        for r in top:
            r["content"] = content.get((r["ns"], r["id"]))  # None: deleted since
    return {
        "memories": len(rows),
        "rated": len(rated),
        "retrievals": sum(r["retrievals"] for r in rows),
        "mean_value": (sum(r["value"] for r in rated) / len(rated)) if rated else None,
        "by_type": dict(sorted(per_type.items())),
        "top": top,
    }


def _tier_series(
    day_deltas: dict[int, list[int]], type_deltas: dict[str, list[int]], folded: dict[str, Any], now: float
) -> dict[str, Any]:
    """Memories per tier at the end of each day (POSIX day numbers), rebuilt
    from the transitions: create → hot +1; demote hot → warm; archive → cold;
    restore/promote → hot; delete −1 from its tier. Transitions folded by
    compaction form the starting counts. ``by_type``: per memory type, the
    counts per tier at ``now`` (they add up to the last day's counts)."""
    by_type: dict[str, dict[str, int]] = {}
    for mtype, counts in folded["tiers_by_type"].items():
        by_type[mtype] = {t: int(counts.get(t, 0)) for t in TIERS}
    for mtype, delta in type_deltas.items():
        row = by_type.setdefault(mtype, {t: 0 for t in TIERS})
        for i, t in enumerate(TIERS):
            row[t] += delta[i]
    by_type = dict(sorted(by_type.items()))
    starts = list(day_deltas)
    if folded["cutoff"] is not None:
        starts.append(int(folded["cutoff"] // DAY))
    if not starts:
        return {"days": [], "hot": [], "warm": [], "cold": [], "by_type": by_type}
    last_day = int(now // DAY)
    days = list(range(min(min(starts), last_day), last_day + 1))
    counts = [int(folded["tiers"].get(t, 0)) for t in TIERS]
    series: list[list[int]] = [[], [], []]
    for day in days:
        for i, dv in enumerate(day_deltas.get(day, (0, 0, 0))):
            counts[i] += dv
            series[i].append(counts[i])
    return {"days": days, **{t: series[i] for i, t in enumerate(TIERS)}, "by_type": by_type}


def _policy_summary(eng: Engine) -> dict[str, Any]:
    pol = eng.policy
    return {
        "types": {
            name: {
                "ttl_s": t.ttl_seconds,
                "half_life_s": t.half_life_seconds,
                "boost": t.boost,
                "initial_weight": t.initial_weight,
                "refresh_on_read": t.refresh_on_read,
            }
            for name, t in pol.types.items()
        },
        "thresholds": {
            "demote": pol.thresholds.demote,
            "archive": pol.thresholds.archive,
            "delete": pol.thresholds.delete,
            "delete_below_confidence": pol.thresholds.delete_below_confidence,
        },
    }


def tier_at(metrics: Mapping[str, Any], t: float) -> dict[str, int]:
    """Tier counts at the end of the day holding time ``t`` (seconds) from a
    metrics dict; zeros before the series starts."""
    tiers = metrics["tiers"]
    days = tiers["days"]
    i = bisect_right(days, int(t // DAY)) - 1
    if i < 0:
        return {k: 0 for k in TIERS}
    return {k: tiers[k][i] for k in TIERS}


# ---------------------------------------------------------------------------
# compaction


def compact_events(store: Any, *, older_than_s: float, keep_kinds: Iterable[str] = DEFAULT_KEEP_KINDS) -> int:
    """Drop event rows older than ``older_than_s`` seconds (before ``now -
    older_than_s``) whose kind is not in ``keep_kinds``, and fold old
    ``access_log`` days into one row per memory. Returns the number of rows
    removed (events, plus access_log rows net of the folded rows written).

    What is kept so that :func:`lifecycle_metrics` stays meaningful:

    - every event of a kind in ``keep_kinds`` (default: all tier transitions,
      so survival, access counts at the end, reactivation and the tier series
      are unchanged);
    - the count of every dropped event per kind (``events.by_kind`` and the
      Prometheus counters never go down);
    - the net tier change of dropped transitions (the tier series stays exact
      from the cutoff on, whatever ``keep_kinds``);
    - per memory with dropped events, one row of table
      ``lifecycle_feedback_folded``: its type and its dropped feedback as
      positive/negative tallies (memory value is unchanged);
    - accesses: old days of a memory are summed into one row dated the day
      before the cutoff (total retrievals unchanged; per-day detail before the
      cutoff is lost).

    What is lost: with ``create`` dropped, memories whose creation is gone no
    longer enter the survival statistics; metrics asked ``now=`` before the
    cutoff see folded counts as if they were already there.
    """
    eng = engine_of(store)
    eng.check_open()
    if (
        isinstance(older_than_s, bool)
        or not isinstance(older_than_s, (int, float))
        or not (math.isfinite(older_than_s) and older_than_s > 0)
    ):
        raise InvalidInputError(f"older_than_s must be a positive number of seconds, got {older_than_s!r}")
    if isinstance(keep_kinds, str):
        raise InvalidInputError("keep_kinds must be a list of event kinds, not one string")
    keep = tuple(keep_kinds)
    unknown = sorted(set(keep) - set(EVENT_KINDS))
    if unknown:
        raise InvalidInputError(f"keep_kinds: unknown event kinds {unknown} (known: {', '.join(EVENT_KINDS)})")
    cutoff = eng.now() - float(older_than_s)
    cutoff_day = int(cutoff // DAY)
    eng.flush()
    dropped_kinds = [k for k in EVENT_KINDS if k not in keep]
    marks = ",".join("?" * len(dropped_kinds))

    def write(conn: sqlite3.Connection) -> int:
        removed = 0
        if dropped_kinds:
            where = f"t < ? AND kind IN ({marks})"
            params = (cutoff, *dropped_kinds)
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (FOLD_META,)).fetchone()
            folded = _parse_folded(row[0] if row else None)
            for kind, n in conn.execute(f"SELECT kind, count(*) FROM events WHERE {where} GROUP BY kind", params):
                folded["events"][kind] = folded["events"].get(kind, 0) + n
            for mtype, from_tier, to_tier, n in conn.execute(
                f"SELECT coalesce(memory_type, 'unknown'), from_tier, to_tier, count(*) FROM events"
                f" WHERE {where} AND coalesce(from_tier, '') != coalesce(to_tier, '')"
                " GROUP BY memory_type, from_tier, to_tier",
                params,
            ):
                per_type = folded["tiers_by_type"].setdefault(mtype, {t: 0 for t in TIERS})
                if from_tier in TIERS:
                    folded["tiers"][from_tier] -= n
                    per_type[from_tier] -= n
                if to_tier in TIERS:
                    folded["tiers"][to_tier] += n
                    per_type[to_tier] += n
            # One row per memory with dropped events: its type (a deleted
            # memory's type lives only in its events) and its feedback tally.
            conn.execute(_FOLD_SCHEMA)
            conn.execute(
                f"INSERT INTO {FOLD_TABLE} (ns, id, memory_type, positive, negative)"
                " SELECT ns, id, max(memory_type),"
                "  sum(CASE WHEN kind = 'feedback' AND reason LIKE '%positive' THEN 1 ELSE 0 END),"
                "  sum(CASE WHEN kind = 'feedback' AND reason LIKE '%negative' THEN 1 ELSE 0 END)"
                f" FROM events WHERE {where} GROUP BY ns, id"
                " ON CONFLICT (ns, id) DO UPDATE SET positive = positive + excluded.positive,"
                "  negative = negative + excluded.negative,"
                "  memory_type = coalesce(excluded.memory_type, memory_type)",
                params,
            )
            removed += conn.execute(f"DELETE FROM events WHERE {where}", params).rowcount
            folded["cutoff"] = cutoff if folded["cutoff"] is None else max(folded["cutoff"], cutoff)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (FOLD_META, json.dumps(folded, sort_keys=True)),
            )
        # Fold old access days: sum, delete, insert one row per memory dated
        # the day before the cutoff (every row before the cutoff was deleted,
        # so the insert cannot collide).
        sums = conn.execute(
            "SELECT ns, id, sum(count), count(*), min(day) FROM access_log WHERE day < ? GROUP BY ns, id", (cutoff_day,)
        ).fetchall()
        if any(n > 1 or day != cutoff_day - 1 for *_, n, day in sums):  # else already folded
            conn.execute("DELETE FROM access_log WHERE day < ?", (cutoff_day,))
            conn.executemany(
                "INSERT INTO access_log (ns, id, day, count) VALUES (?, ?, ?, ?)",
                [(ns, mid, cutoff_day - 1, total) for ns, mid, total, _, _ in sums],
            )
            removed += sum(n for _, _, _, n, _ in sums) - len(sums)
        return removed

    return int(eng.catalog.write(write))


# ---------------------------------------------------------------------------
# text


def format_summary(metrics: Mapping[str, Any]) -> str:
    """A few readable lines of a metrics dict (for ``tierstore stats``)."""
    lines = []
    surv = metrics["survival"]["by_type"]
    if surv:
        parts = []
        for t, s in surv.items():
            med = "n/a" if s["median_s"] is None else format_duration(s["median_s"])
            parts.append(f"{t} {med} ({s['ended']} ended, {s['censored']} not yet; {s['alive_now']} hot or warm now)")
        lines.append("median survival: " + "; ".join(parts))
    acc = metrics["access_at_end"]
    if acc["count"]:
        hist = ", ".join(f"{b['label']}:{b['count']}" for b in acc["buckets"] if b["count"])
        lines.append(f"accesses at archive/delete: mean {acc['mean']:.2f} over {acc['count']} [{hist}]")
    r = metrics["reactivation"]
    rate = "n/a" if r["rate"] is None else f"{100 * r['rate']:.1f} %"
    causes = ", ".join(f"{c} {n}" for c, n in r["by_cause"].items() if n)
    lines.append(
        f"reactivated within {r['window_days']:g} d: {rate} ({r['numerator']}/{r['denominator']},"
        f" {r['pending']} pending)" + (f"; brought back: {causes}" if causes else "")
    )
    v = metrics["value"]
    if v["rated"]:
        lines.append(
            f"memory value: {v['rated']} rated of {v['memories']}, mean {v['mean_value']:.2f}; top "
            + ", ".join(f"{x['id']} {x['value']:.1f}" for x in v["top"][:3])
        )
    ev = metrics["events"]["by_kind"]
    lines.append("events: " + ", ".join(f"{k} {n}" for k, n in ev.items() if n))
    return "\n".join(lines)


def format_duration(seconds: float | None) -> str:
    """``"20 min"``, ``"36 h"``, ``"10 d"``: a duration in a readable unit."""
    if seconds is None:
        return "never"
    s = float(seconds)

    def num(x: float) -> str:  # 3 significant digits, never an exponent
        return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"

    if s < 120:
        return f"{num(s)} s"
    if s < 2 * 3600:
        return f"{num(s / 60)} min"
    if s < 2 * DAY:
        return f"{num(s / 3600)} h"
    return f"{num(s / DAY)} d"

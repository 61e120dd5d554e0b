"""``tierstore simulate``: replay a workload trace under several policies.

Each policy gets a fresh temporary store driven by a :class:`ManualClock`:
the clock is set to each record's time ``t``, and the migrator sweeps every
``sweep_interval_s`` of simulated time (a sweep at each interval boundary the
trace crosses, then one at the end). The trace's calls are replayed as
recorded: the same adds (with their ids), searches (``record_access`` as
recorded), touches, feedback, pins, deletes, context changes and restores.

What a replay cannot know is how the agent would have reacted to different
search results: touches and feedback name the memories the recording run
used. An operation naming a memory the replayed policy no longer has (it was
deleted) is skipped and counted, never an error.

Per policy (:class:`SimResult`): the hot footprint sampled at each sweep
(mean and final count; bytes = count × dim × 4, the hot vectors), demoted /
archived / deleted, reactivations (restore + reactivate + promote events), stale hits
(searches labelled ``stale`` whose top hit is one of those ids) and live
recall@k (the share of a search's ``live`` ids among its hits), and
:func:`tierstore.analytics.lifecycle.lifecycle_metrics` at the end.
:func:`format_comparison` prints them side by side and explains each
difference by the policy parameters that drive it.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierstore.analytics.lifecycle import format_duration, lifecycle_metrics
from tierstore.clock import ManualClock
from tierstore.core.trace import decode_vector, read_trace
from tierstore.errors import (
    CorruptDataError,
    DuplicateIdError,
    InvalidInputError,
    MemoryNotFoundError,
    ObjectNotFoundError,
    PolicyError,
    UnknownMemoryTypeError,
)
from tierstore.policy import Policy
from tierstore.progress import Progress
from tierstore.storage.objectstore import validate_key, validate_prefix, validate_range
from tierstore.storage.objectstore._base import validate_data


@dataclass
class SimResult:
    """One policy's replay. Counts are events in the replayed store; times
    are seconds; rates in [0, 1] (``None``: nothing to measure)."""

    name: str
    source: str | None  # the policy file, if it came from one
    policy: Policy
    dim: int
    records: int = 0
    replayed: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # ops (touch, restore: ids) naming absent memories
    # touches of memories this policy had archived: the recording run's agent used what *its* searches showed;
    # replayed, they would reactivate what this policy forgot, so they are left out and counted
    unseen_touches: int = 0
    sweeps: int = 0
    hot_samples: list[int] = field(default_factory=list, repr=False)
    hot_final: int = 0
    tiers_final: dict[str, int] = field(default_factory=dict)
    demoted: int = 0
    archived: int = 0
    deleted: int = 0  # by the policy (sweeps); explicit deletes are the trace's
    explicit_deletes: int = 0
    restores: int = 0
    reactivated: int = 0  # cold memories a search or a touch used (reactivate events)
    promotes: int = 0
    archived_from_hot: int = 0  # straight hot -> cold, never warm
    labelled_searches: int = 0
    stale_hits: int = 0
    recall_searches: int = 0
    recall_sum: float = 0.0
    hot_by_type: dict[str, float] = field(default_factory=dict)  # mean hot memories per type over the samples
    events_by_type: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> type -> events
    label_types: dict[str, int] = field(default_factory=dict)  # types of the ids in search labels
    skipped_types: dict[str, int] = field(default_factory=dict)  # types of the memories skipped ops named
    types_seen: set[str] = field(default_factory=set, repr=False)
    id_types: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    # recorded id -> the id this replay's store gave it, where they differ (a
    # re-added memory the policy deduplicates returns the existing memory's id)
    id_map: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)
    lifecycle: dict[str, Any] = field(default_factory=dict, repr=False)
    start: float = 0.0
    end: float = 0.0
    elapsed_s: float = 0.0

    @property
    def hot_mean(self) -> float:
        """Mean number of hot memories over the sweep samples."""
        return sum(self.hot_samples) / len(self.hot_samples) if self.hot_samples else float(self.hot_final)

    @property
    def hot_bytes_mean(self) -> float:
        return self.hot_mean * self.dim * 4

    @property
    def hot_bytes_final(self) -> int:
        return self.hot_final * self.dim * 4

    @property
    def reactivations(self) -> int:
        return self.restores + self.reactivated + self.promotes

    @property
    def stale_rate(self) -> float | None:
        return self.stale_hits / self.labelled_searches if self.labelled_searches else None

    @property
    def live_recall(self) -> float | None:
        return self.recall_sum / self.recall_searches if self.recall_searches else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable."""
        return {
            "name": self.name,
            "source": self.source,
            "dim": self.dim,
            "records": self.records,
            "replayed": dict(self.replayed),
            "skipped": dict(self.skipped),
            "unseen_touches": self.unseen_touches,
            "sweeps": self.sweeps,
            "hot_mean": self.hot_mean,
            "hot_final": self.hot_final,
            "hot_bytes_mean": self.hot_bytes_mean,
            "hot_bytes_final": self.hot_bytes_final,
            "tiers_final": dict(self.tiers_final),
            "demoted": self.demoted,
            "archived": self.archived,
            "deleted": self.deleted,
            "explicit_deletes": self.explicit_deletes,
            "restores": self.restores,
            "reactivated": self.reactivated,
            "promotes": self.promotes,
            "archived_from_hot": self.archived_from_hot,
            "hot_by_type": dict(self.hot_by_type),
            "events_by_type": {k: dict(v) for k, v in self.events_by_type.items()},
            "label_types": dict(self.label_types),
            "skipped_types": dict(self.skipped_types),
            "reactivations": self.reactivations,
            "labelled_searches": self.labelled_searches,
            "stale_hits": self.stale_hits,
            "stale_rate": self.stale_rate,
            "recall_searches": self.recall_searches,
            "live_recall": self.live_recall,
            "start": self.start,
            "end": self.end,
            "elapsed_s": self.elapsed_s,
            "policy": self.policy.to_dict(),
            "lifecycle": self.lifecycle,
        }


# ---------------------------------------------------------------------------
# input


def _load_policies(policies: Sequence[Any]) -> list[tuple[str, str | None, Policy]]:
    if isinstance(policies, (str, os.PathLike, Policy)):
        policies = [policies]
    if not policies:
        raise InvalidInputError("simulate needs at least one policy")
    out: list[tuple[str, str | None, Policy]] = []
    for i, p in enumerate(policies):
        if isinstance(p, Policy):
            out.append((f"policy {i + 1}", None, p))
        elif isinstance(p, (str, os.PathLike)):
            path = Path(p)
            out.append((path.stem, str(path), Policy.from_file(path)))
        else:
            raise InvalidInputError(
                f"policy {i + 1}: expected a Policy or a TOML/JSON file path, got {type(p).__name__}"
            )
    names = [n for n, _, _ in out]
    return [(n if names.count(n) == 1 else f"{n} ({i + 1})", s, p) for i, (n, s, p) in enumerate(out)]


def _plain_trace(path: Path, tmp: Path) -> Path:
    """The trace as a plain JSON-lines file (``.gz`` is decompressed into ``tmp``)."""
    if not path.is_file():
        raise InvalidInputError(f"no trace file at {path}")
    if path.suffix.lower() != ".gz":
        return path
    plain = tmp / "trace.jsonl"
    try:
        with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except (OSError, EOFError) as exc:
        raise CorruptDataError(f"trace {path}: not a readable gzip file ({exc})") from None
    return plain


def _scan(path: Path) -> tuple[int, float, float, int | None]:
    """Records, first and last time, and the dimension of the first add."""
    n, t0, t1, dim = 0, math.inf, -math.inf, None
    for rec in read_trace(path):
        n += 1
        t0 = min(t0, rec["t"])
        t1 = max(t1, rec["t"])
        if dim is None and rec["op"] == "add" and isinstance(rec.get("embedding"), str):
            dim = decode_vector(rec["embedding"]).size
    return n, t0, t1, dim


# ---------------------------------------------------------------------------
# replay


def simulate(
    trace_path: str | os.PathLike[str],
    policies: Sequence[Any],
    *,
    sweep_interval_s: float = 3600.0,
    dim: int | None = None,
    progress: bool | None = False,
) -> list[SimResult]:
    """Replay the trace at ``trace_path`` (JSON lines, or ``.gz`` of them)
    under each policy (a :class:`Policy` or a TOML/JSON file path); returns
    one :class:`SimResult` per policy, in order.

    sweep_interval_s: simulated seconds between migrator sweeps. dim: vector
    dimension (default: the first add's). progress: draw a bar (``None``:
    when stderr is a terminal).
    """
    if (
        isinstance(sweep_interval_s, bool)
        or not isinstance(sweep_interval_s, (int, float))
        or not (math.isfinite(sweep_interval_s) and sweep_interval_s > 0)
    ):
        raise InvalidInputError(f"sweep_interval_s must be a positive number of seconds, got {sweep_interval_s!r}")
    specs = _load_policies(policies)
    with tempfile.TemporaryDirectory(prefix="tierstore-sim-") as tmpdir:
        tmp = Path(tmpdir)
        path = _plain_trace(Path(trace_path), tmp)
        n, t0, t1, trace_dim = _scan(path)
        if n == 0:
            raise InvalidInputError(f"the trace {trace_path} holds no records")
        if dim is None:
            if trace_dim is None:
                raise InvalidInputError(f"the trace {trace_path} has no add to take the dimension from: pass dim=")
            dim = trace_dim
        results = []
        with Progress(n * len(specs), "simulate", enabled=progress, unit=" records") as bar:
            for i, (name, source, policy) in enumerate(specs):
                res = SimResult(name=name, source=source, policy=policy, dim=int(dim), records=n, start=t0, end=t1)
                _replay(path, res, tmp / f"store-{i}", float(sweep_interval_s), bar)
                results.append(res)
        return results


class MemoryObjectStore:
    """A dict-backed :class:`~tierstore.storage.objectstore.ObjectStore` for the
    throwaway stores of a simulation: the cold tier's protocol without the
    fsyncs that make the local directory durable (durability is moot here)."""

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryObjectStore({len(self._objects)} objects)"

    def put(self, key: str, data: bytes) -> None:
        key, data = validate_key(key), validate_data(data)
        with self._lock:
            self._objects[key] = data

    def put_if_absent(self, key: str, data: bytes) -> bool:
        key, data = validate_key(key), validate_data(data)
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = data
            return True

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        key = validate_key(key)
        lo, hi = validate_range(start, end)
        with self._lock:
            if key not in self._objects:
                raise ObjectNotFoundError(key)
            data = self._objects[key]
        return data[lo:hi]

    def delete(self, key: str) -> bool:
        key = validate_key(key)
        with self._lock:
            return self._objects.pop(key, None) is not None

    def list(self, prefix: str = "") -> list[str]:
        prefix = validate_prefix(prefix)
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def exists(self, key: str) -> bool:
        key = validate_key(key)
        with self._lock:
            return key in self._objects

    def size(self, key: str) -> int:
        return len(self.get(key))


def _replay(path: Path, res: SimResult, root: Path, interval: float, bar: Progress) -> None:
    from tierstore.store import Settings, TierStore  # late: the store imports much of the package

    started = time.perf_counter()
    clock = ManualClock(res.start)
    hot_sums: dict[str, int] = {}
    # A throwaway store: no fsync for the catalog or the cold tier.
    with TierStore.open(
        root,
        dim=res.dim,
        policy=res.policy,
        clock=clock,
        cold=MemoryObjectStore(),
        settings=Settings(synchronous="OFF"),
    ) as store:

        def sweep() -> None:
            # A sweep reads only what is due; skip the call (not the sample)
            # when the due index is empty. Unflushed accesses only postpone
            # due times, so the catalog never says "nothing due" wrongly.
            if store.engine.catalog.count_due(clock.now()) > 0:
                store.sweep()
            res.sweeps += 1
            total = 0
            for mtype, n in store.engine.catalog.query(
                "SELECT memory_type, count(*) FROM memories WHERE tier = 0 GROUP BY memory_type"
            ):
                hot_sums[mtype] = hot_sums.get(mtype, 0) + n
                total += n
            res.hot_samples.append(total)

        next_sweep = res.start + interval
        for k, rec in enumerate(read_trace(path), 1):
            t = max(float(rec["t"]), clock.now())  # a trace is in time order; never run the clock backwards
            while next_sweep <= t:
                clock.set(next_sweep)
                sweep()
                next_sweep += interval
            clock.set(t)
            op = rec["op"]
            try:
                _apply(store, rec, res)
            except UnknownMemoryTypeError as exc:
                raise PolicyError(f"policy {res.name!r} cannot replay record {k} of {path.name}: {exc}") from None
            except (MemoryNotFoundError, DuplicateIdError):
                _skip(res, op, rec.get("ns"), [rec.get("id")])
            except InvalidInputError as exc:
                raise CorruptDataError(f"trace record {k} ({op}): {exc}") from None
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptDataError(f"trace record {k} ({op}): malformed ({type(exc).__name__}: {exc})") from None
            else:
                res.replayed[op] = res.replayed.get(op, 0) + 1
            bar.update()
        sweep()  # the state at the end of the trace
        res.hot_final = res.hot_samples[-1]
        res.hot_by_type = {t: n / len(res.hot_samples) for t, n in sorted(hot_sums.items())}
        res.tiers_final = store.stats(lifecycle=False).by_tier
        for kind, mtype, from_tier, explicit, count in store.engine.catalog.query(
            "SELECT kind, memory_type, from_tier, reason = 'explicit', count(*) FROM events"
            " GROUP BY kind, memory_type, from_tier, reason = 'explicit'"
        ):
            if kind == "delete" and explicit:
                res.explicit_deletes += count
                continue
            per = res.events_by_type.setdefault(kind, {})
            per[mtype] = per.get(mtype, 0) + count
            if kind == "demote":
                res.demoted += count
            elif kind == "archive":
                res.archived += count
                if from_tier == "hot":
                    res.archived_from_hot += count
            elif kind == "delete":
                res.deleted += count
            elif kind == "restore":
                res.restores += count
            elif kind == "reactivate":
                res.reactivated += count
            elif kind == "promote":
                res.promotes += count
        res.lifecycle = lifecycle_metrics(store)
    res.id_types.clear()  # only needed during the replay
    res.id_map.clear()
    res.elapsed_s = time.perf_counter() - started


def _skip(res: SimResult, op: str, ns: Any, ids: Sequence[Any]) -> None:
    res.skipped[op] = res.skipped.get(op, 0) + len(ids)
    for i in ids:
        t = res.id_types.get((ns, i), "unknown")
        res.skipped_types[t] = res.skipped_types.get(t, 0) + 1


def _existing(store: Any, ns: str, ids: Sequence[str]) -> list[str]:
    return [i for i in ids if store.get(ns, i) is not None]


def _apply(store: Any, rec: dict[str, Any], res: SimResult) -> None:
    """Replay one record. Raises MemoryNotFoundError/DuplicateIdError when it
    names a memory the replay does not have (or already has). Recorded ids
    are read through ``res.id_map``: under a policy that deduplicates, an add
    may return an existing memory's id, which later records mean."""
    op, ns = rec["op"], rec["ns"]

    def mapped(ids: Any) -> Any:
        if isinstance(ids, str):
            return res.id_map.get((ns, ids), ids)
        return None if ids is None else [res.id_map.get((ns, i), i) for i in ids]

    rec = {**rec, **{f: mapped(rec[f]) for f in ("id", "ids", "stale", "live") if rec.get(f) is not None}}
    if op == "add":
        mtype = rec.get("memory_type", "fact")
        mid = store.add(
            ns,
            rec["content"],
            decode_vector(rec["embedding"]),
            memory_type=mtype,
            confidence=rec.get("confidence", 0.8),
            source=rec.get("source", "user_declaration"),
            tags=rec.get("tags") or (),
            ttl_seconds=rec.get("ttl_seconds"),
            pinned=rec.get("pinned", False),
            id=rec.get("id"),
            key=rec.get("key"),
            metadata=rec.get("metadata"),
            # a memory this policy already deleted has nothing left to supersede
            supersedes=[i for i in mapped(rec.get("supersedes") or []) if store.get(ns, i) is not None],
        )
        if rec.get("id") is not None and mid != rec["id"]:
            res.id_map[(ns, rec["id"])] = mid
        res.types_seen.add(mtype)
        res.id_types[(ns, mid)] = mtype
    elif op == "search":
        hits = store.search(
            ns,
            decode_vector(rec["query"]),
            k=rec.get("k", 5),
            context_tags=rec.get("context_tags") or (),
            memory_types=rec.get("memory_types"),
            min_confidence=rec.get("min_confidence", 0.0),
            include_warm=rec.get("include_warm", True),
            record_access=rec.get("record_access"),
        )
        stale, live = rec.get("stale"), rec.get("live")
        for i in (stale or []) + (live or []):
            t = res.id_types.get((ns, i), "unknown")
            res.label_types[t] = res.label_types.get(t, 0) + 1
        if stale:
            res.labelled_searches += 1
            if hits and hits[0].id in set(stale):
                res.stale_hits += 1
        if live:
            want = set(live)
            res.recall_searches += 1
            res.recall_sum += len(want & {h.id for h in hits}) / len(want)
    elif op == "touch":
        ids = rec["ids"]
        ids = [ids] if isinstance(ids, str) else list(ids)
        archived = [i for i in ids if (m := store.get(ns, i)) is not None and m.tier == "cold"]
        if archived:
            res.unseen_touches += len(archived)
            ids = [i for i in ids if i not in archived]
            if not ids:
                return
        try:
            store.touch(ns, ids)
        except MemoryNotFoundError:
            # touch counts nothing when one id is unknown: count the ones we have
            have = _existing(store, ns, ids)
            if have:
                store.touch(ns, have)
            missing = list(ids)
            for i in have:
                missing.remove(i)
            _skip(res, "touch", ns, missing)
    elif op == "feedback":
        store.feedback(
            ns,
            rec["id"],
            positive=rec["positive"],
            strength=rec.get("strength", 1.0),
            implicit=rec.get("implicit", False),
        )
    elif op == "pin":
        store.pin(ns, rec["id"], rec.get("pinned", True))
    elif op == "delete":
        if not store.delete(ns, rec["id"]):
            raise MemoryNotFoundError(f"no memory {rec['id']!r} to delete")
    elif op == "set_context":
        store.set_context(ns, rec.get("tags") or ())
    elif op == "restore":
        ids = rec.get("ids")
        if ids is not None:
            have = _existing(store, ns, ids)
            if len(have) < len(ids):
                _skip(res, "restore", ns, [i for i in ids if i not in have])
            if not have and rec.get("where") is None and rec.get("text") is None and rec.get("query") is None:
                return
            ids = have or None
        query = rec.get("query")
        store.restore(
            ns,
            ids=ids,
            where=rec.get("where"),
            text=rec.get("text"),
            query=None if query is None else decode_vector(query),
            limit=rec.get("limit"),
        )


# ---------------------------------------------------------------------------
# comparison

# Which policy parameters drive each metric (to explain a difference).
_CAUSES = {
    "hot": (
        "half_life",
        "ttl",
        "demote",
        "archive",
        "boost",
        "initial_weight",
        "refresh",
        "confidence",
        "context",
        "supersession",
        "dedupe",
    ),
    "archived": (
        "ttl",
        "half_life",
        "archive",
        "delete",
        "delete_below_confidence",
        "refresh",
        "confidence",
        "supersession",
        "dedupe",
    ),
    "deleted": ("delete", "delete_below_confidence", "ttl", "half_life", "confidence"),
    "demoted": ("half_life", "demote", "archive", "ttl", "boost", "initial_weight"),
    "reactivations": ("demote", "archive", "half_life", "ttl", "boost", "refresh", "dedupe"),
    "search": (
        "scoring",
        "half_life",
        "ttl",
        "demote",
        "archive",
        "boost",
        "initial_weight",
        "refresh",
        "confidence",
        "context",
        "mask",
        "supersession",
        "dedupe",
    ),
    "survival": ("ttl", "half_life", "archive", "delete", "refresh", "boost", "confidence", "supersession"),
    "skipped": ("delete", "delete_below_confidence", "ttl", "half_life", "dedupe"),
}
_PER_TYPE = ("half_life", "ttl", "boost", "initial_weight", "refresh", "type")


@dataclass(frozen=True)
class Change:
    """One way a policy differs from another. direction: +1 keeps memories
    longer, -1 forgets sooner, 0 neither (or it depends)."""

    category: str
    text: str
    direction: int
    memory_type: str | None = None


def policy_changes(a: Policy, b: Policy, types: set[str] | None = None) -> list[Change]:
    """How ``b`` differs from ``a``, parameter by parameter; ``types`` limits
    the per-type changes to those memory types."""
    out: list[Change] = []

    def dur(x: float | None) -> str:
        return "never" if x is None else format_duration(x)

    def longer(x: float | None, y: float | None) -> int:
        xv = math.inf if x is None else x
        yv = math.inf if y is None else y
        return 0 if xv == yv else (1 if yv > xv else -1)

    for name in sorted(set(a.types) | set(b.types)):
        if types is not None and name not in types:
            continue
        ta, tb = a.types.get(name), b.types.get(name)
        if ta is None or tb is None:
            out.append(Change("type", f"type {name} only in {'the first' if tb is None else 'the second'}", 0, name))
            continue
        if ta.half_life_seconds != tb.half_life_seconds:
            out.append(
                Change(
                    "half_life",
                    f"{name} half-life {dur(ta.half_life_seconds)} → {dur(tb.half_life_seconds)}",
                    longer(ta.half_life_seconds, tb.half_life_seconds),
                    name,
                )
            )
        if ta.ttl_seconds != tb.ttl_seconds:
            out.append(
                Change(
                    "ttl",
                    f"{name} TTL {dur(ta.ttl_seconds)} → {dur(tb.ttl_seconds)}",
                    longer(ta.ttl_seconds, tb.ttl_seconds),
                    name,
                )
            )
        if ta.boost != tb.boost:
            out.append(
                Change("boost", f"{name} boost {ta.boost:g} → {tb.boost:g}", 1 if tb.boost > ta.boost else -1, name)
            )
        if ta.initial_weight != tb.initial_weight:
            out.append(
                Change(
                    "initial_weight",
                    f"{name} initial weight {ta.initial_weight:g} → {tb.initial_weight:g}",
                    1 if tb.initial_weight > ta.initial_weight else -1,
                    name,
                )
            )
        if ta.refresh_on_read != tb.refresh_on_read:
            out.append(
                Change(
                    "refresh",
                    f"{name} TTL {'now' if tb.refresh_on_read else 'no longer'} refreshes on read",
                    1 if tb.refresh_on_read else -1,
                    name,
                )
            )
        if ta.sweep_deletes != tb.sweep_deletes:
            out.append(
                Change(
                    "sweep_deletes",
                    f"{name} {'now' if tb.sweep_deletes else 'no longer'} deleted by the sweep",
                    -1 if tb.sweep_deletes else 1,
                    name,
                )
            )
        if ta.ranked_by_use != tb.ranked_by_use:
            # a change of ranking, not of lifetime: nothing is kept longer or shorter
            out.append(
                Change(
                    "ranked_by_use",
                    f"{name} {'now' if tb.ranked_by_use else 'no longer'} ranked by use in search",
                    0,
                    name,
                )
            )
    tha, thb = a.thresholds, b.thresholds
    for key in ("demote", "archive", "delete", "delete_below_confidence"):
        x, y = getattr(tha, key), getattr(thb, key)
        if x != y:
            # a higher threshold is crossed sooner: it forgets sooner
            out.append(Change(key, f"{key.replace('_', ' ')} threshold {x:g} → {y:g}", -1 if y > x else 1))
    if a.confidence != b.confidence:
        names = [
            k
            for k in (
                "ttl_floor",
                "half_life_floor",
                "decay_half_life_seconds",
                "feedback_step",
                "negative_weight_penalty",
                "llm_weight",
                "rule_weight",
                "feedback_weight",
            )
            if getattr(a.confidence, k) != getattr(b.confidence, k)
        ]
        out.append(Change("confidence", "confidence settings (" + (", ".join(names) or "source defaults") + ")", 0))
    if a.scoring != b.scoring:
        diffs = []
        if a.scoring.mode != b.scoring.mode:
            diffs.append(f"mode {a.scoring.mode} → {b.scoring.mode}")
        if a.scoring.recency_half_life_seconds != b.scoring.recency_half_life_seconds:
            diffs.append(
                f"recency half-life {dur(a.scoring.recency_half_life_seconds)} → "
                f"{dur(b.scoring.recency_half_life_seconds)}"
            )
        if dict(a.scoring.weights) != dict(b.scoring.weights):
            diffs.append("factor weights")
        out.append(Change("scoring", "scoring " + (", ".join(diffs) or "settings"), 0))
    if a.context_rules != b.context_rules:
        out.append(Change("context", "context rules", 0))
    if a.mask_rules != b.mask_rules or a.mask_tag_prefix != b.mask_tag_prefix:
        out.append(Change("mask", "mask rules", 0))
    for name in sorted(set(a.types) & set(b.types)):
        if types is not None and name not in types:
            continue
        ta, tb = a.types[name], b.types[name]
        for attr, label in (
            ("supersede_above", "automatic supersession bar"),
            ("supersede_above_shared_tag", "automatic supersession bar with a shared tag"),
        ):
            x, y = getattr(ta, attr), getattr(tb, attr)
            if x != y:
                # a lower bar (or one turned on) retires more memories: it forgets sooner
                xv, yv = 2.0 if x is None else x, 2.0 if y is None else y
                out.append(
                    Change(
                        "supersession",
                        f"{name} {label} {'off' if x is None else x} → {'off' if y is None else y}",
                        -1 if yv < xv else 1,
                        name,
                    )
                )
    if a.supersession != b.supersession:
        labels = {
            "confidence_margin": "confidence margin",
            "superseded_factor": "superseded factor",
            "resolve_margin": "resolution margin",
            "resolve_margin_shared_tag": "resolution margin with a shared tag",
            "resolve_min_gap": "resolution gap",
            "resolve_margin_same_wording": "resolution margin, same wording",
        }
        for field, label in labels.items():
            x, y = getattr(a.supersession, field), getattr(b.supersession, field)
            if x != y:
                show = [("off" if v is None else dur(v) if field == "resolve_min_gap" else f"{v:g}") for v in (x, y)]
                out.append(Change("supersession", f"supersession {label} {show[0]} → {show[1]}", 0))
    if a.dedupe != b.dedupe:
        out.append(Change("dedupe", f"dedupe {a.dedupe} → {b.dedupe}", 0))
    return out


def _why(changes: list[Change], metric: str, types: Sequence[str] | None = None, limit: int = 5) -> str:
    """The changes that drive ``metric``: per-type ones of ``types`` (all
    types if ``None``), and the global ones."""
    rel = [
        c
        for c in changes
        if c.category in _CAUSES[metric] + ("type",)
        and (c.memory_type is None or types is None or c.memory_type in types)
    ]
    if not rel:
        return "no parameter that drives it differs for these types (replay effects: ties, skipped operations)"
    texts = [c.text for c in rel[:limit]]
    more = f" and {len(rel) - limit} more" if len(rel) > limit else ""
    return ", ".join(texts) + more


def _main_types(da: Mapping[str, float], db: Mapping[str, float], share: float = 0.2) -> list[str]:
    """The types that account for most of the difference between two per-type
    tallies: largest absolute difference first, each at least ``share`` of the
    largest."""
    diffs = {t: db.get(t, 0) - da.get(t, 0) for t in set(da) | set(db)}
    ranked = sorted((t for t in diffs if diffs[t]), key=lambda t: (-abs(diffs[t]), t))
    if not ranked:
        return []
    top = abs(diffs[ranked[0]])
    return [t for t in ranked if abs(diffs[t]) >= share * top][:3]


def _by_type(a: dict[str, float], b: dict[str, float], types: list[str], fmt: str = "g") -> str:
    return ", ".join(f"{t} {format(b.get(t, 0), fmt)} vs {format(a.get(t, 0), fmt)}" for t in types)


def _direction(changes: list[Change]) -> int:
    s = sum(c.direction for c in changes)
    return 0 if s == 0 else (1 if s > 0 else -1)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def _median_survival(r: SimResult, mtype: str) -> float | None:
    s = r.lifecycle.get("survival", {}).get("by_type", {}).get(mtype)
    return None if s is None else s["median_s"]


def format_comparison(results: Sequence[SimResult]) -> str:
    """The results side by side, then for each policy after the first one
    line per metric: how it differs from the first, and which of its
    parameters (for the memory types that make the difference) drive that."""
    if not results:
        raise InvalidInputError("format_comparison needs at least one result")
    types = sorted(set().union(*(r.types_seen for r in results)))
    rows: list[tuple[str, list[str]]] = [
        ("records replayed", [f"{sum(r.replayed.values())}/{r.records}" for r in results]),
        ("sweeps", [str(r.sweeps) for r in results]),
        ("hot memories, mean", [f"{r.hot_mean:.1f}" for r in results]),
        ("hot memories, final", [str(r.hot_final) for r in results]),
        ("hot vectors, mean", [_bytes(r.hot_bytes_mean) for r in results]),
        ("warm / cold at end", [f"{r.tiers_final.get('warm', 0)} / {r.tiers_final.get('cold', 0)}" for r in results]),
        ("demoted", [str(r.demoted) for r in results]),
        ("archived (from hot)", [f"{r.archived} ({r.archived_from_hot})" for r in results]),
        ("deleted by the policy", [str(r.deleted) for r in results]),
        (
            "reactivations",
            [
                f"{r.reactivations} ({r.restores} restore, {r.reactivated} reactivate, {r.promotes} promote)"
                for r in results
            ],
        ),
        ("stale hits@1", [f"{r.stale_hits}/{r.labelled_searches}" for r in results]),
        ("live recall@k", [_fmt(r.live_recall) for r in results]),
        ("reactivation rate", [_fmt(r.lifecycle.get("reactivation", {}).get("rate"), ".1%") for r in results]),
    ]
    for t in types:
        rows.append(
            (
                f"median survival, {t}",
                [format_duration(m) if (m := _median_survival(r, t)) is not None else "n/a" for r in results],
            )
        )
    rows.append(("skipped operations", [str(sum(r.skipped.values())) for r in results]))
    rows.append(("touches of archived memories", [str(r.unseen_touches) for r in results]))
    names = [r.name for r in results]
    w0 = max(len(label) for label, _ in rows) + 2
    widths = [max(len(n), *(len(v[i]) for _, v in rows)) + 2 for i, n in enumerate(names)]
    lines = ["".ljust(w0) + "".join(n.rjust(w) for n, w in zip(names, widths))]
    for label, vals in rows:
        lines.append(label.ljust(w0) + "".join(v.rjust(w) for v, w in zip(vals, widths)))
    base = results[0]
    for r in results[1:]:
        lines.append("")
        lines.append(f"why {r.name} differs from {base.name}:")
        lines.extend("  " + s for s in _explain(base, r, types))
    return "\n".join(lines)


def _more_fewer(d: float, more: str = "more", fewer: str = "fewer") -> str:
    return more if d > 0 else fewer


def _kind_by_type(r: SimResult, *kinds: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in kinds:
        for t, n in r.events_by_type.get(k, {}).items():
            out[t] = out.get(t, 0) + n
    return out


def _explain(a: SimResult, b: SimResult, types: list[str]) -> list[str]:
    ch = policy_changes(a.policy, b.policy, set(types))
    tendency = {1: f"{b.name} keeps memories longer", -1: f"{b.name} forgets sooner", 0: "its changes pull both ways"}[
        _direction(ch)
    ]
    out = [f"policy: {tendency} (" + (", ".join(c.text for c in ch) or "no parameter differs") + ")"]

    if round(a.hot_mean, 1) != round(b.hot_mean, 1):
        pct = 100.0 * (b.hot_mean - a.hot_mean) / a.hot_mean if a.hot_mean else math.inf
        main = _main_types(a.hot_by_type, b.hot_by_type)
        out.append(
            f"hot footprint: {abs(pct):.0f} % {_more_fewer(pct, 'larger', 'smaller')} hot tier (mean "
            f"{b.hot_mean:.1f} vs {a.hot_mean:.1f} memories, {_bytes(b.hot_bytes_mean)} vs "
            f"{_bytes(a.hot_bytes_mean)} of vectors; mostly {_by_type(a.hot_by_type, b.hot_by_type, main, '.1f')})"
            f" - {_why(ch, 'hot', main)}"
        )
    else:
        out.append(f"hot footprint: the same (mean {b.hot_mean:.1f} memories)")
    for label, kinds, va, vb, verb in (
        ("archived", ("archive",), a.archived, b.archived, "archives"),
        ("deleted", ("delete",), a.deleted, b.deleted, "deletes"),
        ("demoted", ("demote",), a.demoted, b.demoted, "demotes"),
    ):
        if va == vb:
            out.append(f"{label}: the same ({va})")
            continue
        ta, tb = _kind_by_type(a, *kinds), _kind_by_type(b, *kinds)
        main = _main_types(ta, tb)
        line = (
            f"{label}: {b.name} {verb} {abs(vb - va)} {_more_fewer(vb - va)} ({vb} vs {va}; {_by_type(ta, tb, main)})"
        )
        if label == "demoted" and b.archived_from_hot != a.archived_from_hot:
            line += (
                f": {b.archived_from_hot} vs {a.archived_from_hot} memories went straight from hot to cold"
                " (expired or fell below the archive threshold between two sweeps)"
            )
        out.append(f"{line} - {_why(ch, label, main)}")
    if a.reactivations != b.reactivations:
        d = b.reactivations - a.reactivations
        ta, tb = (_kind_by_type(r, "restore", "reactivate", "promote") for r in (a, b))
        main = _main_types(ta, tb)
        hint = "more of what it moved out was needed again" if d > 0 else "fewer memories had to come back"
        out.append(
            f"reactivations: {abs(d)} {_more_fewer(d)} restores, reactivations + promotions ({b.reactivations} vs "
            f"{a.reactivations}; {_by_type(ta, tb, main)}): {hint} - {_why(ch, 'reactivations', main)}"
        )
    else:
        out.append(f"reactivations: the same ({a.reactivations})")
    label_types = sorted(set(a.label_types) | set(b.label_types)) or None
    if a.labelled_searches or b.labelled_searches:
        if a.stale_hits != b.stale_hits:
            d = b.stale_hits - a.stale_hits
            out.append(
                f"stale hits: {abs(d)} {_more_fewer(d)} searches answered first by a superseded memory "
                f"({b.stale_hits}/{b.labelled_searches} vs {a.stale_hits}/{a.labelled_searches}) - "
                f"{_why(ch, 'search', label_types)}"
            )
        else:
            out.append(f"stale hits: the same ({a.stale_hits}/{a.labelled_searches})")
    if a.live_recall is not None and b.live_recall is not None:
        gain = b.live_recall - a.live_recall
        if abs(gain) >= 5e-4:
            out.append(
                f"live recall: {abs(gain):.3f} {_more_fewer(gain, 'higher', 'lower')} ({b.live_recall:.3f} vs "
                f"{a.live_recall:.3f}) - {_why(ch, 'search', label_types)}"
            )
        else:
            out.append(f"live recall: the same ({a.live_recall:.3f})")
    for t in types:
        ma, mb = _median_survival(a, t), _median_survival(b, t)
        if ma != mb:
            out.append(
                f"survival of {t}: median {format_duration(mb) if mb is not None else 'n/a (most alive)'}"
                f" vs {format_duration(ma) if ma is not None else 'n/a (most alive)'} - "
                f"{_why(ch, 'survival', [t])}"
            )
    sa, sb = sum(a.skipped.values()), sum(b.skipped.values())
    if sa != sb:
        main = _main_types(a.skipped_types, b.skipped_types)
        out.append(
            f"skipped: {sb} vs {sa} replayed operations named a memory the policy had already deleted"
            f" - {_why(ch, 'skipped', main)}"
        )
    return out


def results_json(results: Sequence[SimResult]) -> str:
    """The results as a JSON document (``tierstore simulate --json``)."""
    return json.dumps([r.as_dict() for r in results], indent=2, sort_keys=True)

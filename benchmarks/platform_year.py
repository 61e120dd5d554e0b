"""Issue 32: a year on a platform. Does forgetting keep a platform's memory
small, fast and right, where a memory that keeps everything grows?

    .venv/bin/python benchmarks/platform_year.py --out year-run                 # 1 000 users x 365 days
    .venv/bin/python benchmarks/platform_year.py --quick --out /tmp/year-quick  # smoke test (< 1 min)
    .venv/bin/python benchmarks/platform_year.py --resume year-run              # after a stop (Ctrl-C, SIGTERM)
    .venv/bin/python benchmarks/platform_year.py --render year-run --plots docs # plots and table again

**The platform.** ``--users`` users (one namespace each) over ``--days``
simulated days on a :class:`ManualClock`. Every day each user has
conversation turns (``conversation``, Poisson ``--chat-rate``); each of four
fact slots (home city, employer, car, gym: ``fact``) and four preference
slots (drink, cuisine, music, news: ``preference``) changes value at random
days (``--fact-change`` / ``--pref-change`` per slot and day; every slot has
a value from day 0); tasks start (``--task-rate``) and end 1-10 days later
(the end is a memory that supersedes the task); long-lived facts (an
allergy, a birthday, a sibling: three at day 0, then ``--long-rate`` a day)
are stated once and asked about rarely; one pinned fact (the emergency
contact) per user. Adds for a user-day are one ``add_batch`` between 08:00
and 14:00 (users spread), slot values with ``key=<slot>`` (the agent names
the slot it writes), the tasks' ends with ``supersedes=[task]``.

**Queries.** Every day, each user asks with probability ``--q-slot`` the
current value of one of its slots, ``--q-long`` one of its long-lived (or
the pinned) facts, ``--q-chat`` a detail of one of its conversation turns of
the last three days (today, yesterday, the day before), between 15:00 and
21:00. Scored as suite g scores them (:class:`tierstore.bench.forgetting.Score`):
**live recall@5** (all queries: the right memory among the five),
**stale-hit@1** (slot questions whose slot has changed: the first hit is a
superseded value), **long-lived recall@5** (long-lived and pinned questions).
tierstore's agent touches the first hit it used, as in suite g.

**Vectors** are synthetic, ``--dim`` (384, MiniLM's size) and clustered:
``--topics`` unit centres shared by all users, each user talking about eight
of them. A conversation turn, task or long-lived fact is its topic's centre
plus Gaussian noise of norm 0.9, normalised; a slot's value is the user's
slot anchor (a centre plus noise 0.9) plus noise of norm 0.45 (all values of
one slot are alike, as "I live in Lisbon" and "I moved to Osaka" are); a
question about a memory is that memory's vector plus noise of norm 0.5, a
slot question the slot's anchor plus noise 0.45 (it is about the slot, not
about a value). Each memory's vector is a function of the seed and its id.

**The two systems**, each in its own process (so that RSS is per system),
fed the same seeded stream (each process generates it; a SHA-256 over every
memory's id and vector bytes, compared at the end, proves they got the same):

* ``tierstore``: ``TierStore`` with the **default policy** and default
  settings, a local cold directory; ``search(ns, q, k=5)``; every night at
  midnight ``sweep()`` until nothing is due (the migrator's work, timed).
* ``baseline`` (keep everything): one hnswlib index per namespace (cosine, M
  16, ef_construction 200, ef 64: tierstore's hot-tier settings),
  ``knn_query(k=5)``, nothing ever forgotten, plain similarity. One index per
  namespace rather than one global index with a filter: docs/benchmarks.md
  suite (d) measured the global filtered index at 1.56 s a query at 2 million
  vectors against ~150 us for a per-namespace search. Contents go to an
  append-only file (on disk, not in RAM): only the index and ids are in memory.

Sampled every ``--sample-every`` days and at days 30, 90, 180, 365: RSS
(and, for tierstore, what its store holds in memory by part,
``Stats.memory_bytes``), disk bytes by tier, memories per tier, search
p50/p99 of the period's queries, the night's sweep, the period's answer
quality. Every question's wall time, process CPU and searching thread's CPU
are logged (``queries.jsonl``), every night's sweep too (``nights.jsonl``).
Results in ``--out``: ``report.json`` and, with ``--plots DIR``, PNG plots
``DIR/scale_*.png``.

**Stop and resume.** SIGINT/SIGTERM make each system finish its current day,
save its state (the store is closed; the baseline's indexes are saved) and
exit; ``--resume DIR`` continues from there with the parameters of the run.
A system killed without that (SIGKILL, a crash, power loss) has a store
holding part of a day that the stream cannot replay: ``--resume`` says so and
refuses (exit code 2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

DAY = 86400.0
HOUR = 3600.0
T0 = 1_700_000_000.0
FACT_SLOTS = ("home_city", "employer", "car", "gym")
PREF_SLOTS = ("drink", "cuisine", "music", "news")
SLOTS = FACT_SLOTS + PREF_SLOTS
FAV_TOPICS = 8
CHECKPOINT_DAYS = (30, 90, 180, 365)
STATE_VERSION = 1
EXIT_STOPPED = 3  # a child stopped cleanly at a day's end (resumable)
EXIT_REFUSED = 2  # bad parameters, or a run that cannot be resumed
SYSTEMS = ("tierstore", "baseline")
WORDS = (
    "weather train meeting dinner recipe invoice garden movie flight doctor school budget playlist "
    "birthday gift weekend coffee project report deadline bike rent market concert museum beach "
    "hiking laptop phone email holiday visa ticket hotel salad pasta soup tea juice book podcast"
).split()


class ParamError(ValueError):
    """A benchmark parameter out of its range (exit code 2, one line)."""


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Params:
    users: int = 1000
    days: int = 365
    dim: int = 384
    seed: int = 0
    topics: int = 64
    chat_rate: float = 5.2  # conversation turns per user and day (Poisson mean)
    fact_change: float = 1 / 60  # probability that a fact slot changes value, per slot and day
    pref_change: float = 1 / 20  # the same for a preference slot
    task_rate: float = 0.3  # tasks started per user and day (Poisson mean)
    long_rate: float = 0.01  # long-lived facts stated per user and day after the first three
    q_slot: float = 0.2  # probability that a user asks a slot's current value on a day
    q_long: float = 0.05  # ... a long-lived (or the pinned) fact
    q_chat: float = 0.2  # ... a detail of a recent conversation turn
    sample_every: int = 7  # days between samples

    def validate(self) -> Params:
        def integer(name: str, lo: int, hi: int) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ParamError(f"--{name.replace('_', '-')} must be an integer in [{lo}, {hi}], got {v!r}")

        def number(name: str, lo: float, hi: float) -> None:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
                raise ParamError(f"--{name.replace('_', '-')} must be a finite number in [{lo}, {hi}], got {v!r}")

        integer("users", 1, 1_000_000)
        integer("days", 1, 3650)
        integer("dim", 8, 4096)
        integer("seed", 0, 2**63 - 1)
        integer("topics", FAV_TOPICS, 100_000)
        integer("sample_every", 1, 3650)
        number("chat_rate", 0.0, 1000.0)
        number("task_rate", 0.0, 100.0)
        number("long_rate", 0.0, 100.0)
        for name in ("fact_change", "pref_change", "q_slot", "q_long", "q_chat"):
            number(name, 0.0, 1.0)
        if self.q_slot + self.q_long + self.q_chat == 0:
            raise ParamError("--q-slot, --q-long and --q-chat are all 0: the run would ask nothing")
        return self


QUICK = {"users": 12, "days": 21, "dim": 32, "topics": 16}


# --------------------------------------------------------------------------- the stream


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


@dataclass
class Query:
    """One question (the fields :meth:`tierstore.bench.forgetting.Score.record` reads)."""

    user: int
    kind: str  # slot, long, pinned, chat
    live: str
    stale: frozenset[str]
    vector: np.ndarray


class Stream:
    """The platform's events, a function of the parameters alone.

    State is ids only (a few per user); a memory's vector is rebuilt from the
    seed and its id (:meth:`vector`). ``day(d)`` must be called for d = 0, 1,
    ... in order; ``day(d, build=False)`` advances the state without building
    items or vectors (a resumed run replays the days it has done)."""

    def __init__(self, p: Params) -> None:
        self.p = p
        rng = np.random.default_rng([p.seed, 1])
        self.centers = _unit(rng.normal(size=(p.topics, p.dim)))
        self.fav = np.stack([rng.choice(p.topics, FAV_TOPICS, replace=False) for _ in range(p.users)])
        self.slot_topic = rng.integers(0, p.topics, size=(p.users, len(SLOTS)))
        self.anchors_noise = rng.normal(size=(len(SLOTS), p.dim)).astype(np.float32)  # mixed per user below
        self.slots: list[list[list[str]]] = [[[] for _ in SLOTS] for _ in range(p.users)]  # history, live last
        self.long: list[list[tuple[str, int]]] = [[] for _ in range(p.users)]  # (id, topic); [0] is pinned
        self.chat: list[list[list[tuple[str, int]]]] = [[] for _ in range(p.users)]  # the last 3 days' turns
        self.tasks: list[list[tuple[int, str]]] = [[] for _ in range(p.users)]  # (end day, id)
        self.next_day = 0
        self.added = 0
        self.by_kind: dict[str, int] = {}

    # vectors: a function of (seed, id), so that a query can rebuild its target's
    def _noise(self, key: str, scale: float) -> np.ndarray:
        h = int.from_bytes(hashlib.blake2b(f"{self.p.seed}:{key}".encode(), digest_size=8).digest(), "little")
        g = np.random.default_rng(h).standard_normal(self.p.dim).astype(np.float32)
        return g * np.float32(scale / math.sqrt(self.p.dim))

    def anchor(self, user: int, slot: int) -> np.ndarray:
        return _unit(self.centers[self.slot_topic[user, slot]] + self._noise(f"anchor:{user}:{slot}", 0.9))

    def vector(self, mid: str, topic: int) -> np.ndarray:
        """A turn, task or long-lived fact: its topic's centre + noise 0.9."""
        return _unit(self.centers[topic] + self._noise(mid, 0.9))

    def slot_vector(self, mid: str, user: int, slot: int) -> np.ndarray:
        return _unit(self.anchor(user, slot) + self._noise(mid, 0.45))

    def _text(self, rng: np.random.Generator, head: str) -> str:
        return head + " " + " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), 12))

    def day(self, d: int, build: bool = True) -> tuple[list[tuple[int, list[dict[str, Any]]]], list[Query]]:
        """Day ``d``'s adds (per user: add_batch items) and questions."""
        if d != self.next_day:
            raise RuntimeError(f"Stream.day({d}) called out of order (next is {self.next_day})")
        self.next_day += 1
        p = self.p
        rng = np.random.default_rng([p.seed, 2, d])
        text_rng = np.random.default_rng([p.seed, 3, d])  # apart: a replay (build=False) draws no text
        n_chat = rng.poisson(p.chat_rate, p.users)
        n_task = rng.poisson(p.task_rate, p.users)
        change = rng.random((p.users, len(SLOTS))) < np.array(
            [p.fact_change] * len(FACT_SLOTS) + [p.pref_change] * len(PREF_SLOTS)
        )
        new_long = rng.random(p.users) < p.long_rate
        ask = rng.random((p.users, 3)) < np.array([p.q_slot, p.q_long, p.q_chat])
        picks = rng.random((p.users, 4))
        adds: list[tuple[int, list[dict[str, Any]]]] = []
        queries: list[Query] = []
        for u in range(p.users):
            items: list[dict[str, Any]] = []

            def item(mid: str, kind: str, vec: Any, u: int = u, items: list[dict[str, Any]] = items, **kw: Any) -> None:
                self.added += 1
                self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
                if build:
                    kw.setdefault("memory_type", "fact")
                    items.append({"id": mid, "content": self._text(text_rng, f"[{kind}] u{u} d{d}:"), **kw})
                    items[-1]["embedding"] = vec()

            if d == 0:  # day 0: the pinned fact, three long-lived facts, every slot's first value
                for j in range(4):
                    mid, topic = f"u{u}-long{j}", int(self.fav[u, j % FAV_TOPICS])
                    self.long[u].append((mid, topic))
                    item(mid, "pinned" if j == 0 else "long", lambda m=mid, t=topic: self.vector(m, t), pinned=j == 0)
            for s in range(len(SLOTS)):
                if d == 0 or change[u, s]:
                    hist = self.slots[u][s]
                    mid = f"u{u}-{SLOTS[s]}{len(hist)}"
                    hist.append(mid)
                    item(
                        mid,
                        "slot",
                        lambda m=mid, s=s, u=u: self.slot_vector(m, u, s),
                        memory_type="fact" if SLOTS[s] in FACT_SLOTS else "preference",
                        key=SLOTS[s],
                    )
            if d > 0 and new_long[u]:
                mid, topic = f"u{u}-long{len(self.long[u])}", int(self.fav[u, rng.integers(FAV_TOPICS)])
                self.long[u].append((mid, topic))
                item(mid, "long", lambda m=mid, t=topic: self.vector(m, t))
            ended = [t for t in self.tasks[u] if t[0] <= d]
            self.tasks[u] = [t for t in self.tasks[u] if t[0] > d]
            for _, tid in ended:
                mid = f"{tid}-done"
                item(
                    mid,
                    "task-end",
                    lambda m=mid, u=u: self.vector(m, int(self.fav[u, 1])),
                    memory_type="task",
                    supersedes=[tid],
                )
            for j in range(int(n_task[u])):
                mid = f"u{u}-task{d}-{j}"
                self.tasks[u].append((d + 1 + int(rng.integers(10)), mid))
                item(mid, "task", lambda m=mid, u=u: self.vector(m, int(self.fav[u, 1])), memory_type="task")
            turns: list[tuple[str, int]] = []
            for j in range(int(n_chat[u])):
                mid, topic = f"u{u}-chat{d}-{j}", int(self.fav[u, rng.integers(FAV_TOPICS)])
                turns.append((mid, topic))
                item(mid, "chat", lambda m=mid, t=topic: self.vector(m, t), memory_type="conversation")
            self.chat[u] = (self.chat[u] + [turns])[-3:]
            if items:
                adds.append((u, items))
            # questions, after the day's adds
            if ask[u, 0]:
                s = int(picks[u, 0] * len(SLOTS))
                hist = self.slots[u][s]
                if build:
                    qv = _unit(self.anchor(u, s) + self._noise(f"q{d}:{u}:slot", 0.45))
                    queries.append(Query(u, "slot", hist[-1], frozenset(hist[:-1]), qv))
            if ask[u, 1] and self.long[u]:
                j = int(picks[u, 1] * len(self.long[u]))
                mid, topic = self.long[u][j]
                if build:
                    qv = _unit(self.vector(mid, topic) + self._noise(f"q{d}:{u}:long", 0.5))
                    queries.append(Query(u, "pinned" if j == 0 else "long", mid, frozenset(), qv))
            recent = [t for day_turns in self.chat[u] for t in day_turns]
            if ask[u, 2] and recent:
                mid, topic = recent[int(picks[u, 2] * len(recent))]
                if build:
                    qv = _unit(self.vector(mid, topic) + self._noise(f"q{d}:{u}:chat", 0.5))
                    queries.append(Query(u, "chat", mid, frozenset(), qv))
        return adds, queries

    def fingerprint(self) -> str:
        """A digest of the state (ids), to check that a replay reached the same point."""
        h = hashlib.sha256()
        h.update(json.dumps([self.next_day, self.added, self.slots, self.long, self.tasks, self.chat]).encode())
        return h.hexdigest()


def expected_memories(p: Params) -> float:
    """Memories the stream adds over the run, in expectation (what the docs call the year's total)."""
    slots = 4 * p.fact_change + 4 * p.pref_change
    tasks = 2 * p.task_rate  # a task and its end
    return p.users * (4 + len(SLOTS) + p.days * (p.chat_rate + slots + tasks + p.long_rate))


# --------------------------------------------------------------------------- measurement helpers


def rss_bytes() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process, bytes (Linux /proc)."""
    cur = peak = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return cur, peak


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def store_disk(path: Path) -> dict[str, int]:
    """A store directory's bytes by part: the catalog (SQLite: every memory's
    row, hot and warm vectors, the keyword index), hot checkpoints, warm
    shards, cold archives (and the cold index), other."""
    out = {"catalog": 0, "hot": 0, "warm": 0, "cold": 0, "other": 0}
    for entry in path.iterdir():
        name = entry.name
        part = "catalog" if name.startswith("catalog") else name if name in ("hot", "warm", "cold") else "other"
        out[part] += dir_bytes(entry) if entry.is_dir() else entry.stat().st_size
    return out


def percentiles_ms(lat: list[float]) -> tuple[float | None, float | None]:
    if not lat:
        return None, None
    a = np.asarray(lat) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


QUALITY_FIELDS = (
    "queries",
    "live_at5",
    "live_at1",
    "slot_drift_queries",
    "stale_at1",
    "long_queries",
    "long_at5",
    "guess_or_chatter_at1",
)


def quality(c: dict[str, Any]) -> dict[str, float | None]:
    def ratio(a: int, b: int) -> float | None:
        return a / b if b else None

    return {
        "live_recall_at_5": ratio(c["live_at5"], c["queries"]),
        "stale_hit_at_1": ratio(c["stale_at1"], c["slot_drift_queries"]),
        "long_lived_recall_at_5": ratio(c["long_at5"], c["long_queries"]),
        "live_at_1": ratio(c["live_at1"], c["queries"]),
        **{f"{k}_recall_at_5": ratio(v[1], v[0]) for k, v in sorted(c["by_kind"].items())},
    }


def sample_days(p: Params) -> set[int]:
    """Days (1-based: "day 30" is after 30 simulated days) that get a sample."""
    days = {d for d in range(p.sample_every, p.days + 1, p.sample_every)}
    return days | {d for d in CHECKPOINT_DAYS if d <= p.days} | {p.days}


# --------------------------------------------------------------------------- the two systems


class CountingStore:
    """The cold tier's object store for this benchmark: a local directory
    (:class:`LocalObjectStore`) whose requests are counted as S3 would bill
    them (PUT, GET, LIST, HEAD, DELETE), for the cost model.

    BENCHMARK WORKAROUND, not a library change: the local store fsyncs every
    object and its directory (two fsyncs per archive object, ~5 ms each on this
    shared disk: 1 000 users archive ~1 000 objects a night). A platform keeps
    its cold tier in S3, where durability is the service's; so fsync is
    switched off in this process (``_local``'s ``os.fsync`` and ``_fsync_dir``),
    as ``benchmarks/sweep_scaling.py`` uses an in-memory store for the same
    reason. The catalog (SQLite) keeps its default durability."""

    def __init__(self, root: Path) -> None:
        import types

        from tierstore.storage.objectstore import LocalObjectStore, _local

        shim = types.ModuleType("os_without_fsync")
        shim.__dict__.update(os.__dict__)
        shim.fsync = lambda fd: None  # type: ignore[attr-defined]
        _local.os = shim  # type: ignore[attr-defined]
        _local._fsync_dir = lambda directory: None  # type: ignore[assignment]
        self.inner = LocalObjectStore(root)
        # A cold search reads a local directory on its own thread (threads only overlap an object store's
        # latency): the wrapper says so as the inner store does, or every cold search would start threads.
        self.serial_reads = self.inner.serial_reads
        self.requests = {"PUT": 0, "GET": 0, "LIST": 0, "HEAD": 0, "DELETE": 0}
        self.bytes_put = 0
        self.bytes_got = 0

    def put(self, key: str, data: bytes) -> None:
        self.requests["PUT"] += 1
        self.bytes_put += len(data)
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.requests["PUT"] += 1
        self.bytes_put += len(data)
        return self.inner.put_if_absent(key, data)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self.requests["GET"] += 1
        data = self.inner.get(key, start, end)
        self.bytes_got += len(data)
        return data

    def delete(self, key: str) -> bool:
        self.requests["DELETE"] += 1
        return self.inner.delete(key)

    def list(self, prefix: str = "") -> list[str]:
        keys = self.inner.list(prefix)
        self.requests["LIST"] += 1 + len(keys) // 1000  # S3 lists 1 000 keys a request
        return keys

    def exists(self, key: str) -> bool:
        self.requests["HEAD"] += 1
        return self.inner.exists(key)

    def size(self, key: str) -> int:
        self.requests["HEAD"] += 1
        return self.inner.size(key)

    def close_open_files(self) -> None:
        self.inner.close_open_files()

    def counts(self) -> dict[str, int]:
        return {**self.requests, "bytes_put": self.bytes_put, "bytes_got": self.bytes_got}


class TierstoreSystem:
    name = "tierstore"

    def __init__(self, run: Path, p: Params, resume_at: float | None) -> None:
        from tierstore import ManualClock, TierStore

        self.clock = ManualClock(T0 if resume_at is None else resume_at)
        self.path = run / "tierstore-store"
        self.cold_path = run / "tierstore-cold"  # beside the store: the cold tier is an object store (S3's place)
        self.cold = CountingStore(self.cold_path)
        self.prior_requests: dict[str, int] = {}
        self.store = TierStore.open(self.path, dim=p.dim, clock=self.clock, cold=self.cold)
        self.sweeps = {"examined": 0, "demoted": 0, "archived": 0, "deleted": 0}

    def now(self) -> float:
        return self.clock.now()

    def add(self, t: float, user: int, items: list[dict[str, Any]]) -> None:
        self.clock.set(t)
        ns = f"u{user}"
        for it in items:
            if it.get("supersedes"):  # a task's end: the task may be gone (deleted by a sweep)
                it["supersedes"] = [i for i in it["supersedes"] if self.store.get(ns, i) is not None]
        self.store.add_batch(ns, items)

    def search(self, t: float, user: int, q: np.ndarray) -> tuple[list[str], float, float, float]:
        self.clock.set(t)
        ns = f"u{user}"
        t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
        hits = self.store.search(ns, q, k=5)
        took, cpu, own = time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - h0
        ids = [h.id for h in hits]
        if ids:
            self.store.touch(ns, [ids[0]])  # the agent used the first hit (suite g's agent)
        return ids, took, cpu, own

    def night(self, t: float) -> dict[str, Any]:
        self.clock.set(t)
        row = {"examined": 0, "demoted": 0, "archived": 0, "deleted": 0, "sweeps": 0}
        t0, c0 = time.perf_counter(), time.process_time()
        while True:
            r = self.store.sweep()
            row["sweeps"] += 1
            for k in ("examined", "demoted", "archived", "deleted"):
                row[k] += getattr(r, k)
            if r.remaining_due == 0 or r.examined == 0:
                break
        row["seconds"] = time.perf_counter() - t0
        row["cpu_s"] = time.process_time() - c0  # this process's CPU: the machine is shared, wall time is noisy
        return row

    def held(self) -> tuple[dict[str, int], dict[str, int]]:
        """Memories per tier, and what the store holds in memory by part
        (``Stats.memory_bytes``, bytes): one ``stats()``, which counts every row."""
        st = self.store.stats(lifecycle=False)
        return {k: int(st.by_tier.get(k, 0)) for k in ("hot", "warm", "cold")}, dict(st.memory_bytes)

    def disk(self) -> dict[str, int]:
        self.store.flush()
        out = store_disk(self.path)
        out["cold"] += dir_bytes(self.cold_path)
        return out

    def requests(self) -> dict[str, int]:
        """Object-store requests and bytes since the run began (across resumes)."""
        now = self.cold.counts()
        return {k: now[k] + self.prior_requests.get(k, 0) for k in now}

    def stop(self) -> dict[str, Any]:
        self.store.close()
        return {}

    def close(self) -> None:
        self.store.close()


class BaselineSystem:
    """Keep everything: one hnswlib index per namespace, plain similarity."""

    name = "baseline"
    M, EF_CONSTRUCTION, EF = 16, 200, 64

    def __init__(self, run: Path, p: Params, resume_at: float | None) -> None:
        self.dir = run / "baseline-store"
        self.dir.mkdir(exist_ok=True)
        self.p = p
        self.t = T0 if resume_at is None else resume_at
        self.index: dict[int, Any] = {}
        self.ids: dict[int, list[str]] = {}
        self.content = open(self.dir / "content.log", "a", encoding="utf-8")
        if resume_at is not None:
            self._load()

    def _new(self, capacity: int) -> Any:
        import hnswlib

        idx = hnswlib.Index(space="cosine", dim=self.p.dim)
        idx.init_index(max_elements=capacity, M=self.M, ef_construction=self.EF_CONSTRUCTION)
        idx.set_ef(self.EF)
        return idx

    def now(self) -> float:
        return self.t

    def add(self, t: float, user: int, items: list[dict[str, Any]]) -> None:
        self.t = t
        idx = self.index.get(user)
        names = self.ids.setdefault(user, [])
        if idx is None:
            idx = self.index[user] = self._new(max(64, 2 * len(items)))
        n0 = len(names)
        if n0 + len(items) > idx.get_max_elements():
            idx.resize_index(max(2 * idx.get_max_elements(), n0 + len(items)))
        vecs = np.stack([it["embedding"] for it in items])
        idx.add_items(vecs, np.arange(n0, n0 + len(items)), num_threads=1)
        names.extend(it["id"] for it in items)
        self.content.write("".join(f"{it['id']}\t{it['content']}\n" for it in items))

    def search(self, t: float, user: int, q: np.ndarray) -> tuple[list[str], float, float, float]:
        self.t = t
        idx = self.index.get(user)
        if idx is None:
            return [], 0.0, 0.0, 0.0
        names = self.ids[user]
        t0, c0, h0 = time.perf_counter(), time.process_time(), time.thread_time()
        labels, _ = idx.knn_query(q, k=min(5, len(names)), num_threads=1)
        took, cpu, own = time.perf_counter() - t0, time.process_time() - c0, time.thread_time() - h0
        return [names[int(i)] for i in labels[0]], took, cpu, own

    def night(self, t: float) -> dict[str, Any]:
        self.t = t
        return {"examined": 0, "demoted": 0, "archived": 0, "deleted": 0, "sweeps": 0, "seconds": 0.0, "cpu_s": 0.0}

    def held(self) -> tuple[dict[str, int], dict[str, int]]:
        # no parts: its RSS is its indexes (bytes_per_memory compares them)
        return {"hot": sum(len(v) for v in self.ids.values()), "warm": 0, "cold": 0}, {}

    def requests(self) -> dict[str, int]:
        return {}

    def disk(self) -> dict[str, int]:
        """Contents on disk (the append-only log); the indexes live in memory:
        their serialised size (what ``save_index`` writes) is counted as
        ``index`` — hnswlib's format is a fixed size per element and level."""
        self.content.flush()
        index = 0
        for idx in self.index.values():
            n = idx.get_current_count()
            # level 0: vector + links (2M) + count + label; upper levels (1/M of the elements, geometric)
            per = self.p.dim * 4 + (2 * self.M) * 4 + 4 + 8
            index += 100 + n * per + int(n / (self.M - 1)) * (self.M * 4 + 4) + n * 4
        return {"content": (self.dir / "content.log").stat().st_size, "index": index}

    def stop(self) -> dict[str, Any]:
        estimate = self.disk()["index"]
        self.content.close()
        for u, idx in self.index.items():
            idx.save_index(str(self.dir / f"u{u}.hnsw"))
        (self.dir / "ids.json").write_text(json.dumps({str(u): v for u, v in self.ids.items()}))
        return {"index_estimate": estimate}

    def close(self) -> None:
        self.content.close()

    def _load(self) -> None:
        import hnswlib

        ids = json.loads((self.dir / "ids.json").read_text())
        for u_s, names in ids.items():
            u = int(u_s)
            idx = hnswlib.Index(space="cosine", dim=self.p.dim)
            idx.load_index(str(self.dir / f"u{u}.hnsw"), max_elements=max(64, 2 * len(names)))
            idx.set_ef(self.EF)
            self.index[u] = idx
            self.ids[u] = names


# --------------------------------------------------------------------------- a child: one system's year


class Child:
    """Runs one system over the year in this process; writes
    ``<system>/samples.jsonl``, ``nights.jsonl``, ``state.json``."""

    def __init__(self, run: Path, system: str, stop_after: int | None) -> None:
        self.run = run
        self.system = system
        self.dir = run / system
        self.dir.mkdir(exist_ok=True)
        self.p = Params(**json.loads((run / "params.json").read_text())).validate()
        self.stop_after = stop_after
        self.stop_requested = False

    def state_path(self) -> Path:
        return self.dir / "state.json"

    def read_state(self) -> dict[str, Any] | None:
        path = self.state_path()
        return json.loads(path.read_text()) if path.exists() else None

    def write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path())

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = True

    def main(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        p = self.p
        state = self.read_state()
        if state is not None and state.get("finished"):
            return 0
        if state is not None and not state.get("clean"):
            print(cannot_resume(self.system, state), file=sys.stderr)
            return EXIT_REFUSED
        stream = Stream(p)
        start = 0
        elapsed0 = 0.0
        if state is not None:  # a clean stop: replay the stream's state up to where it stopped
            start = state["day_done"]
            for d in range(start):
                stream.day(d, build=False)
            if stream.fingerprint() != state["stream_fingerprint"]:
                print(
                    f"{self.system}: the stream replayed to day {start} differs from the one the run "
                    "saved (another version of this script?); this run cannot be resumed",
                    file=sys.stderr,
                )
                return EXIT_REFUSED
            elapsed0 = state["elapsed_s"]
        sys_ = (TierstoreSystem if self.system == "tierstore" else BaselineSystem)(
            self.run, p, None if state is None else state["now"]
        )
        if state is not None and isinstance(sys_, TierstoreSystem):
            sys_.prior_requests = state.get("requests", {})
        self.write_state({**(state or {}), "clean": False, "pid": os.getpid(), "day_done": start})
        samples = open(self.dir / "samples.jsonl", "a")
        nights = open(self.dir / "nights.jsonl", "a")
        qlog = open(self.dir / "queries.jsonl", "a")
        due = sample_days(p)
        t_start = time.perf_counter()
        digest_parts = state["digest_parts"] if state is not None else []
        d = start
        try:
            for d in range(start, p.days):
                adds, queries = stream.day(d)
                h = hashlib.sha256()
                for i, (u, items) in enumerate(adds):
                    for it in items:
                        h.update(it["id"].encode())
                        h.update(np.ascontiguousarray(it["embedding"], dtype=np.float32).tobytes())
                    sys_.add(T0 + d * DAY + 8 * HOUR + 6 * HOUR * i / max(1, len(adds)), u, items)
                digest_parts.append(h.hexdigest())
                for i, q in enumerate(queries):
                    ids, took, cpu, own = sys_.search(
                        T0 + d * DAY + 15 * HOUR + 6 * HOUR * i / max(1, len(queries)), q.user, q.vector
                    )
                    qlog.write(json.dumps([d + 1, q.kind, q.live, sorted(q.stale), ids, took, cpu, own]) + "\n")
                night = sys_.night(T0 + (d + 1) * DAY)
                night.update(day=d + 1, memories=stream.added)
                nights.write(json.dumps(night) + "\n")
                if d + 1 in due:
                    rss, peak = rss_bytes()
                    tiers, memory = sys_.held()
                    row = {
                        "day": d + 1,
                        "memories_added": stream.added,
                        "tiers": tiers,
                        "rss_bytes": rss,
                        "rss_peak_bytes": peak,
                        "memory_bytes": memory,
                        "disk": sys_.disk(),
                        "requests": sys_.requests(),
                        "sweep_s": night["seconds"],
                        "sweep_examined": night["examined"],
                        "elapsed_s": elapsed0 + time.perf_counter() - t_start,
                    }
                    samples.write(json.dumps(row) + "\n")
                    samples.flush()
                nights.flush()
                qlog.flush()
                tmp = self.dir / "progress.tmp"
                tmp.write_text(f"{d + 1} {p.days}")
                os.replace(tmp, self.dir / "progress")  # whole: the orchestrator reads it meanwhile
                if self.stop_requested or (self.stop_after is not None and d + 1 >= self.stop_after and d + 1 < p.days):
                    d += 1
                    break
            else:
                d = p.days
        finally:
            samples.close()
            nights.close()
            qlog.close()
        finished = d >= p.days
        stop_info: dict[str, Any] = {}
        if finished:
            sys_.close()
        else:
            stop_info = sys_.stop()
        final_digest = _digest_resume(digest_parts).hexdigest()
        self.write_state(
            {
                "version": STATE_VERSION,
                "clean": True,
                "finished": finished,
                "day_done": d,
                "now": sys_.now(),
                "stream_fingerprint": stream.fingerprint(),
                "digest_parts": digest_parts,
                "digest": final_digest,
                "memories_added": stream.added,
                "by_kind": stream.by_kind,
                "elapsed_s": elapsed0 + time.perf_counter() - t_start,
                "stop_info": stop_info,
                "requests": sys_.requests(),
            }
        )
        return 0 if finished else EXIT_STOPPED


def _digest_resume(parts: list[str]) -> Any:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
    return h


def cannot_resume(system: str, state: dict[str, Any]) -> str:
    return (
        f"{system}: this run was not stopped cleanly (the process {state.get('pid')} was killed or crashed "
        f"during day {state.get('day_done', 0) + 1}): its store holds part of a day the stream cannot replay, "
        "so the run cannot be resumed. Start a new run (another --out)."
    )


# --------------------------------------------------------------------------- the orchestrator


def spawn(run: Path, system: str, stop_after: int | None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", system, "--out", str(run)]
    if stop_after is not None:
        cmd += ["--stop-after-day", str(stop_after)]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    log = open(run / system / "child.log", "ab")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def orchestrate(run: Path, p: Params, sequential: bool, stop_after: int | None, progress: bool) -> int:
    from tierstore.progress import Progress

    for s in SYSTEMS:
        (run / s).mkdir(exist_ok=True)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    stopping = {"flag": False}

    def forward(signum: int, frame: Any) -> None:
        stopping["flag"] = True
        for pr in procs.values():
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    codes: dict[str, int] = {}
    seen: dict[str, int] = {}  # the day each system last reported
    try:
        order = [[s] for s in SYSTEMS] if sequential else [list(SYSTEMS)]
        with Progress(p.days * len(SYSTEMS), "platform year", enabled=progress, unit=" system-days") as bar:
            for group in order:
                if stopping["flag"]:
                    break
                for s in group:
                    procs[s] = spawn(run, s, stop_after)
                while any(procs[s].poll() is None for s in group):
                    time.sleep(1.0)
                    done = 0
                    note = []
                    for s in SYSTEMS:
                        f = run / s / "progress"
                        try:
                            day = int(f.read_text().split()[0])
                        except (OSError, IndexError, ValueError):  # not written yet
                            day = seen.get(s, 0)
                        seen[s] = day
                        done += day
                        note.append(f"{s} d{day}")
                    bar.update(done - bar.done, note=" ".join(note))
                for s in group:
                    codes[s] = procs[s].returncode
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if any(c == EXIT_REFUSED for c in codes.values()):
        for s in SYSTEMS:
            tail = (run / s / "child.log").read_text(errors="replace").strip().splitlines()[-1:]
            if codes.get(s) == EXIT_REFUSED:
                print(f"error: {tail[0] if tail else s + ' refused'}", file=sys.stderr)
        return EXIT_REFUSED
    bad = {s: c for s, c in codes.items() if c not in (0, EXIT_STOPPED)}
    if bad:
        for s in bad:
            print(f"error: the {s} process failed (exit {bad[s]}); its log: {run / s / 'child.log'}", file=sys.stderr)
        return 1
    if stopping["flag"] or any(c == EXIT_STOPPED for c in codes.values()) or len(codes) < len(SYSTEMS):
        days = {
            s: (json.loads((run / s / "state.json").read_text())["day_done"])
            for s in SYSTEMS
            if (run / s / "state.json").exists()
        }
        print(f"stopped cleanly ({', '.join(f'{s} at day {d}' for s, d in days.items())}); resume: --resume {run}")
        return EXIT_STOPPED
    return 0


# --------------------------------------------------------------------------- the report


def load_rows(run: Path, system: str) -> list[dict[str, Any]]:
    path = run / system / "samples.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def load_nights(run: Path, system: str) -> list[dict[str, Any]]:
    path = run / system / "nights.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def load_queries(run: Path, system: str) -> list[list[Any]]:
    """The query log per question: [day (1-based), kind, live id, stale ids, ranked ids, seconds, the
    process's CPU seconds, the searching thread's CPU seconds] (older runs' logs lack the CPU columns)."""
    path = run / system / "queries.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def score(log: list[list[Any]]) -> dict[str, Any]:
    """Suite g's counts (:class:`tierstore.bench.forgetting.Score`) over some
    questions, and per kind [questions, right among 5, right first]."""
    from tierstore.bench.forgetting import Score

    sc = Score("period")
    by_kind: dict[str, list[int]] = {}
    for _, kind, live, stale, ids, *_ in log:
        sc.record(Query(0, kind, live, frozenset(stale), np.zeros(0)), ids)  # type: ignore[arg-type]
        k = by_kind.setdefault(kind, [0, 0, 0])
        k[0] += 1
        k[1] += live in ids[:5]
        k[2] += bool(ids) and ids[0] == live
    return {**{f: getattr(sc, f) for f in QUALITY_FIELDS}, "by_kind": by_kind}


def attach_queries(rows: list[dict[str, Any]], log: list[list[Any]]) -> None:
    """Give each sample the quality and latency of the questions since the previous sample."""
    prev = 0
    for r in rows:
        part = [q for q in log if prev < q[0] <= r["day"]]
        r["counts"] = score(part)
        r["quality"] = quality(r["counts"])
        r["search_p50_ms"], r["search_p99_ms"] = percentiles_ms([q[5] for q in part])
        r["search_cpu_p50_ms"], r["search_cpu_p99_ms"] = percentiles_ms([q[6] for q in part if len(q) > 6])
        r["queries"] = len(part)
        prev = r["day"]


def build_report(run: Path) -> dict[str, Any]:
    p = Params(**json.loads((run / "params.json").read_text()))
    states = {s: json.loads((run / s / "state.json").read_text()) for s in SYSTEMS if (run / s / "state.json").exists()}
    rows = {s: load_rows(run, s) for s in SYSTEMS}
    nights = {s: load_nights(run, s) for s in SYSTEMS}
    logs = {s: load_queries(run, s) for s in SYSTEMS}
    for s in SYSTEMS:
        attach_queries(rows[s], logs[s])
    for s, st in list(states.items()):
        if not st.get("clean"):  # still running (or killed): what its samples show, no digest
            states[s] = {"day_done": rows[s][-1]["day"] if rows[s] else 0, "running": True}
    last = min((st["day_done"] for st in states.values()), default=0)
    # the same memories, day by day, over the days both systems did (a SHA-256 per day of ids and vectors)
    parts = [tuple(st["digest_parts"][:last]) for st in states.values() if "digest_parts" in st]
    report: dict[str, Any] = {
        "params": asdict(p),
        "days_done": {s: st["day_done"] for s, st in states.items()},
        "running": [s for s, st in states.items() if st.get("running")],
        "finished": all(st.get("finished") for st in states.values()) and len(states) == len(SYSTEMS),
        "same_stream": len(parts) == len(SYSTEMS) and len(set(parts)) == 1 if len(parts) == len(SYSTEMS) else None,
        "same_stream_days": last,
        "digest": {s: st.get("digest") for s, st in states.items()},
        "memories_added": {s: st.get("memories_added") for s, st in states.items()},
        "by_kind": {s: st.get("by_kind") for s, st in states.items()},
        "elapsed_s": {s: st.get("elapsed_s") for s, st in states.items()},
        "rows": rows,
        "quality_total": {s: quality(score([q for q in logs[s] if q[0] <= last])) for s in SYSTEMS},
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
    }
    # first and last 30 simulated days (of the days both systems did)
    lat: dict[str, Any] = {}
    for s in SYSTEMS:
        day = np.array([q[0] for q in logs[s]], dtype=int)
        lat[s] = {}
        for col, name in ((5, ""), (6, "cpu_"), (7, "thread_")):
            secs = np.array([q[col] if len(q) > col else np.nan for q in logs[s]], dtype=float)
            first = secs[day <= min(30, last)] * 1e3
            final = secs[(day > max(0, last - 30)) & (day <= last)] * 1e3
            for label, part in (("first_month", first), ("last_month", final)):
                ok = part[~np.isnan(part)]
                for pct in (50, 99):
                    lat[s][f"{label}_{name}p{pct}_ms"] = float(np.percentile(ok, pct)) if ok.size else None
                lat[s][f"{label}_queries"] = int(part.size)
    report["latency"] = lat
    ts = [n for n in nights["tierstore"] if n["examined"] > 0 and n["day"] <= last]
    if ts:

        def per_item(ns: list[dict[str, Any]], key: str) -> float | None:
            ns = [n for n in ns if n["examined"] >= 100 and key in n]
            return float(np.median([n[key] / n["examined"] for n in ns]) * 1e6) if ns else None

        first = [n for n in ts if n["day"] <= 30]
        final = [n for n in ts if n["day"] > last - 30]
        ex = np.array([n["examined"] for n in ts], dtype=float)
        size = np.array([n["memories"] for n in ts], dtype=float)
        report["sweep"] = {"nights": len(ts)}
        for key in ("seconds", "cpu_s"):
            if not all(key in n for n in ts):
                continue
            sec = np.array([n[key] for n in ts])
            # the night's time against what was due and against the store's size
            fit = (
                np.linalg.lstsq(np.stack([ex, size, np.ones_like(ex)], 1), sec, rcond=None)[0] if len(ts) > 3 else None
            )
            report["sweep"][key] = {
                "first_month_us_per_examined": per_item(first, key),
                "last_month_us_per_examined": per_item(final, key),
                "corr_examined": float(np.corrcoef(ex, sec)[0, 1]) if len(ts) > 2 else None,
                "corr_store_size": float(np.corrcoef(size, sec)[0, 1]) if len(ts) > 2 else None,
                "fit_us_per_examined": float(fit[0] * 1e6) if fit is not None else None,
                "fit_us_per_million_stored": float(fit[1] * 1e6 * 1e6) if fit is not None else None,
                "fit_intercept_s": float(fit[2]) if fit is not None else None,
                "total_s": float(sec.sum()),
                "max_s": float(sec.max()),
            }
    report["targets"] = targets(report, rows)
    report["cost_per_1000_users_month"] = cost_model(report)
    return report


def targets(report: dict[str, Any], rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    common = sorted({r["day"] for r in rows["tierstore"]} & {r["day"] for r in rows["baseline"]})
    if common:
        d = common[-1]
        t = next(r for r in rows["tierstore"] if r["day"] == d)
        b = next(r for r in rows["baseline"] if r["day"] == d)
        out["rss_ratio"] = {"day": d, "value": t["rss_bytes"] / b["rss_bytes"], "target": "<= 0.10"}
        out["rss_ratio"]["met"] = out["rss_ratio"]["value"] <= 0.10
        # stricter: the baseline without hnswlib's fixed cost per index (its label locks), as a leaner
        # keep-everything (one index per user without them, or exact numpy per user) would be
        lean = b["rss_bytes"] - HNSW_INDEX_FIXED_BYTES * report["params"]["users"]
        out["rss_ratio_vs_lean_baseline"] = {
            "day": d,
            "value": t["rss_bytes"] / lean if lean > 0 else None,
            "baseline_lean_bytes": lean,
            "target": "<= 0.10",
            "met": lean > 0 and t["rss_bytes"] / lean <= 0.10,
        }
    lt, lb = report["latency"]["tierstore"], report["latency"]["baseline"]
    for name, suffix in (("", ""), ("cpu_", "_cpu"), ("thread_", "_thread_cpu")):
        a0, a1 = lt.get(f"first_month_{name}p99_ms"), lt.get(f"last_month_{name}p99_ms")
        b0, b1 = lb.get(f"first_month_{name}p99_ms"), lb.get(f"last_month_{name}p99_ms")
        if a0 and a1:
            out[f"p99_growth{suffix}"] = {
                "value": a1 / a0,
                "baseline": b1 / b0 if b0 and b1 else None,
                "target": "<= 1.2 (baseline grows)",
                "met": a1 / a0 <= 1.2,
            }
    for key in ("seconds", "cpu_s"):
        sw = (report.get("sweep") or {}).get(key)
        if sw and sw["first_month_us_per_examined"] and sw["last_month_us_per_examined"]:
            v = sw["last_month_us_per_examined"] / sw["first_month_us_per_examined"]
            out[f"sweep_per_due_{key}"] = {
                "value": v,
                "target": "cost per due memory, last month / first month <= 1.2",
                "met": v <= 1.2,
            }
    qt, qb = report["quality_total"]["tierstore"], report["quality_total"]["baseline"]

    def ge(key: str) -> dict[str, Any]:
        a, b = qt.get(key), qb.get(key)
        return {"tierstore": a, "baseline": b, "met": a is not None and b is not None and a >= b}

    out["live_recall_at_5"] = ge("live_recall_at_5")
    out["long_lived_recall_at_5"] = ge("long_lived_recall_at_5")
    a, b = qt.get("stale_hit_at_1"), qb.get("stale_hit_at_1")
    out["stale_hit_at_1"] = {"tierstore": a, "baseline": b, "met": a is not None and b is not None and a < b}
    return out


# What an empty hnswlib index costs in RSS whatever it holds, measured on this machine (hnswlib 0.8, dim 384,
# 200 indexes): 2.51 MiB, its 65 536 label-operation mutexes. The baseline has one per user.
HNSW_INDEX_FIXED_BYTES = int(2.51 * 2**20)

# Public list prices (USD, AWS us-east-1, on-demand; read December 2026 from the providers' price pages — check
# them before relying on the figures): RAM priced through a memory-optimised instance, r7g.large (2 vCPU,
# 16 GiB) at $0.1071 an hour; local disk as EBS gp3; the cold tier as S3 Standard.
PRICES = {
    "ram_gib_month": 0.1071 * 730 / 16,
    "ebs_gb_month": 0.08,
    "s3_gb_month": 0.023,
    "s3_put_per_1000": 0.005,  # PUT, COPY, POST, LIST
    "s3_get_per_1000": 0.0004,  # GET, SELECT, HEAD
}


def cost_model(report: dict[str, Any]) -> dict[str, Any]:
    """Per 1 000 users per month, from the last sample of each system: RAM
    (RSS), disk (EBS: tierstore's catalog, hot and warm; the baseline's
    index and contents), S3 (tierstore's cold tier: its bytes, and the
    requests of the last 30 simulated days, as counted), at :data:`PRICES`."""
    rows = report["rows"]
    users = report["params"]["users"]
    scale = 1000 / users
    out: dict[str, Any] = {"prices": PRICES}
    for s in SYSTEMS:
        if not rows[s]:
            continue
        last = rows[s][-1]
        disk = last["disk"]
        ram_gib = last["rss_bytes"] / 2**30 * scale
        local_gb = (sum(disk.values()) - disk.get("cold", 0)) / 1e9 * scale
        s3_gb = disk.get("cold", 0) / 1e9 * scale
        req = {"PUT": 0, "GET": 0, "LIST": 0, "HEAD": 0}
        month = [r for r in rows[s] if r["day"] <= last["day"] - 28]
        if last.get("requests") and month:
            before = month[-1]
            span = last["day"] - before["day"]
            for k in req:
                req[k] = (last["requests"].get(k, 0) - before["requests"].get(k, 0)) * 30 / span * scale
        ram = ram_gib * PRICES["ram_gib_month"]
        ebs = local_gb * PRICES["ebs_gb_month"]
        s3 = s3_gb * PRICES["s3_gb_month"]
        puts = (req["PUT"] + req["LIST"]) / 1000 * PRICES["s3_put_per_1000"]
        gets = (req["GET"] + req["HEAD"]) / 1000 * PRICES["s3_get_per_1000"]
        out[s] = {
            "day": last["day"],
            "ram_gib": ram_gib,
            "local_disk_gb": local_gb,
            "s3_gb": s3_gb,
            "s3_requests_month": req,
            "usd_month": {
                "ram": ram,
                "disk": ebs,
                "s3_storage": s3,
                "s3_put_list": puts,
                "s3_get_head": gets,
                "total": ram + ebs + s3 + puts + gets,
            },
        }
    return out


def table(report: dict[str, Any]) -> str:
    """The Markdown table at the checkpoint days (and the last sampled day)."""
    rows = report["rows"]
    days = sorted({r["day"] for r in rows["tierstore"]} & {r["day"] for r in rows["baseline"]})
    pick = [d for d in days if d in CHECKPOINT_DAYS] or days[-1:]
    if days and days[-1] not in pick:
        pick.append(days[-1])
    head = (
        "| day | system | memories added | hot / warm / cold | RSS MiB | disk MiB | search p50 / p99 ms "
        "| night's sweep s (examined) | live@5 | stale@1 | long-lived@5 |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for d in pick:
        for s in SYSTEMS:
            r = next(x for x in rows[s] if x["day"] == d)
            q = r["quality"]
            t = r["tiers"]

            def f(v: float | None, fmt: str = "{:.3f}") -> str:
                return "–" if v is None else fmt.format(v)

            lines.append(
                f"| {d} | {s} | {r['memories_added']:,} | {t['hot']:,} / {t['warm']:,} / {t['cold']:,} "
                f"| {r['rss_bytes'] / 2**20:,.0f} | {sum(r['disk'].values()) / 2**20:,.0f} "
                f"| {f(r['search_p50_ms'], '{:.2f}')} / {f(r['search_p99_ms'], '{:.2f}')} "
                f"| {r['sweep_s']:.2f} ({r['sweep_examined']:,}) | {f(q['live_recall_at_5'])} "
                f"| {f(q['stale_hit_at_1'])} | {f(q['long_lived_recall_at_5'])} |"
            )
    return head + "\n".join(lines)


def bytes_per_memory(report: dict[str, Any]) -> str:
    """Markdown: bytes per memory by tier at the last common sample."""
    rows = report["rows"]
    days = sorted({r["day"] for r in rows["tierstore"]} & {r["day"] for r in rows["baseline"]})
    if not days:
        return ""
    t = next(r for r in rows["tierstore"] if r["day"] == days[-1])
    b = next(r for r in rows["baseline"] if r["day"] == days[-1])
    tt, td = t["tiers"], t["disk"]
    held = sum(tt.values())

    def per(n: float, d: int) -> str:
        return f"{n / d:,.0f}" if d else "–"

    lines = [
        f"At day {days[-1]} ({held:,} memories held by tierstore of {t['memories_added']:,} added; "
        f"{b['tiers']['hot']:,} by the baseline):",
        "",
        "| | bytes | memories | bytes per memory |",
        "|---|---|---|---|",
        f"| tierstore process RSS | {t['rss_bytes']:,} | {held:,} held | {per(t['rss_bytes'], held)} |",
        f"| tierstore catalog (SQLite: every memory's row; hot and warm vectors) | {td['catalog']:,} | {held:,} "
        f"| {per(td['catalog'], held)} |",
        f"| tierstore hot checkpoints | {td['hot']:,} | {tt['hot']:,} hot | {per(td['hot'], tt['hot'])} |",
        f"| tierstore warm shards | {td['warm']:,} | {tt['warm']:,} warm | {per(td['warm'], tt['warm'])} |",
        f"| tierstore cold archives (object store) | {td['cold']:,} | {tt['cold']:,} cold "
        f"| {per(td['cold'], tt['cold'])} |",
        f"| baseline process RSS | {b['rss_bytes']:,} | {b['tiers']['hot']:,} "
        f"| {per(b['rss_bytes'], b['tiers']['hot'])} |",
        f"| baseline RSS less hnswlib's fixed 2.51 MiB per index | "
        f"{b['rss_bytes'] - HNSW_INDEX_FIXED_BYTES * report['params']['users']:,} | {b['tiers']['hot']:,} "
        f"| {per(b['rss_bytes'] - HNSW_INDEX_FIXED_BYTES * report['params']['users'], b['tiers']['hot'])} |",
        f"| baseline indexes (saved size) | {b['disk']['index']:,} | {b['tiers']['hot']:,} "
        f"| {per(b['disk']['index'], b['tiers']['hot'])} |",
        f"| baseline contents (disk) | {b['disk']['content']:,} | {b['tiers']['hot']:,} "
        f"| {per(b['disk']['content'], b['tiers']['hot'])} |",
    ]
    return "\n".join(lines)


def memory_table(report: dict[str, Any]) -> str:
    """Markdown: tierstore's RSS at the checkpoint days (and the last sample) beside what its store says it
    holds by part (``Stats.memory_bytes``); the rest is the interpreter, the libraries, SQLite's page caches
    and the allocator's slack. Empty for runs that predate the count."""
    rows = [r for r in report["rows"]["tierstore"] if r.get("memory_bytes")]
    pick = [r for r in rows if r["day"] in CHECKPOINT_DAYS]
    if rows and rows[-1] not in pick:
        pick.append(rows[-1])
    if not pick:
        return ""
    parts = ("hot", "warm_cache", "cold_codes", "vector_cache")
    mib = 2**20
    lines = [
        "| day | tierstore RSS MiB | " + " | ".join(f"{p} MiB" for p in parts) + " | the rest MiB |",
        "|---" * (len(parts) + 3) + "|",
    ]
    for r in pick:
        m = r["memory_bytes"]
        rest = r["rss_bytes"] - sum(m.get(p, 0) for p in parts)
        cells = " | ".join(f"{m.get(p, 0) / mib:,.1f}" for p in parts)
        lines.append(f"| {r['day']} | {r['rss_bytes'] / mib:,.0f} | {cells} | {rest / mib:,.0f} |")
    return "\n".join(lines)


def summary(report: dict[str, Any]) -> str:
    p = report["params"]
    out = [
        f"{p['users']} users x {p['days']} days (done: {report['days_done']}), dim {p['dim']}, seed {p['seed']}; "
        f"memories added {report['memories_added']}; same stream: {report['same_stream']}",
        table(report),
        bytes_per_memory(report),
        memory_table(report),
        "whole run quality: "
        + "; ".join(
            f"{s}: " + ", ".join(f"{k} {v:.3f}" for k, v in q.items() if v is not None)
            for s, q in report["quality_total"].items()
        ),
        "latency: " + json.dumps(report["latency"]),
        "sweep: " + json.dumps(report.get("sweep")),
        "targets: " + json.dumps(report["targets"]),
        "cost per 1 000 users per month: " + json.dumps(report["cost_per_1000_users_month"]),
        f"elapsed (process seconds of simulated work): {report['elapsed_s']}",
    ]
    return "\n\n".join(out)


def plots(report: dict[str, Any], run: Path, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    rows = report["rows"]
    p = report["params"]
    title = f"{p['users']:,} users, {max(report['days_done'].values())} simulated days, dim {p['dim']}"
    colors = {"tierstore": "tab:blue", "baseline": "tab:red"}
    label = {"tierstore": "tierstore (default policy)", "baseline": "keep everything (hnswlib per user)"}
    made = []

    def days(s: str) -> list[int]:
        return [r["day"] for r in rows[s]]

    def save(fig: Any, name: str, bottom: float = 0.0) -> None:
        fig.suptitle(title, fontsize=9, y=0.995)
        fig.tight_layout(rect=(0, bottom, 1, 1))
        path = out / f"scale_{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)

    # RSS and memories held
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for s in SYSTEMS:
        ax[0].plot(days(s), [r["rss_bytes"] / 2**20 for r in rows[s]], "o-", ms=3, color=colors[s], label=label[s])
    ax[0].set(xlabel="simulated day", ylabel="process RSS (MiB)", title="Resident memory")
    ax[0].legend(fontsize=8)
    ax[0].grid(alpha=0.3)
    t = rows["tierstore"]
    d = days("tierstore")
    for tier, color, name in (
        ("hot", "tab:blue", "tierstore hot (in RAM)"),
        ("warm", "tab:cyan", "tierstore warm (disk shards)"),
        ("cold", "gray", "tierstore cold (archives)"),
    ):
        ax[1].plot(d, [max(1, r["tiers"][tier]) for r in t], "o-", ms=2, color=color, label=name)
    ax[1].plot(
        days("baseline"),
        [r["tiers"]["hot"] for r in rows["baseline"]],
        "--",
        color="tab:red",
        label=label["baseline"] + ", all in RAM",
    )
    ax[1].set(xlabel="simulated day", ylabel="memories (log scale)", title="Memories held, by tier")
    ax[1].set_yscale("log")
    ax[1].legend(fontsize=8, loc="center right")
    ax[1].grid(alpha=0.3, which="both")
    save(fig, "memory")

    # search latency: wall (what a caller waits, on a shared machine) and the process's CPU
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    for i, (key, what) in enumerate((("search", "wall time"), ("search_cpu", "CPU time of the process"))):
        for s in SYSTEMS:
            pts = [(r["day"], r.get(f"{key}_p50_ms"), r.get(f"{key}_p99_ms")) for r in rows[s]]
            pts = [x for x in pts if x[1] is not None]
            if not pts:
                continue
            ax[i].plot([x[0] for x in pts], [x[1] for x in pts], "o-", ms=3, color=colors[s], label=f"{label[s]}: p50")
            ax[i].plot(
                [x[0] for x in pts],
                [x[2] for x in pts],
                "s--",
                ms=3,
                color=colors[s],
                alpha=0.6,
                label=f"{label[s]}: p99",
            )
        ax[i].set(xlabel="simulated day", title=f"Search latency per query, {what}")
        ax[i].set_yscale("log")
        ax[i].grid(alpha=0.3, which="both")
    ax[0].set_ylabel("ms per search (log scale)")
    handles, labels = ax[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    save(fig, "latency", bottom=0.08)

    # sweeps
    nights = load_nights(run, "tierstore")
    if nights:
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        nd = [n["day"] for n in nights]
        ax[0].plot(nd, [n["seconds"] for n in nights], lw=0.8, color="tab:blue", label="night's sweep, wall (s)")
        if all("cpu_s" in n for n in nights):
            ax[0].plot(nd, [n["cpu_s"] for n in nights], lw=0.8, color="tab:green", label="night's sweep, CPU (s)")
        ax[0].set(xlabel="simulated day", ylabel="sweep time per night (s)", title="Nightly sweep time")
        a2 = ax[0].twinx()
        a2.plot(
            nd,
            [n["memories"] / 1e6 for n in nights],
            color="gray",
            lw=1,
            ls="--",
            label="memories added so far (millions)",
        )
        a2.set_ylabel("memories added so far (millions)")
        h1, l1 = ax[0].get_legend_handles_labels()
        h2, l2 = a2.get_legend_handles_labels()
        ax[0].legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
        ax[0].grid(alpha=0.3)
        sc = ax[1].scatter([n["examined"] for n in nights], [n["seconds"] for n in nights], c=nd, s=8, cmap="viridis")
        fig.colorbar(sc, ax=ax[1], label="simulated day")
        ax[1].set(
            xlabel="memories due that night (examined)", ylabel="sweep time (s)", title="Sweep time against work due"
        )
        ax[1].grid(alpha=0.3)
        save(fig, "sweep")

    # quality
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    for i, (key, name) in enumerate(
        [
            ("live_recall_at_5", "live recall@5 (higher is better)"),
            ("stale_hit_at_1", "stale-hit@1 (lower is better)"),
            ("long_lived_recall_at_5", "long-lived recall@5 (higher is better)"),
        ]
    ):
        for s in SYSTEMS:  # tierstore's hollow circles stay visible where both lines lie at 1.0
            style: dict[str, Any] = (
                {"marker": "o", "ms": 6, "mfc": "none", "ls": "-"}
                if s == "tierstore"
                else {"marker": "x", "ms": 3, "ls": "--"}
            )
            ax[i].plot(days(s), [r["quality"][key] for r in rows[s]], color=colors[s], label=label[s], **style)
        ax[i].set(xlabel="simulated day", ylabel="share of the period's questions", title=name, ylim=(-0.02, 1.02))
        ax[i].grid(alpha=0.3)
    ax[0].legend(fontsize=8)
    save(fig, "quality")

    # disk
    fig, ax = plt.subplots(figsize=(7, 4))
    parts = ["catalog", "hot", "warm", "cold", "other"]
    ax.stackplot(
        d,
        [[r["disk"].get(k, 0) / 2**20 for r in t] for k in parts],
        labels=[f"tierstore {k}" for k in parts],
        colors=["tab:blue", "tab:orange", "tab:green", "silver", "tab:purple"],
        alpha=0.8,
    )
    b = rows["baseline"]
    ax.plot(
        days("baseline"),
        [b_["disk"]["index"] / 2**20 for b_ in b],
        "--",
        color="tab:red",
        label="keep everything: index (in RAM; its saved size)",
    )
    ax.plot(
        days("baseline"),
        [sum(b_["disk"].values()) / 2**20 for b_ in b],
        ":",
        color="darkred",
        label="keep everything: index + contents",
    )
    ax.set(xlabel="simulated day", ylabel="bytes (MiB)", title="Disk by part")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    save(fig, "disk")
    return made


# --------------------------------------------------------------------------- command line


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="the run's directory (created; must be new or empty)")
    ap.add_argument("--quick", action="store_true", help=f"a smoke-test size: {QUICK}")
    ap.add_argument("--resume", type=Path, metavar="DIR", help="continue the run in DIR (its parameters)")
    ap.add_argument("--render", type=Path, metavar="DIR", help="print the report of the run in DIR and stop")
    ap.add_argument("--plots", type=Path, metavar="DIR", help="write the PNG plots into DIR")
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="run the two systems one after the other (default: side by side, one core each)",
    )
    ap.add_argument("--stop-after-day", type=int, default=None, help=argparse.SUPPRESS)  # tests: a clean stop
    ap.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    for f in fields(Params):
        ap.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        return Child(args.out, args.child, args.stop_after_day).main()
    if args.render:
        report = build_report(args.render)
        (args.render / "report.json").write_text(json.dumps(report, indent=1))
        print(summary(report))
        if args.plots:
            for path in plots(report, args.render, args.plots):
                print(f"wrote {path}")
        return 0
    try:
        if args.resume:
            run = args.resume
            if not (run / "params.json").exists():
                raise ParamError(f"--resume {run}: no run there (no params.json)")
            given = [f.name for f in fields(Params) if getattr(args, f.name) is not None]
            if given or args.quick:
                raise ParamError(f"--resume takes the run's own parameters; do not give {given or ['--quick']}")
            p = Params(**json.loads((run / "params.json").read_text())).validate()
        else:
            if args.out is None:
                raise ParamError("--out DIR is required (the run's directory)")
            base = {**asdict(Params()), **(QUICK if args.quick else {})}
            base.update({f.name: getattr(args, f.name) for f in fields(Params) if getattr(args, f.name) is not None})
            p = Params(**base).validate()
            if args.stop_after_day is not None and not 1 <= args.stop_after_day <= p.days:
                raise ParamError(f"--stop-after-day must be in [1, {p.days}], got {args.stop_after_day}")
            run = args.out
            if run.exists() and any(run.iterdir()):
                raise ParamError(f"--out {run} exists and is not empty (to continue a stopped run: --resume {run})")
            run.mkdir(parents=True, exist_ok=True)
            (run / "params.json").write_text(json.dumps(asdict(p), indent=1))
    except ParamError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_REFUSED
    print(
        f"{p.users:,} users x {p.days} days, dim {p.dim}: about {expected_memories(p):,.0f} memories; "
        f"run directory {run}",
        flush=True,
    )
    t0 = time.perf_counter()
    code = orchestrate(run, p, args.sequential, args.stop_after_day, sys.stderr.isatty())
    if code != 0:
        return code
    report = build_report(run)
    report["wall_s"] = time.perf_counter() - t0
    (run / "report.json").write_text(json.dumps(report, indent=1))
    print(summary(report))
    if args.plots:
        for path in plots(report, run, args.plots):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

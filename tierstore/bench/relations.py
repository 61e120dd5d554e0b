"""(i) Relations: retire what was replaced, never what still holds (issue 27).

The workload (:mod:`tierstore.bench.relations_workload`) mixes relations
that hold several values at once (allergies, languages, siblings, ...: all
stay true) with relations whose value changes (employer, home city, ...:
only the newest is true), plus restatements and chatter, in one namespace per
household over 90 days. It is loaded into a fresh :class:`TierStore` on a
:class:`ManualClock` (every memory added at its own time, ``sweep()`` every
night until nothing is due, as suite g does), and the questions are asked at
the midpoint and at the end with ``search(ns, vector, k=5)`` — the policy's
defaults for everything else (cold tier "auto", accesses recorded on hits).

Metrics (end-of-period questions unless said otherwise; a *value* is found
when any memory stating it — first statement or restatement — is among the
hits):

``stale@1``
    current-value questions about a relation that changed: the first hit
    states an older value;
``live@1``
    multi-valued and current-value questions: the first hit states a live
    value;
``live@5``
    the same questions: the share of their live values among the 5 hits
    (multi-valued: found values / values; current-value: 0 or 1), averaged
    over questions; also split into ``multi live@5`` and ``current live@5``;
``kept@5`` (safety)
    of the (question, value) pairs of multi-valued relations that plain
    similarity (exact cosine over every memory ever added, nothing forgotten)
    puts in its top 5, the share the candidate also has in its top 5;
``history@5``
    history questions ("where did Frank work before?"): the share of the
    older values among the 5 hits;
``retired``
    of the multi-valued values, the share with no statement left live at the
    end: every statement of the value was marked superseded, archived (cold)
    or deleted (whatever the cause: supersession or lifetime);
``retired by mark``
    the same, counting only supersession marks (every statement of the value
    marked superseded): the part of ``retired`` that is issue 27's;
``marked``
    of the multi-valued statements, the share marked superseded (the issue-27
    failure itself, apart from lifetimes);
``stale marked`` / ``live marked``
    of the single-valued statements of older (replaced) values, the share
    marked superseded by the end (restatements included) / of the
    single-valued relations, the share whose newest value has every statement
    marked superseded.

Rows: plain similarity; the default policy with no hints (drift), with tags
naming the relation, with keys on single-valued relations; and the
safety-only variant (``drift=False``: nothing changes), plain and default.
With ``i.diagnostic`` (default on), each variant also gets a row with
automatic supersession off (the default policy otherwise): not a proposal,
it separates what supersession costs from what lifetimes (TTL archiving)
cost.
:func:`evaluate` runs one configuration for scripts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tierstore.bench.common import BenchConfig, SuiteResult, sweep_until_done, workdir
from tierstore.bench.relations_workload import DAY, MULTI, T0, RelationsWorkload, relations_workload
from tierstore.progress import Progress

K = 5
DEFAULT_SEED = 2027  # the suite's seed is cfg.seed + this

# ------------------------------------------------------------------ embeddings (cached within the process)

_CACHE: dict[str, dict[str, np.ndarray]] = {}
_EMBEDDERS: dict[str, Any] = {}


def _embedder(kind: str) -> Any:
    from tierstore.bench.forgetting import make_embedder

    if kind not in _EMBEDDERS:
        _EMBEDDERS[kind] = make_embedder(kind)
    return _EMBEDDERS[kind]


def embedder_name(kind: str = "auto") -> str:
    from tierstore.bench.forgetting import Hashing

    emb = _embedder(kind)
    return "HashingEmbedder (synthetic, no topics)" if isinstance(emb, Hashing) else str(emb.name)


def embed_texts(
    texts: Iterable[str], kind: str = "auto", *, progress: bool | None = False, batch: int = 256
) -> dict[str, np.ndarray]:
    """Unit vectors of ``texts`` (each distinct text embedded once per process, in batches)."""
    emb = _embedder(kind)
    cache = _CACHE.setdefault(f"{kind}:{emb.name}", {})
    todo = [t for t in dict.fromkeys(texts) if t not in cache]
    with Progress(len(todo), "(i) embed", enabled=progress) as bar:
        for s in range(0, len(todo), batch):
            part = todo[s : s + batch]
            vecs = np.asarray(emb.embed(part, [()] * len(part)), np.float32)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            for t, v in zip(part, vecs):
                cache[t] = v
            bar.update(len(part))
    return cache


def workload_vectors(
    wl: RelationsWorkload, kind: str = "auto", *, progress: bool | None = False
) -> Callable[[str], np.ndarray]:
    cache = embed_texts([m.content for m in wl.mems] + [q.text for q in wl.questions], kind, progress=progress)
    return cache.__getitem__


# ------------------------------------------------------------------ rankings

Rankings = dict[str, list[str]]  # question id -> the ids of the hits, best first


def plain_rankings(wl: RelationsWorkload, vec: Callable[[str], np.ndarray], k: int = K) -> Rankings:
    """Exact cosine over every memory of the household added before the question; nothing forgotten."""
    by_ns: dict[str, list[Any]] = {}
    for m in wl.mems:
        by_ns.setdefault(m.ns, []).append(m)
    out: Rankings = {}
    mats = {
        ns: (np.stack([vec(m.content) for m in ms]), np.array([m.t for m in ms]), [m.id for m in ms])
        for ns, ms in by_ns.items()
    }
    for q in wl.questions:
        mat, ts, ids = mats[q.ns]
        sims = mat @ vec(q.text)
        sims = np.where(ts < q.t, sims, -np.inf)
        order = np.argsort(-sims, kind="stable")[:k]
        out[q.id] = [ids[i] for i in order if np.isfinite(sims[i])]
    return out


@dataclass
class StoreRun:
    rankings: Rankings
    alias: dict[str, str]  # workload id -> the store's id, where the store returned another (deduplicated)
    state: dict[str, str]  # store id -> "hot" | "warm" | "cold" | "superseded" | "gone" at the end
    sweeps: dict[str, int]
    tiers: dict[str, int]
    elapsed_s: float


def store_rankings(
    wl: RelationsWorkload,
    vec: Callable[[str], np.ndarray],
    cfg: BenchConfig,
    policy: Any = None,
    k: int = K,
    label: str = "tierstore",
) -> StoreRun:
    """Load the workload into a fresh store (its own clock, nightly sweeps) and ask its questions."""
    from tierstore import ManualClock, Policy, TierStore

    t_start = time.perf_counter()
    policy = policy if policy is not None else Policy()
    events: list[tuple[float, int, int]] = [(m.t, 0, i) for i, m in enumerate(wl.mems)]
    events += [(q.t, 1, i) for i, q in enumerate(wl.questions)]
    events.sort()
    nights = [T0 + (d + 1) * DAY for d in range(wl.days)]
    ni = 0
    alias: dict[str, str] = {}
    rankings: Rankings = {}
    sweeps = {"demoted": 0, "archived": 0, "deleted": 0}
    state: dict[str, str] = {}
    tiers: dict[str, int] = {}
    with workdir(cfg, "relations") as d:
        clock = ManualClock(T0)
        store = TierStore.open(Path(d) / "store", dim=384, clock=clock, policy=policy)
        try:

            def night(t: float) -> None:
                clock.set(t)
                sweep_until_done(store, sweeps)

            with Progress(len(events), f"(i) {label}", enabled=cfg.progress) as bar:
                for t, kind, i in events:
                    while ni < len(nights) and nights[ni] <= t:
                        night(nights[ni])
                        ni += 1
                    clock.set(max(t, clock.now()))
                    if kind == 0:
                        m = wl.mems[i]
                        got = store.add(
                            m.ns,
                            m.content,
                            vec(m.content),
                            memory_type=m.memory_type,
                            confidence=0.9,
                            source="user_declaration",
                            tags=list(m.tags),
                            id=m.id,
                            key=m.key,
                        )
                        if got != m.id:
                            alias[m.id] = got
                    else:
                        q = wl.questions[i]
                        rankings[q.id] = [h.id for h in store.search(q.ns, vec(q.text), k=k)]
                    bar.update()
            while ni < len(nights):
                night(nights[ni])
                ni += 1
            for ns in wl.namespaces():
                for mem in store.memories(ns):
                    state[mem.id] = "superseded" if mem.superseded_by is not None else mem.tier
                    tiers[mem.tier] = tiers.get(mem.tier, 0) + 1
        finally:
            store.close()
    return StoreRun(rankings, alias, state, sweeps, tiers, time.perf_counter() - t_start)


# ------------------------------------------------------------------ metrics

RETIRED_STATES = ("superseded", "cold", "gone")


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else math.nan


def metrics(
    wl: RelationsWorkload,
    rankings: Mapping[str, list[str]],
    plain: Mapping[str, list[str]] | None = None,
    state: Mapping[str, str] | None = None,
    alias: Mapping[str, str] | None = None,
    *,
    k: int = K,
    phase: str = "end",
) -> dict[str, float]:
    """The metrics of one candidate (see the module docstring).

    rankings / plain: question id -> hit ids, best first (plain: the
    nothing-forgotten baseline; ``None``: ``rankings`` is the baseline, and
    kept@5 is 1 wherever defined). state: store id -> its state at the end
    (``hot``/``warm``/``cold``/``superseded``; a memory absent is gone);
    ``None``: nothing was retired (plain similarity). alias: workload id ->
    the id the store kept it under (deduplicated)."""
    al = alias or {}

    def sid(i: str) -> str:
        return al.get(i, i)

    def groups(gs: Iterable[tuple[str, ...]]) -> list[frozenset[str]]:
        return [frozenset(sid(i) for i in g) for g in gs]

    stale1: list[float] = []
    live1: list[float] = []
    live5_multi: list[float] = []
    live5_current: list[float] = []
    hist5: list[float] = []
    kept_num = kept_den = 0
    for q in wl.questions:
        if q.phase != phase:
            continue
        hits = list(rankings.get(q.id, []))[:k]
        top = hits[0] if hits else None
        hitset = set(hits)
        live = groups(q.live)
        found = [bool(g & hitset) for g in live]
        if q.kind == "history":
            hist5.append(sum(found) / len(live))
            continue
        live_ids = frozenset().union(*live)
        live1.append(float(top in live_ids))
        if q.kind == "multi":
            live5_multi.append(sum(found) / len(live))
            pset = set(list((plain if plain is not None else rankings).get(q.id, []))[:k])
            for g, f in zip(live, found):
                if g & pset:
                    kept_den += 1
                    kept_num += f
        else:
            live5_current.append(float(found[0]))
            if q.stale:
                stale_ids = frozenset().union(*groups(q.stale)) - live_ids
                stale1.append(float(top in stale_ids))
    out = {
        "stale@1": _mean(stale1),
        "live@1": _mean(live1),
        "live@5": _mean(live5_multi + live5_current),
        "multi live@5": _mean(live5_multi),
        "current live@5": _mean(live5_current),
        "kept@5": kept_num / kept_den if kept_den else math.nan,
        "history@5": _mean(hist5),
    }
    out.update(retirement(wl, state, alias))
    out.update(
        households=float(wl.households),
        memories=float(len(wl.mems)),
        questions=float(sum(q.phase == phase for q in wl.questions)),
        drift_questions=float(len(stale1)),
        history_questions=float(len(hist5)),
        kept_pairs=float(kept_den),
    )
    return out


def retirement(
    wl: RelationsWorkload, state: Mapping[str, str] | None, alias: Mapping[str, str] | None = None
) -> dict[str, float]:
    """``retired``, ``marked``, ``stale marked`` and ``live marked`` (see the module docstring)."""
    if state is None:
        return {
            "retired": 0.0,
            "retired by mark": 0.0,
            "marked": 0.0,
            "stale marked": 0.0 if wl.drift else math.nan,
            "live marked": 0.0,
        }
    al = alias or {}

    def st(i: str) -> str:
        return state.get(al.get(i, i), "gone")

    multi_values: dict[tuple[str, str, str, str], list[str]] = {}
    single: dict[tuple[str, str, str], list[tuple[float, str, str]]] = {}  # (ns, subject, relation) -> statements
    for m in wl.mems:
        if m.relation is None or m.subject is None or m.value is None:
            continue
        if m.relation in MULTI:
            multi_values.setdefault((m.ns, m.subject, m.relation, m.value), []).append(m.id)
        else:
            single.setdefault((m.ns, m.subject, m.relation), []).append((m.t, m.value, m.id))
    statements = [i for ids in multi_values.values() for i in ids]
    retired = [all(st(i) in RETIRED_STATES for i in ids) for ids in multi_values.values()]
    by_mark = [all(st(i) == "superseded" for i in ids) for ids in multi_values.values()]
    marked = [st(i) == "superseded" for i in statements]
    stale_m: list[bool] = []
    live_m: list[bool] = []
    for stmts in single.values():
        stmts.sort()
        newest = stmts[-1][1]
        for _, value, i in stmts:
            if value != newest:
                stale_m.append(st(i) == "superseded")
        # the newest value counts as marked when every statement of it is (a restatement that took over
        # from the first statement of the same value is no harm)
        live_m.append(all(st(i) == "superseded" for _, value, i in stmts if value == newest))
    return {
        "retired": _mean([float(x) for x in retired]),
        "retired by mark": _mean([float(x) for x in by_mark]),
        "marked": _mean([float(x) for x in marked]),
        "stale marked": _mean([float(x) for x in stale_m]),
        "live marked": _mean([float(x) for x in live_m]),
    }


# ------------------------------------------------------------------ scripts and the suite


def evaluate(
    policy: Any = None,
    *,
    households: int = 30,
    days: int = 90,
    seed: int = DEFAULT_SEED,
    drift: bool = True,
    hints: str = "none",
    embedder: str = "auto",
    cfg: BenchConfig | None = None,
    phase: str = "end",
) -> dict[str, float]:
    """One configuration's metrics (the store's, and the plain baseline's
    under ``plain_*`` keys). ``policy``: a :class:`Policy` (``None``: the
    default policy)."""
    cfg = cfg or BenchConfig(progress=False)
    wl = relations_workload(households, days, seed, drift=drift, hints=hints)
    vec = workload_vectors(wl, embedder, progress=cfg.progress)
    plain = plain_rankings(wl, vec)
    run_ = store_rankings(wl, vec, cfg, policy)
    out = metrics(wl, run_.rankings, plain, run_.state, run_.alias, phase=phase)
    for key, v in metrics(wl, plain, phase=phase).items():
        out[f"plain_{key}"] = v
    out["elapsed_s"] = run_.elapsed_s
    return out


HEADER = [
    "row",
    "stale@1",
    "live@1",
    "live@5",
    "multi live@5",
    "current live@5",
    "kept@5",
    "history@5",
    "retired",
    "retired by mark",
    "marked",
    "stale marked",
    "live marked",
    "mid live@5",
    "mid stale@1",
    "households",
    "memories",
    "questions",
]
KEYS = [
    "stale@1",
    "live@1",
    "live@5",
    "multi live@5",
    "current live@5",
    "kept@5",
    "history@5",
    "retired",
    "retired by mark",
    "marked",
    "stale marked",
    "live marked",
    "mid live@5",
    "mid stale@1",
]


def _f(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.3f}"


def cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            r["row"],
            *(_f(r.get(k)) for k in KEYS),
            str(int(r["households"])),
            str(int(r["memories"])),
            str(int(r["questions"])),
        ]
        for r in rows
    ]


def _row(
    name: str, wl: RelationsWorkload, rankings: Rankings, plain: Rankings | None, run_: StoreRun | None
) -> dict[str, Any]:
    state = None if run_ is None else run_.state
    alias = None if run_ is None else run_.alias
    end = metrics(wl, rankings, plain, state, alias, phase="end")
    mid = metrics(wl, rankings, plain, state, alias, phase="mid")
    row: dict[str, Any] = {
        "row": name,
        **end,
        "mid live@5": mid["live@5"],
        "mid stale@1": mid["stale@1"],
        "mid kept@5": mid["kept@5"],
        "questions_all": len(wl.questions),
    }
    if run_ is not None:
        row.update(sweeps=run_.sweeps, tiers_end=run_.tiers, elapsed_s=round(run_.elapsed_s, 1))
    return row


def no_auto_supersession() -> Any:
    """The default policy with automatic supersession off for facts and preferences (diagnostic rows)."""
    from tierstore.policy import Policy

    return Policy.from_dict(
        {"types": {t: {"supersede_above": "off", "supersede_above_shared_tag": "off"} for t in ("fact", "preference")}}
    )


def run(cfg: BenchConfig) -> SuiteResult:
    households = int(cfg.size("i.households", 30, 8))
    days = int(cfg.size("i.days", 90, 90))
    kind = str(cfg.sizes.get("i.embedder", "auto"))
    diagnostic = bool(cfg.size("i.diagnostic", True, True))
    seed = cfg.seed + DEFAULT_SEED
    res = SuiteResult("i", "forgetting quality on multi-valued and changing relations")
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    counts: dict[str, Any] = {}
    for drift in (True, False):
        base = relations_workload(households, days, seed, drift=drift, hints="none")
        vec = workload_vectors(base, kind, progress=cfg.progress)
        plain = plain_rankings(base, vec)
        tag = "drift" if drift else "safety (no drift)"
        rows.append(_row(f"plain similarity, {tag}", base, plain, None, None))
        hints_list = ("none", "tags", "key") if drift else ("none",)
        for hints in hints_list:
            wl = base if hints == "none" else relations_workload(households, days, seed, drift=drift, hints=hints)
            run_ = store_rankings(wl, vec, cfg, None, label=f"{tag}, hints={hints}")
            name = (
                f"default policy, {tag}, "
                + {"none": "no hints", "tags": "tags=[relation]", "key": "key=subject:relation"}[hints]
            )
            rows.append(_row(name, wl, run_.rankings, plain, run_))
        if diagnostic:
            run_ = store_rankings(base, vec, cfg, no_auto_supersession(), label=f"{tag}, no auto-supersession")
            rows.append(
                _row(f"diagnostic: automatic supersession off, {tag}, no hints", base, run_.rankings, plain, run_)
            )
        counts[tag] = base.counts()
    elapsed = time.perf_counter() - t0
    label = embedder_name(kind)
    res.data["rows"] = rows
    res.tables.append(
        (
            f"relations — {households} households x {days} days, k={K}, seed {seed}, embedder: {label} "
            "(end-of-period questions; mid = day-" + str(days // 2) + " questions)",
            HEADER,
            cells(rows),
        )
    )
    res.extra.update(embedder=label, households=households, days=days, counts=counts, elapsed_s=round(elapsed, 1))
    res.notes.append(
        "stale@1: current-value questions about a changed relation whose first hit states an older value; live@1 / "
        "live@5: multi-valued and current-value questions, first hit live / share of live values among 5 hits; "
        "kept@5: of the multi-valued values plain similarity has in its top 5, the share the row has too; "
        "history@5: older values of a changed relation among 5 hits ('where did X work before?'); retired: "
        "multi-valued values with every statement superseded, archived or deleted at the end; retired by mark: every "
        "statement marked superseded; marked: "
        "multi-valued statements marked superseded; stale marked: single-valued statements of replaced "
        "values marked superseded; live marked: single-valued relations whose newest value has every statement "
        "marked superseded."
    )
    return res

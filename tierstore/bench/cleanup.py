"""(e) Cleanup: ``store.sweep()`` against the seed's full-scan
``run_memory_cleanup`` (§4.4: fetch every non-archived memory, compute, update).

The same memories on both sides, and in each round the same number due: a
slice of ``due`` memories whose TTL (an explicit per-memory TTL, ``(r+1)``
hours) has just run out; every other memory is a fresh fact, far from any
threshold on both sides. Round ``r`` moves the clock to just past ``(r+1)``
hours and runs both cleanups (the order alternates). Both archive exactly the
due slice (checked). tierstore reads only the due rows through its due index
and really moves them (an archive object in the local cold store, a catalog
commit); the seed flips an ``archived`` flag after scanning everything.

Without the ``bench`` extra the seed's algorithm runs over an in-memory list
of metadata dicts (what ``collection.get`` returns) — no database at all, a
lower bound of its cost; with chromadb installed, on a real Chroma collection
too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from tierstore.bench.common import (
    DIM,
    BenchConfig,
    Row,
    SuiteResult,
    clustered_vectors,
    have,
    open_store,
    timed,
    workdir,
)
from tierstore.bench.seedref import DictCollection, SeedMemorySystem, cleanup_dicts, seed_metadata
from tierstore.progress import Progress

TITLE = "store.sweep vs the seed's full-scan run_memory_cleanup (§4.4)"
T0 = 1_700_000_000.0
HOUR = 3600.0


def run(cfg: BenchConfig) -> SuiteResult:
    n = cfg.size("e.n", 100_000, 20_000)
    rounds = cfg.size("e.rounds", 5, 3)
    due = cfg.size("e.due", n // 20, n // 20)
    n_ns = cfg.size("e.namespaces", 100, 100)
    with_chroma = have("chromadb") and not cfg.sizes.get("e.no_chroma", False)
    res = SuiteResult("e", TITLE)
    vecs = clustered_vectors(n, DIM, seed=cfg.seed + 41)
    slice_of = np.full(n, -1)
    slice_of[: rounds * due] = np.arange(rounds * due) // due
    np.random.default_rng(cfg.seed + 42).shuffle(slice_of)  # due memories spread over namespaces and rows
    ttl = [None if s < 0 else (int(s) + 1) * HOUR for s in slice_of.tolist()]
    t0 = datetime.fromtimestamp(T0, tz=UTC).replace(tzinfo=None)
    ids = [f"m{i}" for i in range(n)]
    metas = [
        seed_metadata(ids[i], memory_type="fact", created=t0, last_access=t0, confidence=0.8, tags=[], ttl=ttl[i])
        for i in range(n)
    ]

    with workdir(cfg, "cleanup") as d:
        from tierstore import ManualClock

        clock = ManualClock(T0)
        store = open_store(d / "store", clock=clock)
        seed = None
        try:
            per = -(-n // n_ns)
            with Progress(n, f"(e) tierstore add {n}", enabled=cfg.progress) as bar:
                for ns in range(n_ns):
                    lo, hi = ns * per, min(n, (ns + 1) * per)
                    if lo >= hi:
                        break
                    store.add_batch(
                        f"u{ns}",
                        [
                            {
                                "content": f"m{i}",
                                "embedding": vecs[i],
                                "id": ids[i],
                                "memory_type": "fact",
                                "confidence": 0.8,
                                "source": "user_declaration",
                                **({} if ttl[i] is None else {"ttl_seconds": ttl[i]}),
                            }
                            for i in range(lo, hi)
                        ],
                    )
                    bar.update(hi - lo)
            dicts = DictCollection(ids, metas)
            if with_chroma:
                seed = SeedMemorySystem(str(d / "chroma"))
                with Progress(n, f"(e) Chroma add {n}", enabled=cfg.progress) as bar:
                    b = seed.max_batch
                    for s in range(0, n, b):
                        seed.add_many(ids[s : s + b], vecs[s : s + b], ids[s : s + b], metas[s : s + b])
                        bar.update(min(b, n - s))
            # nothing due yet (half an hour in): what a periodic cleanup costs when there is no work
            clock.set(T0 + 0.5 * HOUR)
            now_idle = t0 + timedelta(hours=0.5)
            idle_steps = {"sweep": lambda: store.sweep(), "dicts": lambda: cleanup_dicts(dicts, now_idle)}
            if seed is not None:
                idle_steps["chroma"] = lambda: seed.run_memory_cleanup(now=now_idle)
            idle: dict[str, list[float]] = {k: [] for k in idle_steps}
            for r in range(3):
                for name in list(idle_steps) if r % 2 == 0 else list(idle_steps)[::-1]:
                    el, out = timed(idle_steps[name])
                    acted = out.archived + out.deleted if name == "sweep" else out[0] + out[1]
                    if acted:
                        raise RuntimeError(f"{name} acted on {acted} memories with nothing due")
                    idle[name].append(el)
            times: dict[str, list[float]] = {"sweep": [], "dicts": [], "chroma": []}
            counts: dict[str, list[int]] = {"sweep": [], "dicts": [], "chroma": []}
            with Progress(rounds, "(e) cleanup rounds", enabled=cfg.progress) as bar:
                for r in range(rounds):
                    t = T0 + (r + 1) * HOUR + 60
                    clock.set(t)
                    now = t0 + timedelta(seconds=t - T0)
                    steps = {
                        "sweep": lambda: store.sweep(),
                        "dicts": lambda: cleanup_dicts(dicts, now),  # noqa: B023 (timed in this round)
                    }
                    if seed is not None:
                        steps["chroma"] = lambda: seed.run_memory_cleanup(now=now)  # noqa: B023 (as above)
                    order = list(steps)
                    if r % 2:
                        order.reverse()
                    for name in order:
                        el, out = timed(steps[name])
                        times[name].append(el)
                        counts[name].append(out.archived + out.deleted if name == "sweep" else out[0] + out[1])
                    bar.update()
        finally:
            store.close()

    for name, c in counts.items():
        if c and any(x != due for x in c):
            res.notes.append(f"WARNING: {name} acted on {c} memories per round, expected {due} each")
    p = {"N": n, "due": due, "rounds": rounds}
    med = {k: float(np.median(v)) for k, v in times.items() if v}
    res.rows.append(
        Row(
            "e",
            "cleanup, seed algorithm on in-memory dicts",
            "store.sweep()",
            "run_memory_cleanup (list of dicts)",
            med["sweep"],
            med["dicts"],
            "per cleanup",
            p,
            note="baseline without any database: a lower bound of the seed's cost",
        )
    )
    imed = {k: float(np.median(v)) for k, v in idle.items()}
    pi = {"N": n, "due": 0, "reps": 3}
    res.rows.append(
        Row(
            "e",
            "cleanup, nothing due, in-memory dicts",
            "store.sweep()",
            "run_memory_cleanup (list of dicts)",
            imed["sweep"],
            imed["dicts"],
            "per cleanup",
            pi,
        )
    )
    if "chroma" in imed:
        res.rows.append(
            Row(
                "e",
                "cleanup, nothing due, Chroma",
                "store.sweep()",
                "run_memory_cleanup (Chroma)",
                imed["sweep"],
                imed["chroma"],
                "per cleanup",
                pi,
            )
        )
    if "chroma" in med:
        res.rows.append(
            Row(
                "e",
                "cleanup, seed design on Chroma",
                "store.sweep()",
                "run_memory_cleanup (Chroma)",
                med["sweep"],
                med["chroma"],
                "per cleanup",
                p,
            )
        )
    else:
        res.notes.append(
            "the Chroma version of run_memory_cleanup was skipped: chromadb is not installed "
            "(pip install 'tierstore[bench]') or e.no_chroma was set."
        )
    res.extra.update(acted_per_round={k: v for k, v in counts.items() if v})
    res.notes.append(
        f"{n} memories in {n_ns} namespaces; each round {due} are due (TTL just expired) on both "
        "sides; rounds alternate the order. store.sweep() archives them for real (cold objects + "
        "catalog); the seed sets archived=True. Later rounds scan fewer non-archived memories on the "
        "seed side (those archived earlier are filtered out)."
    )
    return res

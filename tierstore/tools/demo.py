"""``tierstore demo``: sixty simulated days of an assistant's memory.

Runs the synthetic agent workload (:mod:`tierstore.analytics.workload`) on a
:class:`ManualClock` against an embedded store, prints searches as tables with
each hit's score breakdown, and shows what the migrator finds due.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from tierstore.analytics.workload import USERS, agent_workload
from tierstore.clock import ManualClock
from tierstore.embedding.synthetic import HashingEmbedder
from tierstore.errors import StoreConfigError
from tierstore.progress import Progress
from tierstore.records import Hit, SweepReport
from tierstore.store import TierStore

DAY = 86400.0
DIM = 128
SHOW_USER = "alice"
SHOW_DAYS = (1, 30, 59)


def format_hits(hits: list[Hit], width: int = 110) -> str:
    """A readable table: rank, score and its five factors, type, tier, content."""
    head = (
        f"{'#':>2} {'score':>7} {'sim':>5} {'rec':>5} {'conf':>5} {'ctx':>5} {'wt':>5}"
        f"  {'type':<12} {'tier':<4}  content"
    )
    lines = [head, "-" * min(width, len(head) + 40)]
    for i, h in enumerate(hits, 1):
        ex = h.explain
        n = ex.normalised if ex else {}
        cells = " ".join(
            f"{n.get(f, float('nan')):5.2f}" for f in ("similarity", "recency", "confidence", "context", "weight")
        )
        content = h.memory.content
        room = max(20, width - 70)
        if len(content) > room:
            content = content[: room - 1] + "…"
        lines.append(f"{i:>2} {h.score:7.4f} {cells}  {h.memory.memory_type:<12} {h.memory.tier:<4}  {content}")
    return "\n".join(lines)


def format_sweep(report: SweepReport) -> str:
    parts = [f"examined {report.examined} due memories"]
    for action in ("demoted", "archived", "deleted", "kept"):
        parts.append(f"{action} {getattr(report, action)}")
    lines = [", ".join(parts)]
    for mtype, counts in sorted(report.by_type.items()):
        lines.append(f"    {mtype:<12} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return "\n".join(lines)


RESTORE_DAY = 45


def restore_on_demand(store: TierStore, embedder: HashingEmbedder, out: TextIO) -> list[str]:
    """The assistant is asked about something archived: bring it back."""
    query = "Alice needs to renew the passport before the summer trip"
    before = store.search(SHOW_USER, embedder.embed(query, ["travel"]), k=1, record_access=False)
    ids = store.restore(SHOW_USER, text="passport", limit=3)
    ids += store.restore(SHOW_USER, where={"memory_type": "task", "tags": ["travel"]}, limit=3)
    print(
        f"\nday {RESTORE_DAY}: alice asks about her passport; the hot tier's best match was "
        f"{before[0].memory.content if before else 'nothing'!r}",
        file=out,
    )
    print(
        f"  restored {len(ids)} archived memor{'y' if len(ids) == 1 else 'ies'} on demand "
        "(keyword 'passport', then travel tasks):",
        file=out,
    )
    for mid in ids:
        m = store.get(SHOW_USER, mid)
        print(f"    {m.content if m is not None else '(gone)'}", file=out)
    hits = store.search(SHOW_USER, embedder.embed(query, ["travel"]), k=3, record_access=False, explain=True)
    print(format_hits(hits), file=out)
    return ids


DEFAULT_PATH = "demo-store"
_MARKER = "DEMO"  # a file in a store the demo made: the next run may replace it


def prepare_demo_dir(path: str | os.PathLike[str]) -> Path:
    """An empty directory for the demo's store: a store an earlier demo left
    there is replaced; anything else is refused (never delete a user's data)."""
    root = Path(path)
    if root.exists():
        if not root.is_dir():
            raise StoreConfigError(f"{root} exists and is not a directory")
        if (root / _MARKER).exists():
            shutil.rmtree(root)
        elif any(root.iterdir()):
            raise StoreConfigError(f"{root} is not empty and was not made by tierstore demo; give another --path")
    root.mkdir(parents=True, exist_ok=True)
    (root / _MARKER).write_text("made by tierstore demo; the next demo run may replace this directory\n")
    return root


def _command_name() -> str:
    """How the user can call tierstore again: the console script they ran, if any."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "tierstore":
        rel = os.path.relpath(argv0)
        return rel if not rel.startswith("..") else str(argv0)
    return "tierstore"


def next_steps(root: Path, command: str | None = None) -> list[str]:
    """Three commands to try on the kept store (each runs without error on it)."""
    cmd = command or _command_name()
    where = shlex.quote(str(root))
    third = (
        f"{cmd} report {where} --out {shlex.quote(str(root) + '-report')}"
        if importlib.util.find_spec("matplotlib")
        else f"{cmd} verify {where}"
    )
    return [f"{cmd} stats {where}", f"{cmd} sweep --dry-run {where}", third]


def run_demo(
    path: str | None = None,
    days: int = 60,
    seed: int = 7,
    out: TextIO | None = None,
    progress: bool | None = None,
    command: str | None = None,
) -> int:
    """Run the walkthrough into a store kept at ``path`` (default
    ``./demo-store``). Its simulated days end at the present, so the kept store
    is safe to use with the command line afterwards (see
    :mod:`tierstore.core.store_clock`)."""
    out = out or sys.stdout
    root = prepare_demo_dir(DEFAULT_PATH if path is None else path)
    # the namespace already says whose memory it is: leave names out of the vectors
    embedder = HashingEmbedder(DIM, ignore=USERS)
    # the simulated days end now: the store's time then agrees with the machine's
    clock = ManualClock(float(int(time.time() - days * DAY)))
    start = clock.now()
    events = list(agent_workload(days=days, seed=seed, start=start))
    print(f"tierstore demo: {len(events)} events, {days} simulated days, store at {root}", file=out)
    shown: set[int] = set()
    added = searches = 0
    with TierStore.open(root, dim=DIM, clock=clock) as store:
        day = 0
        flow: list[tuple[int, dict[str, int], SweepReport]] = []
        with Progress(len(events), "simulating", enabled=progress, unit=" events") as bar:
            for ev in events:
                while ev.t >= start + (day + 1) * DAY:
                    day += 1
                    report = store.sweep()  # the nightly migrator pass
                    if day % 7 == 0:
                        flow.append((day, store.stats(lifecycle=False).by_tier, report))
                    if day == RESTORE_DAY:
                        restore_on_demand(store, embedder, out)
                clock.set(max(clock.now(), ev.t))
                if ev.kind == "add":
                    store.add(
                        ev.ns,
                        ev.content,
                        embedder.embed(ev.content, ev.tags),
                        memory_type=ev.memory_type,
                        confidence=ev.confidence,
                        source=ev.source,
                        tags=ev.tags,
                        pinned=ev.pinned,
                        id=ev.id,
                        supersedes=[i for i in ev.supersedes if store.get(ev.ns, i)],
                    )
                    added += 1
                elif ev.kind == "search":
                    show = ev.ns == SHOW_USER and day in SHOW_DAYS and day not in shown
                    hits = store.search(
                        ev.ns,
                        embedder.embed(ev.content, ev.topics),
                        k=5,
                        context_tags=ev.context,
                        record_access=False,
                        explain=show,
                    )
                    searches += 1
                    if hits:
                        # the assistant used the top two hits in its answer
                        store.touch(ev.ns, [h.id for h in hits[:2]])
                        store.feedback(ev.ns, hits[0].id, positive=ev.positive, implicit=True)
                    if show:
                        shown.add(day)
                        bar.enabled and print(file=sys.stderr)
                        print(f"\nday {day}: {ev.ns} asks {ev.content!r} (context {ev.context})", file=out)
                        print(format_hits(hits), file=out)
                bar.update()
        clock.set(start + days * DAY)
        print(f"\nafter {days} days: {added} memories added, {searches} searches", file=out)
        print("\nmemories flowing hot -> warm -> cold (counts after the nightly sweep):", file=out)
        print(f"  {'day':>4} {'hot':>6} {'warm':>6} {'cold':>6}   that night's sweep", file=out)
        for d, tiers, rep in flow:
            print(
                f"  {d:>4} {tiers['hot']:>6} {tiers['warm']:>6} {tiers['cold']:>6}   "
                f"demoted {rep.demoted}, archived {rep.archived}, deleted {rep.deleted}",
                file=out,
            )
        report = store.sweep()
        print(f"\nday {days}, final sweep:", file=out)
        print("  " + format_sweep(report), file=out)
        stats = store.stats()
        print(f"memories per tier: {stats.by_tier}; pinned {stats.pinned}; namespaces {stats.namespaces}", file=out)
        for mtype, counts in sorted(stats.by_type.items()):
            print(f"    {mtype:<12} {counts}", file=out)
        final = store.search(
            SHOW_USER,
            embedder.embed("where does Alice live now", ["home"]),
            k=3,
            context_tags=["home"],
            record_access=False,
            explain=True,
        )
        print(f"\nday {days}: {SHOW_USER} asks 'where does Alice live now'", file=out)
        print(format_hits(final), file=out)
        clock.set(max(clock.now(), time.time()))  # closed at the present: its clock record says so
    print(f"\nThe store is kept in {root} (its {days} simulated days end now). Try next:", file=out)
    for line in next_steps(root, command):
        print(f"  {line}", file=out)
    return 0

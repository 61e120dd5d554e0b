"""Make ``trace.jsonl.gz``: an example workload trace for ``tierstore simulate``.

Runs the synthetic agent workload (:mod:`tierstore.analytics.workload`: users chat,
state facts and preferences, open tasks, move house every three weeks; the
assistant searches its memory, uses the top two hits and gives implicit
feedback on the first) against a store with the default policy, records every
call with ``start_trace``, and labels the "where does X live now" searches:
``stale`` = the user's superseded home facts, ``live`` = the current one.
Every ten days the assistant also restores travel tasks on demand.

    python docs/examples/make_trace.py [--days 45] [--users 3] [--out docs/examples/trace.jsonl.gz]

Deterministic: the same arguments give the same file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from pathlib import Path

from tierstore import ManualClock, TierStore
from tierstore.analytics.workload import USERS, agent_workload
from tierstore.embedding.synthetic import HashingEmbedder

DAY = 86400.0
DIM = 32
START = 1_700_006_400.0  # a UTC midnight, so days in the report line up
HOME_QUERY = "where does {u} live now"


def make_trace(out: Path, days: int = 45, users: int = 3, seed: int = 7) -> dict[str, int]:
    names = USERS[:users]
    embedder = HashingEmbedder(DIM, ignore=names)  # the namespace says whose memory it is
    clock = ManualClock(START)
    labels: list[dict[str, list[str]] | None] = []  # one per search call, in order
    homes: dict[str, list[str]] = {u: [] for u in names}
    counts = {"records": 0, "labelled": 0}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.jsonl"
        with TierStore.open(Path(tmp) / "store", dim=DIM, clock=clock) as store:
            store.start_trace(raw)
            day = seq = 0
            for ev in agent_workload(days=days, seed=seed, start=START, users=names):
                while ev.t >= START + (day + 1) * DAY:
                    day += 1
                    clock.set(max(clock.now(), START + day * DAY))
                    store.sweep()  # the nightly migrator of the recording run
                    if day % 10 == 0:
                        for u in names:  # "what was I supposed to do before the trip?"
                            store.restore(u, where={"memory_type": "task", "tags": ["travel"]}, limit=2)
                clock.set(max(clock.now(), ev.t))
                if ev.kind == "add":
                    seq += 1  # explicit ids (not random ones): the same arguments give the same file
                    mid = store.add(
                        ev.ns,
                        ev.content,
                        embedder.embed(ev.content, ev.tags),
                        memory_type=ev.memory_type,
                        confidence=ev.confidence,
                        source=ev.source,
                        tags=ev.tags,
                        pinned=ev.pinned,
                        id=ev.id or f"{ev.ns}-{ev.memory_type}-{seq}",
                    )
                    if ev.id and ev.id.startswith(f"{ev.ns}-home-"):
                        homes[ev.ns].append(mid)
                elif ev.kind == "search":
                    hits = store.search(
                        ev.ns, embedder.embed(ev.content, ev.topics), k=5, context_tags=ev.context, record_access=False
                    )
                    if ev.content == HOME_QUERY.format(u=ev.ns.capitalize()):
                        labels.append({"stale": homes[ev.ns][:-1], "live": homes[ev.ns][-1:]})
                    else:
                        labels.append(None)
                    if hits:
                        store.touch(ev.ns, [h.id for h in hits[:2]])
                        store.feedback(ev.ns, hits[0].id, positive=ev.positive, implicit=True)
            store.stop_trace()
        out.parent.mkdir(parents=True, exist_ok=True)
        searches = iter(labels)
        # mtime=0: the same input gives the same bytes
        with (
            open(raw, encoding="utf-8") as src,
            open(out, "wb") as f,
            gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz,
        ):
            for line in src:
                rec = json.loads(line)
                if rec["op"] == "search":
                    label = next(searches)
                    if label is not None:
                        rec.update(label)
                        counts["labelled"] += 1
                gz.write((json.dumps(rec, separators=(",", ":")) + "\n").encode())
                counts["records"] += 1
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--days", type=int, default=45)
    p.add_argument("--users", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", type=Path, default=Path(__file__).with_name("trace.jsonl.gz"))
    args = p.parse_args()
    counts = make_trace(args.out, days=args.days, users=args.users, seed=args.seed)
    print(
        f"wrote {args.out}: {counts['records']} records, {counts['labelled']} labelled searches, "
        f"{args.out.stat().st_size // 1024} KiB"
    )


if __name__ == "__main__":
    main()

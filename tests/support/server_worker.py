"""One client process of the server's load and kill tests (tests/remote/test_server_load.py).

    python server_worker.py URL TOKEN WORKER_ID SECONDS OUT GO_FILE MODE

Waits for GO_FILE, then for SECONDS runs a mix of calls through RemoteStore:
MODE ``mix`` (add, add_batch, search, touch, feedback, restore; past SECONDS
it goes on until it has made every call at least once and some worker's
restore has brought a memory back, the file ``restored`` beside GO_FILE, at
most 120 s: a worker starved of CPU on a loaded machine still does its share)
or ``adds`` (adds only, until the server disappears or SECONDS pass). Writes
JSON lines to OUT as it goes, each after the server acknowledged the call:
``{"add": [ns, id, content]}``, ``{"touch": [ns, id]}`` (one per counted
access: touches and hits of searches that record accesses),
``{"error": "..."}`` for any failure (the tests expect none under load), and
finally ``{"done": counts}``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from tierstore.errors import RemoteError
from tierstore.remote.client import RemoteStore

CALLS = ("add", "search", "touch", "feedback", "restore")  # a mix worker makes each at least once
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def main() -> int:
    url, token, wid, seconds, out_path, go, mode = sys.argv[1:8]
    wid_n, seconds_f = int(wid), float(seconds)
    rng = np.random.default_rng(wid_n)
    out = open(out_path, "a", buffering=1, encoding="utf-8")

    def log(**rec: object) -> None:
        out.write(json.dumps(rec) + "\n")

    store = RemoteStore(url, token=token, timeout=60.0)
    dim = store.dim
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    own, shared = f"w{wid_n}", "shared"
    known: dict[str, list[str]] = {own: [], shared: []}
    counts = {"add": 0, "search": 0, "touch": 0, "feedback": 0, "restore": 0, "restored": 0}
    deadline = time.monotonic() + seconds_f
    hard_deadline = time.monotonic() + max(seconds_f, 120.0)
    restored_flag = os.path.join(os.path.dirname(go), "restored")
    n = 0

    def done() -> bool:
        now = time.monotonic()
        if now >= hard_deadline or (now >= deadline and mode == "adds"):
            return True
        return now >= deadline and all(counts[op] for op in CALLS) and os.path.exists(restored_flag)

    def vec() -> np.ndarray:
        return rng.normal(size=dim).astype(np.float32)

    while not done():
        n += 1
        ns = own if rng.random() < 0.7 else shared
        op = (
            "add"
            if mode == "adds" or not known[ns]
            else rng.choice(
                ["add", "batch", "search", "touch", "feedback", "restore"], p=[0.25, 0.05, 0.3, 0.2, 0.1, 0.1]
            )
        )
        try:
            if op == "add":
                short = mode == "mix" and rng.random() < 0.2  # archived within a second by the migrator
                content = f"{WORDS[n % len(WORDS)]} memory {wid_n}-{n}"
                mid = store.add(
                    ns,
                    content,
                    vec(),
                    ttl_seconds=1.0 if short else None,
                    memory_type="conversation" if short else "fact",
                )
                log(add=[ns, mid, content])
                known[ns].append(mid)
                counts["add"] += 1
            elif op == "batch":
                items = [{"content": f"batch {wid_n}-{n}-{i}", "embedding": vec()} for i in range(5)]
                for item, mid in zip(items, store.add_batch(ns, items)):
                    log(add=[ns, mid, item["content"]])
                    known[ns].append(mid)
                counts["add"] += 5
            elif op == "search":
                hits = store.search(ns, vec(), k=3, record_access=True)
                for h in hits:
                    log(touch=[ns, h.id])
                counts["search"] += 1
            elif op == "touch":
                ids = [known[ns][int(i)] for i in rng.integers(0, len(known[ns]), size=3)]
                store.touch(ns, ids)
                for mid in ids:
                    log(touch=[ns, mid])
                counts["touch"] += 1
            elif op == "feedback":
                mid = known[ns][int(rng.integers(0, len(known[ns])))]
                store.feedback(ns, mid, positive=True, strength=0.5)
                counts["feedback"] += 1
            else:
                if rng.random() < 0.5:
                    back = store.restore(ns, text=WORDS[int(rng.integers(0, len(WORDS)))], limit=3)
                else:
                    back = store.restore(ns, query=vec(), k=2)
                counts["restore"] += 1
                counts["restored"] += len(back)
                if back and not os.path.exists(restored_flag):
                    open(restored_flag, "w").close()
        except RemoteError as exc:
            if mode == "adds":  # the server was killed: stop, everything acknowledged is logged
                break
            log(error=f"{op}: {type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - every failure is a finding
            log(error=f"{op}: {type(exc).__name__}: {exc}")
    log(done=counts)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

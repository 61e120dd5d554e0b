"""A store seeded for the SIGKILL tests, and the child process that is killed in it
(tests/core/test_crash.py, tests/storage/test_keywords.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import DIM, SUPPORT, T0, unit

from tierstore import ManualClock, TierStore

CHILD = SUPPORT / "crash_child.py"


def run_child(path, op, now, crash_at):
    env = dict(os.environ, TIERSTORE_CRASH_AT=crash_at)
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(path), op, repr(now)], env=env, capture_output=True, text=True, timeout=120
    )
    return proc


def seed_store(path, rng, n_chat=30, n_fact=20):
    clock = ManualClock(T0)
    with TierStore.open(path, dim=DIM, clock=clock) as store:
        chats = store.add_batch(
            "crash",
            [{"content": f"chat {i}", "embedding": unit(rng), "memory_type": "conversation"} for i in range(n_chat)],
        )
        facts = store.add_batch(
            "crash", [{"content": f"fact {i}", "embedding": unit(rng), "memory_type": "fact"} for i in range(n_fact)]
        )
        embeddings = {i: store.get("crash", i).embedding.tobytes() for i in chats + facts}
    return chats, facts, embeddings

"""Run one store operation in a child process; the parent sets
TIERSTORE_CRASH_AT so that it is SIGKILLed at a chosen point.

usage: crash_child.py PATH OP NOW [ARG]
OP: sweep | restore-all | add | add-key | upsert | search-warm | compact-cold | compact-cold-layout
"""

import sys

import numpy as np

from tierstore import ManualClock, TierStore

path, op, now = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = TierStore.open(path, clock=ManualClock(now))
if op == "sweep":
    store.sweep()
elif op == "restore-all":
    store.restore("crash", where={"memory_type": "conversation"})
elif op == "add":
    store.add("crash", "added just before the crash", np.ones(store.dim), id="late")
elif op == "add-key":  # supersedes the live memory of the slot "slot"
    store.add("crash", "the slot's new value", np.ones(store.dim), id="late", key="slot")
elif op == "upsert":  # replaces the memory "late"
    store.upsert_batch(
        "crash", [{"content": "replaced just before the crash", "embedding": np.ones(store.dim), "id": "late"}]
    )
elif op == "compact-cold":
    store.compact_cold()
elif op == "compact-cold-layout":  # objects of 8 records, so a layout writes several
    from tierstore.tiers import cold_layout

    cold_layout.OBJECT_RECORDS = 8
    store.compact_cold()
elif op == "search-warm":
    store.search("crash", np.ones(store.dim), k=50, record_access=True)
store.close()
print("finished without crashing")

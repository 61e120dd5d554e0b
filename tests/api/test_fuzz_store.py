"""Stateful fuzzing of the public API against a reference model (hypothesis).

Random sequences of add / add_batch / search / get / touch / feedback / pin /
delete / set_context / sweep / restore / reopen / clock jumps (large enough to
move memories through every tier, and sometimes far enough for the policy to
delete them) and bad input. The model knows which memories exist, their
content and stored embedding, pinned flags, exact access counts (every touch
and every search hit with ``record_access`` counts one, in any tier), and
which were deleted (explicitly, or by a sweep: read back from the lifecycle
``events`` table, the policy being the store's to apply). Checked after every
step:

* ``get`` sees every live memory in every tier, with its content, pinned flag,
  access count and (hot/warm) bit-identical embedding; deleted ones are gone;
* search returns only live memories of the namespace asked, from the tiers
  searched, each once, and exactly ``min(k, those memories)`` of them
  (search is exact at this size), archived statements superseded by later
  ones excepted (they stay retired);
* restore brings memories back bit-identical; pinned memories never move in a
  sweep;
* bad input raises the documented exception and changes nothing;
* every memory the migrator would act on now is in the due index.
"""

from __future__ import annotations

import atexit
import collections
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tierstore import (
    DimensionMismatchError,
    DuplicateIdError,
    InvalidConfidenceError,
    InvalidInputError,
    InvalidNamespaceError,
    InvalidVectorError,
    ManualClock,
    MemoryNotFoundError,
    TierStore,
    UnknownMemoryTypeError,
)
from tierstore.rules.validation import check_vector

pytestmark = pytest.mark.slow  # the state machine, the module's one test, runs for tens of seconds

DIM = 8
T0 = 1_700_000_000.0
HOUR = 3600.0
DAY = 86400.0
NAMESPACES = ("n0", "n1", "n2")
TYPES = ("conversation", "fact", "task", "preference")
WORDS = ("lisbon", "porto", "passport", "peanut", "meeting")
SHARED_IDS = ("x1", "x2", "x3")  # the same ids in several namespaces
# FUZZ_COVERAGE=1 pytest -s tests/api/test_fuzz_store.py prints which lifecycle
# transitions the run exercised (from the events tables), to tune the rules.
_COVERAGE: collections.Counter | None = collections.Counter() if os.environ.get("FUZZ_COVERAGE") else None
if _COVERAGE is not None:
    atexit.register(lambda: print(sorted(_COVERAGE.items())))

# A seed per vector: every draw is a valid vector (shrinking floats toward 0 would
# mostly produce zero vectors, which are bad input, tested on their own).
vectors = st.integers(0, 2**32 - 1).map(lambda s: np.random.default_rng(s).normal(size=DIM).astype(np.float32))
contents = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
namespaces = st.sampled_from(NAMESPACES)
picks = st.integers(0, 10**9)


@dataclass
class M:
    ns: str
    id: str
    content: str
    emb: bytes
    memory_type: str
    pinned: bool
    access: int = 0


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tierstore-fuzz-"))
        self.clock = ManualClock(T0)
        self.store = TierStore.open(self.dir / "s", dim=DIM, clock=self.clock)
        self.live: dict[tuple[str, str], M] = {}
        self.gone: set[tuple[str, str]] = set()
        self.event_seq = 0
        self.counter = 0

    def teardown(self) -> None:
        try:
            if _COVERAGE is not None:
                for kind, frm, to in self.store.engine.catalog.query("SELECT kind, from_tier, to_tier FROM events"):
                    _COVERAGE[(kind, frm, to)] += 1
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------

    def _pick(self, n: int, ns: str | None = None) -> M | None:
        keys = sorted(k for k in self.live if ns is None or k[0] == ns)
        return self.live[keys[n % len(keys)]] if keys else None

    def _item(self, ns: str, vec, content: str, mtype: str, conf: float, pinned: bool, explicit: int | None):
        self.counter += 1  # in the content too: every add's text differs, so none is deduplicated
        mid = SHARED_IDS[explicit % len(SHARED_IDS)] if explicit is not None else f"m{self.counter}"
        return {
            "id": mid,
            "content": f"{content} #{self.counter}",
            "embedding": np.array(vec, np.float32),
            "memory_type": mtype,
            "confidence": conf,
            "pinned": pinned,
        }

    def _record(self, ns: str, item: dict) -> None:
        emb = check_vector(item["embedding"], DIM).astype("<f4").tobytes()
        key = (ns, item["id"])
        self.live[key] = M(ns, item["id"], item["content"], emb, item["memory_type"], item["pinned"])
        self.gone.discard(key)

    def _state(self) -> list:
        """Everything observable in the catalog (after a flush)."""
        self.store.flush()
        cat = self.store.engine.catalog
        return (
            cat.query("SELECT * FROM memories ORDER BY rid")
            + cat.query("SELECT count(*) FROM events")
            + cat.query("SELECT * FROM archives ORDER BY batch")
            + cat.query("SELECT * FROM contexts ORDER BY ns")
        )

    def _sync_policy_deletes(self) -> None:
        rows = self.store.engine.catalog.query(
            "SELECT seq, ns, id, reason FROM events WHERE kind = 'delete' AND seq > ? ORDER BY seq", (self.event_seq,)
        )
        for seq, ns, mid, reason in rows:
            self.event_seq = seq
            if reason != "explicit":
                m = self.live.pop((ns, mid), None)
                assert m is not None, f"the sweep deleted {ns}/{mid}, which does not exist"
                assert not m.pinned, f"the sweep deleted pinned memory {ns}/{mid}"
                self.gone.add((ns, mid))
        if rows:
            self.event_seq = max(self.event_seq, rows[-1][0])

    def _tier(self, m: M) -> str:
        got = self.store.get(m.ns, m.id)
        assert got is not None
        return got.tier

    # -- rules ----------------------------------------------------------------------------

    @initialize(
        ns=namespaces,
        vecs=st.lists(vectors, min_size=3, max_size=8),
        mtypes=st.lists(st.sampled_from(TYPES), min_size=8, max_size=8),
    )
    def seed(self, ns, vecs, mtypes):
        items = [self._item(ns, v, "seed", mtypes[i], 0.9, False, None) for i, v in enumerate(vecs)]
        assert self.store.add_batch(ns, items) == [it["id"] for it in items]
        for it in items:
            self._record(ns, it)

    @rule(
        ns=namespaces,
        vec=vectors,
        content=contents,
        mtype=st.sampled_from(TYPES),
        conf=st.floats(0, 1),
        pinned=st.booleans(),
        explicit=st.one_of(st.none(), st.integers(0, 2)),
    )
    def add(self, ns, vec, content, mtype, conf, pinned, explicit):
        item = self._item(ns, vec, content, mtype, conf, pinned, explicit)
        if (ns, item["id"]) in self.live:
            before = self._state()
            with pytest.raises(DuplicateIdError):
                self.store.add(ns, **item)
            assert self._state() == before
            return
        assert self.store.add(ns, **item) == item["id"]
        self._record(ns, item)

    @rule(
        ns=namespaces,
        vecs=st.lists(vectors, min_size=1, max_size=5),
        mtype=st.sampled_from(TYPES),
        conf=st.floats(0.3, 1),
    )
    def add_batch(self, ns, vecs, mtype, conf):
        items = [self._item(ns, v, "batch", mtype, conf, False, None) for v in vecs]
        assert self.store.add_batch(ns, items) == [it["id"] for it in items]
        for it in items:
            self._record(ns, it)

    @rule(
        ns=namespaces,
        vec=vectors,
        k=st.integers(1, 8),
        record=st.booleans(),
        include_warm=st.booleans(),
        include_cold=st.sampled_from([False, True, "auto"]),
        near=st.one_of(st.none(), picks),
    )
    def search(self, ns, vec, k, record, include_warm, include_cold, near):
        if near is not None and self._pick(near, ns) is not None:
            q = np.frombuffer(self._pick(near, ns).emb, np.float32)
        else:
            q = np.array(vec, np.float32)
        tiers = {m.id: self._tier(m) for m in self.live.values() if m.ns == ns}
        # A statement superseded by a later one (the policy's automatic
        # supersession of near-identical facts, or a key) stays retired once
        # archived: the cold pass skips it (restore reaches it). The marks
        # are the store's to decide, read back like deletions.
        retired = {
            r[0]
            for r in self.store.engine.catalog.query(
                "SELECT m.id FROM supersessions s JOIN memories m ON m.rid = s.rid WHERE m.ns = ?", (ns,)
            )
        }
        tiers = {i: ("retired" if t == "cold" and i in retired else t) for i, t in tiers.items()}
        hits = self.store.search(ns, q, k=k, record_access=record, include_warm=include_warm, include_cold=include_cold)
        ids = [h.id for h in hits]
        assert len(ids) == len(set(ids)), "a memory returned twice"
        searched = {"hot"} | ({"warm"} if include_warm else set()) | ({"cold"} if include_cold else set())
        for h in hits:
            assert (ns, h.id) in self.live, f"search returned {ns}/{h.id}, which is deleted or never existed"
            assert h.memory.namespace == ns and h.memory.tier in searched and h.memory.tier == tiers[h.id]
            assert h.memory.content == self.live[(ns, h.id)].content
        eligible = {i for i, t in tiers.items() if t in searched}
        assert set(ids) <= eligible
        # hot and warm are always searched; the cold tier is, when asked for ("auto": when they answer weakly)
        always = {i for i, t in tiers.items() if t in searched - {"cold"}}
        if include_cold == "auto":
            assert min(k, len(always)) <= len(hits) <= min(k, len(eligible))
        else:
            assert len(hits) == min(k, len(eligible))
            if k >= len(eligible):
                assert set(ids) == eligible
        if record:
            for h in hits:
                self.live[(ns, h.id)].access += 1

    @rule(n=picks, dup=st.booleans())
    def touch(self, n, dup):
        m = self._pick(n)
        if m is None:
            return
        others = [o.id for o in self.live.values() if o.ns == m.ns and o.id != m.id][:2]
        ids = [m.id] * (2 if dup else 1) + others
        self.store.touch(m.ns, ids)
        for i in ids:
            self.live[(m.ns, i)].access += 1

    @rule(n=picks, positive=st.booleans(), strength=st.floats(0.01, 1))
    def feedback(self, n, positive, strength):
        m = self._pick(n)
        if m is None:
            return
        out = self.store.feedback(m.ns, m.id, positive=positive, strength=strength)
        assert out.id == m.id and 0.0 <= out.confidence <= 1.0 and out.access_count == m.access

    @rule(n=picks, pinned=st.booleans())
    def pin(self, n, pinned):
        m = self._pick(n)
        if m is None:
            return
        self.store.pin(m.ns, m.id, pinned)
        m.pinned = pinned

    @rule(n=picks)
    def delete(self, n):
        m = self._pick(n)
        if m is None:
            return
        assert self.store.delete(m.ns, m.id) is True
        del self.live[(m.ns, m.id)]
        self.gone.add((m.ns, m.id))
        assert self.store.get(m.ns, m.id) is None
        assert self.store.delete(m.ns, m.id) is False

    @rule(ns=namespaces, tags=st.lists(st.sampled_from(["travel", "food", "work"]), max_size=2, unique=True))
    def set_context(self, ns, tags):
        self.store.set_context(ns, tags)
        assert self.store.get_context(ns) == tuple(tags)

    @rule(dt=st.sampled_from([60.0, 30 * 60.0, 3 * HOUR, 2 * DAY, 20 * DAY, 120 * DAY]))
    def advance(self, dt):
        self.clock.advance(dt)

    @rule(dt=st.sampled_from([40 * 60.0, 2 * HOUR, 20 * DAY, 200 * DAY]))
    def age_and_sweep(self, dt):
        self.clock.advance(dt)
        self.sweep(None)

    @rule(max_items=st.one_of(st.none(), st.integers(1, 20)))
    def sweep(self, max_items):
        pinned = {k: self._tier(m) for k, m in self.live.items() if m.pinned}
        report = self.store.sweep(max_items=max_items)
        assert report.errors == []
        if max_items is None:  # an unbounded sweep leaves nothing due (one caller, nothing changes meanwhile)
            assert report.remaining_due == 0, report
        self._sync_policy_deletes()
        for k, tier in pinned.items():
            assert k in self.live and self._tier(self.live[k]) == tier, f"pinned {k} moved in a sweep"

    @rule(
        ns=namespaces,
        mode=st.sampled_from(["ids", "where", "text"]),
        word=st.sampled_from(WORDS),
        mtype=st.sampled_from(TYPES),
        limit=st.one_of(st.none(), st.integers(1, 5)),
    )
    def restore(self, ns, mode, word, mtype, limit):
        cold = {m.id: m for m in self.live.values() if m.ns == ns and self._tier(m) == "cold"}
        if mode == "ids":
            want = sorted(cold)[:3] + [m.id for m in self.live.values() if m.ns == ns and m.id not in cold][:1]
            if not want:
                return
            got = self.store.restore(ns, ids=want)
            assert sorted(got) == sorted(i for i in want if i in cold)
        else:
            if mode == "where":
                match = {i for i, m in cold.items() if m.memory_type == mtype}
                got = self.store.restore(ns, where={"memory_type": mtype}, limit=limit)
            else:
                match = {i for i, m in cold.items() if word in m.content.split()}
                got = self.store.restore(ns, text=word, limit=limit)
            assert len(got) == len(set(got)) and set(got) <= match
            assert len(got) == (len(match) if limit is None else min(limit, len(match)))
        for i in got:
            m = self.store.get(ns, i)
            assert m.tier == "hot" and m.embedding.tobytes() == self.live[(ns, i)].emb

    @rule()
    def reopen(self):
        self.store.close()
        self.store = TierStore.open(self.dir / "s", clock=self.clock)

    # -- bad input: the documented exception, and nothing changes ------------------------------

    @rule(n=picks, which=st.integers(0, 17))
    def bad_input(self, n, which):
        store = self.store
        m = self._pick(n)
        ns = m.ns if m is not None else "n0"
        good = {"content": "c", "embedding": np.ones(DIM, np.float32)}
        before = self._state()
        access_before = {k: x.access for k, x in self.live.items()}
        cases = [
            (DimensionMismatchError, lambda: store.add(ns, "c", np.ones(DIM + 1))),
            (InvalidVectorError, lambda: store.add(ns, "c", [math.nan] + [1.0] * (DIM - 1))),
            (InvalidVectorError, lambda: store.add(ns, "c", np.zeros(DIM))),
            (InvalidConfidenceError, lambda: store.add(ns, "c", np.ones(DIM), confidence=2)),
            (UnknownMemoryTypeError, lambda: store.add(ns, "c", np.ones(DIM), memory_type="gossip")),
            (InvalidNamespaceError, lambda: store.add("../x", "c", np.ones(DIM))),
            (InvalidNamespaceError, lambda: store.add("a/b", "c", np.ones(DIM))),
            (InvalidConfidenceError, lambda: store.add_batch(ns, [good, {**good, "confidence": -0.5}])),
            (DimensionMismatchError, lambda: store.search(ns, np.ones(DIM - 1))),
            (InvalidVectorError, lambda: store.search(ns, [math.inf] * DIM)),
            (MemoryNotFoundError, lambda: store.touch(ns, ([m.id] if m else []) + ["no-such-id"])),
            (MemoryNotFoundError, lambda: store.feedback(ns, "no-such-id", positive=True)),
            (InvalidInputError, lambda: store.feedback(ns, m.id if m else "x", positive=True, strength=0)),
            (MemoryNotFoundError, lambda: store.pin(ns, "no-such-id")),
            (MemoryNotFoundError, lambda: store.restore(ns, ids=["no-such-id"])),
            (InvalidInputError, lambda: store.restore(ns)),
            (InvalidNamespaceError, lambda: store.get("..", "x")),
            (InvalidInputError, lambda: store.add_batch(ns, [good, {**good, "colour": "red"}])),
        ]
        exc, call = cases[which]
        with pytest.raises(exc):
            call()
        assert store.delete(ns, "no-such-id") is False
        assert store.get(ns, "no-such-id") is None
        assert self._state() == before
        assert {k: x.access for k, x in self.live.items()} == access_before

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def every_memory_is_where_the_model_says(self):
        store = self.store
        count = store.engine.catalog.query_one("SELECT count(*) FROM memories")[0]
        assert count == len(self.live)
        for (ns, mid), m in self.live.items():
            got = store.get(ns, mid)
            assert got is not None, f"{ns}/{mid} was lost"
            assert got.namespace == ns and got.id == mid and got.content == m.content
            assert got.memory_type == m.memory_type and got.pinned == m.pinned
            assert got.access_count == m.access, f"{ns}/{mid}: access count {got.access_count}, model {m.access}"
            assert 0.0 <= got.confidence <= 1.0
            if got.tier == "cold":
                assert got.embedding is None
            else:
                assert got.embedding.tobytes() == m.emb
        for ns, mid in self.gone:
            if (ns, mid) not in self.live:
                assert store.get(ns, mid) is None

    @invariant()
    def every_memory_the_migrator_would_act_on_is_due(self):
        """A sweep reads only the due index: a memory the policy would demote,
        archive or delete now must be in it (due_at <= now), or no sweep ever
        looks at it again (negative feedback once made such memories immortal)."""
        store = self.store
        store.flush()
        now = self.clock.now()
        rows = store.engine.catalog.select_rows("ORDER BY m.rid")
        if not rows:
            return
        actions = store.engine.migrator.classify_rows(rows, now)
        for r, a in zip(rows, actions.tolist()):
            if a != 0:
                assert r.due_at <= now, f"{r.ns}/{r.id}: action {a} now, but due at {r.due_at}"


StoreMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
TestStoreMachine = StoreMachine.TestCase

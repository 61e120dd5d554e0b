"""tierstore.storage.lru.LRU against a plain list-based model of the same rules."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tierstore.storage.lru import LRU

KEYS = st.integers(0, 7)
VALUES = st.text(max_size=6)  # weight: len, so 0 to 6


class Model:
    """The rules written out the slow way: a list of (key, value), least recent first."""

    def __init__(self, max_count: int | None, max_weight: int | None, keep_oversize: bool) -> None:
        self.entries: list[tuple[int, str]] = []
        self.max_count = max_count
        self.max_weight = max_weight
        self.keep_oversize = keep_oversize
        self.evicted: list[tuple[int, str]] = []

    def index(self, key: int) -> int | None:
        return next((i for i, (k, _) in enumerate(self.entries) if k == key), None)

    def get(self, key: int) -> str | None:
        i = self.index(key)
        if i is None:
            return None
        entry = self.entries.pop(i)
        self.entries.append(entry)
        return entry[1]

    def put(self, key: int, value: str, touch: bool) -> None:
        if self.max_weight is not None and len(value) > self.max_weight and not self.keep_oversize:
            return
        i = self.index(key)
        if i is not None and not touch:
            self.entries[i] = (key, value)
        else:
            if i is not None:
                del self.entries[i]
            self.entries.append((key, value))
        if self.max_count is not None:
            while len(self.entries) > self.max_count:
                self.evicted.append(self.entries.pop(0))
        if self.max_weight is not None:
            while sum(len(v) for _, v in self.entries) > self.max_weight and len(self.entries) > 1:
                self.evicted.append(self.entries.pop(0))

    def pop(self, key: int) -> str | None:
        i = self.index(key)
        return None if i is None else self.entries.pop(i)[1]


class LRUMachine(RuleBasedStateMachine):
    @initialize(
        max_count=st.one_of(st.none(), st.integers(0, 5)),
        max_weight=st.one_of(st.none(), st.integers(0, 12)),
        keep_oversize=st.booleans(),
    )
    def setup(self, max_count: int | None, max_weight: int | None, keep_oversize: bool) -> None:
        self.evicted: list[tuple[int, str]] = []
        weight = None if max_weight is None else len
        self.lru: LRU[int, str] = LRU(
            max_count,
            max_weight=max_weight,
            weight=weight,
            keep_oversize=keep_oversize,
            on_evict=lambda k, v: self.evicted.append((k, v)),
        )
        self.model = Model(max_count, max_weight, keep_oversize)

    @rule(key=KEYS)
    def get(self, key: int) -> None:
        assert self.lru.get(key) == self.model.get(key)

    @rule(keys=st.lists(KEYS, max_size=5))
    def get_many(self, keys: list[int]) -> None:
        assert self.lru.get_many(keys) == [self.model.get(k) for k in keys]

    @rule(key=KEYS)
    def peek(self, key: int) -> None:
        i = self.model.index(key)
        assert self.lru.peek(key, "absent") == ("absent" if i is None else self.model.entries[i][1])
        assert (key in self.lru) == (i is not None)

    @rule(key=KEYS, value=VALUES, touch=st.booleans())
    def put(self, key: int, value: str, touch: bool) -> None:
        self.lru.put(key, value, touch=touch)
        self.model.put(key, value, touch)

    @rule(items=st.lists(st.tuples(KEYS, VALUES), max_size=5), touch=st.booleans())
    def put_many(self, items: list[tuple[int, str]], touch: bool) -> None:
        self.lru.put_many([k for k, _ in items], [v for _, v in items], touch=touch)
        for k, v in items:
            self.model.put(k, v, touch)

    @rule(key=KEYS)
    def pop(self, key: int) -> None:
        assert self.lru.pop(key) == self.model.pop(key)

    @precondition(lambda self: self.model.entries)
    @rule()
    def popitem(self) -> None:
        assert self.lru.popitem() == self.model.entries.pop(0)

    @rule()
    def clear(self) -> None:
        self.lru.clear()
        self.model.entries.clear()

    @invariant()
    def same_entries_in_the_same_order(self) -> None:
        assert self.lru.items() == self.model.entries
        assert list(self.lru) == [k for k, _ in self.model.entries]
        assert len(self.lru) == len(self.model.entries)
        expect_weight = 0 if self.model.max_weight is None else sum(len(v) for _, v in self.model.entries)
        assert self.lru.weight == expect_weight
        assert self.evicted == self.model.evicted


LRUMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_lru_matches_the_model = LRUMachine.TestCase


def test_least_recently_used_goes_first():
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a is now the most recent
    lru.put("c", 3)
    assert lru.items() == [("a", 1), ("c", 3)]
    lru.peek("a")  # a peek does not make it recent
    lru.put("d", 4)
    assert lru.items() == [("c", 3), ("d", 4)]


def test_a_zero_count_keeps_nothing_and_reports_each_eviction():
    out: list[tuple[str, int]] = []
    lru: LRU[str, int] = LRU(0, on_evict=lambda k, v: out.append((k, v)))
    lru.put("a", 1)
    assert len(lru) == 0 and out == [("a", 1)]


def test_an_entry_heavier_than_the_bound_stays_alone_until_the_next_put():
    lru: LRU[str, bytes] = LRU(max_weight=4, weight=len)
    lru.put("small", b"ab")
    lru.put("big", b"abcdefgh")
    assert lru.items() == [("big", b"abcdefgh")] and lru.weight == 8
    lru.put("next", b"a")
    assert lru.items() == [("next", b"a")] and lru.weight == 1


def test_an_oversize_value_can_be_refused_instead():
    lru: LRU[str, bytes] = LRU(max_weight=4, weight=len, keep_oversize=False)
    lru.put("small", b"ab")
    lru.put("small", b"abcdefgh")  # refused: the old value stays
    lru.put("big", b"abcdefgh")
    assert lru.items() == [("small", b"ab")] and lru.weight == 2


def test_replacing_a_value_reweighs_it():
    lru: LRU[str, bytes] = LRU(max_weight=10, weight=len)
    lru.put("a", b"12345")
    lru.put("a", b"12")
    assert lru.weight == 2
    assert lru.pop("a") == b"12" and lru.weight == 0
    assert lru.pop("a", "gone") == "gone"


def test_pop_popitem_and_clear_do_not_call_on_evict():
    out: list[tuple[str, int]] = []
    lru: LRU[str, int] = LRU(3, on_evict=lambda k, v: out.append((k, v)))
    for i, k in enumerate("abc"):
        lru.put(k, i)
    assert lru.pop("b") == 1
    assert lru.popitem() == ("a", 0)
    lru.clear()
    assert out == [] and len(lru) == 0
    with pytest.raises(KeyError):
        lru.popitem()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_count": -1},
        {"max_count": True},
        {"max_count": 1.5},
        {"max_weight": -1, "weight": len},
        {"max_weight": False, "weight": len},
        {"max_weight": 4},  # no weight function
        {"weight": len},  # no bound for it
    ],
)
def test_bad_bounds_are_refused(kwargs):
    with pytest.raises(ValueError):
        LRU(**kwargs)

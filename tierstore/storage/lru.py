"""A bounded least-recently-used map, shared by the package's in-memory caches.

Bounds: at most ``max_count`` entries, and (given a ``weight`` function) a
total weight of at most ``max_weight``. The count bound is strict (0 keeps
nothing); the weight bound never evicts the last entry, so one entry heavier
than the bound stays until the next put (unless ``keep_oversize`` is False:
then such a put is ignored). Least recently used entries go first; a
:meth:`LRU.get` or a :meth:`LRU.put` makes its key the most recent (a put with
``touch=False`` leaves a present key where it is).

Not thread-safe: every user calls it under its own lock, because each needs
more than one call to be atomic (look up, load, then store; reference counts;
invalidation stamps). An internal lock would be a second one taken for nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_MISSING: Any = object()  # Any: compared by identity, never used as a V


class LRU(Generic[K, V]):
    """Entries by key, least recently used evicted first (see the module docstring).

    ``max_count``: most entries (None: no count bound). ``max_weight``: most
    total weight (None: no weight bound), the weight of a value being
    ``weight(value)`` (a non-negative int in the caller's unit, e.g. bytes).
    ``keep_oversize`` False: a put of a value heavier than ``max_weight`` is
    ignored (the key keeps any value it had) rather than evicting every other
    entry and staying alone.
    ``on_evict(key, value)`` is called for each entry a bound evicts (not for
    :meth:`pop`, :meth:`popitem` or :meth:`clear`, whose caller has the value).
    """

    __slots__ = ("_d", "_max_count", "_max_weight", "_weight", "_total", "_keep_oversize", "_on_evict")

    def __init__(
        self,
        max_count: int | None = None,
        *,
        max_weight: int | None = None,
        weight: Callable[[V], int] | None = None,
        keep_oversize: bool = True,
        on_evict: Callable[[K, V], None] | None = None,
    ) -> None:
        for name, bound in (("max_count", max_count), ("max_weight", max_weight)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
                raise ValueError(f"{name} must be None or a non-negative integer, got {bound!r}")
        if (max_weight is None) != (weight is None):
            raise ValueError("max_weight and weight go together")
        self._d: OrderedDict[K, V] = OrderedDict()
        self._max_count = max_count
        self._max_weight = max_weight
        self._weight = weight
        self._total = 0  # sum of weight(v) over the entries; 0 without a weight function
        self._keep_oversize = keep_oversize
        self._on_evict = on_evict

    @property
    def weight(self) -> int:
        """Total weight of the entries (0 without a weight function)."""
        return self._total

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is cached; does not make it recent."""
        return key in self._d

    def __iter__(self) -> Iterator[K]:
        return iter(self._d)

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key``, now the most recent; ``default`` if absent."""
        # a hit is the fast path (two dict calls); a miss raises, but every
        # cache here follows a miss with a read that costs far more
        try:
            self._d.move_to_end(key)
        except KeyError:
            return default
        return self._d[key]

    def get_many(self, keys: Iterable[K], default: V | None = None) -> list[V | None]:
        """:meth:`get` of each key, in order (one call: the per-key cost stays that of the dict)."""
        d = self._d
        lookup, touch = d.get, d.move_to_end
        out: list[V | None] = []
        for key in keys:
            value = lookup(key, _MISSING)
            if value is _MISSING:
                out.append(default)
            else:
                touch(key)
                out.append(value)
        return out

    def peek(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key`` without making it recent; ``default`` if absent."""
        return self._d.get(key, default)

    def put(self, key: K, value: V, *, touch: bool = True) -> None:
        """Store ``value`` under ``key``, then evict down to the bounds.

        ``touch`` False: a key already present keeps its place in the order
        (only its value changes), as a plain dict assignment does; a new key is
        the most recent either way."""
        self.put_many((key,), (value,), touch=touch)

    def put_many(self, keys: Iterable[K], values: Iterable[V], *, touch: bool = True) -> None:
        """:meth:`put` of each key with its value (paired as ``zip`` pairs
        them), in order, each followed by its evictions. One call, everything
        inlined: the per-item cost stays near that of the dict."""
        d = self._d
        weigh = self._weight
        max_count = self._max_count
        max_weight = self._max_weight
        keep_oversize = self._keep_oversize
        on_evict = self._on_evict
        take = d.pop if touch else d.get  # a popped key goes back in last: the most recent
        drop = d.popitem
        total = self._total
        try:
            for key, value in zip(keys, values):
                if weigh is not None and max_weight is not None:  # the two go together (checked at init)
                    w = weigh(value)
                    if w > max_weight and not keep_oversize:
                        continue
                    old = take(key, _MISSING)
                    d[key] = value
                    total += w if old is _MISSING else w - weigh(old)
                else:
                    take(key, _MISSING)
                    d[key] = value
                if max_count is not None:
                    while len(d) > max_count:
                        k, v = drop(last=False)
                        if weigh is not None:
                            total -= weigh(v)
                        if on_evict is not None:
                            self._total = total  # right while the callback runs
                            on_evict(k, v)
                if max_weight is not None and weigh is not None:
                    while total > max_weight and len(d) > 1:
                        k, v = drop(last=False)
                        total -= weigh(v)
                        if on_evict is not None:
                            self._total = total
                            on_evict(k, v)
        finally:
            self._total = total

    def pop(self, key: K, default: V | None = None) -> V | None:
        """Remove ``key`` and return its value; ``default`` if absent. No ``on_evict``."""
        value = self._d.pop(key, _MISSING)
        if value is _MISSING:
            return default
        if self._weight is not None:
            self._total -= self._weight(value)
        return value

    def popitem(self) -> tuple[K, V]:
        """Remove and return the least recently used ``(key, value)``; KeyError if empty. No ``on_evict``."""
        key, value = self._d.popitem(last=False)
        if self._weight is not None:
            self._total -= self._weight(value)
        return key, value

    def items(self) -> list[tuple[K, V]]:
        """A copy of the entries, least recently used first (does not make them recent)."""
        return list(self._d.items())

    def clear(self) -> None:
        """Remove every entry. No ``on_evict``."""
        self._d.clear()
        self._total = 0

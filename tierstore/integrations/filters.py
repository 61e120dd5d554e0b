"""Search filters over a JSON object — a LangGraph item's value, a LangChain
document's metadata: equality (nested dicts and lists compared as JSON) and
the operators ``$eq $ne $gt $gte $lt $lte``, as LangGraph's stores read them.

A filter key names a top-level key of the value (any string: ``"my-key2"``,
``"123abc"``), or, when the value has no such key and the filter key holds
dots, a path into nested dicts: ``{"user.access-level": "x"}`` matches
``{"user": {"access-level": "x"}}``, as LangGraph's SQLite store reads it
(its InMemoryStore compares top-level keys only, so a key present as it is
is read as it is)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierstore.errors import InvalidInputError

OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def check_filter(flt: Any) -> Mapping[str, Any] | None:
    """``None`` or a mapping whose operators are known."""
    if flt is None:
        return None
    if not isinstance(flt, Mapping):
        raise InvalidInputError(f"a search filter is a dict, got {type(flt).__name__}")
    _check_ops(flt)
    return flt


def _check_ops(value: Any) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and k.startswith("$") and k not in OPERATORS:
                raise InvalidInputError(f"unsupported filter operator {k!r}; supported: {', '.join(OPERATORS)}")
            _check_ops(v)


def matches(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """Whether an item's ``value`` passes ``flt`` (every key must match)."""
    return not flt or all(_compare(lookup(value, k), f) for k, f in flt.items())


def lookup(value: Mapping[str, Any], key: Any) -> Any:
    """What filter key ``key`` names in ``value`` (see the module doc); ``None`` if nothing."""
    if key in value or not isinstance(key, str) or "." not in key:
        return value.get(key)
    node: Any = value
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _compare(item: Any, f: Any) -> bool:
    if isinstance(f, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in f):
            return all(_apply(item, op, arg) for op, arg in f.items())
        return isinstance(item, Mapping) and all(_compare(item.get(k), v) for k, v in f.items())
    if isinstance(f, (list, tuple)):
        return isinstance(item, (list, tuple)) and len(item) == len(f) and all(_compare(i, v) for i, v in zip(item, f))
    return item == f


def _apply(item: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return item == arg
    if op == "$ne":
        return item != arg
    try:  # ordering compares numbers; a missing or non-numeric value does not match
        a, b = float(item), float(arg)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    return a <= b

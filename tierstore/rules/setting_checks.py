"""Checks of settings fields (``Settings``, ``HotSettings``, ``WarmSettings``).

Each raises :class:`tierstore.errors.InvalidInputError` naming the field as
``Class.field`` and its allowed range, so a bad setting is refused before a
store is opened or anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from tierstore.errors import InvalidInputError
from tierstore.rules.validation import shown

INT_MAX = 2**63 - 1  # SQLite binds 64-bit integers; hnswlib takes its parameters as a C size_t
# hnswlib's graph degree M: 1 makes its level multiplier 1/log(M) infinite; above 10 000 it caps M with a warning
HNSW_M_MIN, HNSW_M_MAX = 2, 10_000


def check_hnsw(owner: str, m: Any, ef_construction: Any, ef_search: Any) -> None:
    """The hnswlib parameters of a tier's settings (``hnsw_m``, ``hnsw_ef_construction``, ``hnsw_ef_search``)."""
    check_int(owner, "hnsw_m", m, HNSW_M_MIN, HNSW_M_MAX)
    check_int(owner, "hnsw_ef_construction", ef_construction, 1)
    check_int(owner, "hnsw_ef_search", ef_search, 1)


def check_int(owner: str, name: str, value: Any, lo: int, hi: int = INT_MAX) -> None:
    """``value`` is an int (not a bool) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidInputError(f"{owner}.{name} must be an integer in [{lo}, {hi}], got {shown(value)}")


def check_number(
    owner: str, name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False, unit: str = ""
) -> None:
    """``value`` is a finite int or float (not a bool) in ``[lo, hi]``, or
    ``(lo, hi]`` with ``lo_open``; ``unit`` (e.g. "seconds") is named in the message."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and (lo < value if lo_open else lo <= value)
        and value <= hi
    )
    if not ok:
        interval = f"{'(' if lo_open else '['}{lo:.15g}, {hi:.15g}]"
        raise InvalidInputError(
            f"{owner}.{name} must be a finite number in {interval}{' ' + unit if unit else ''}, got {shown(value)}"
        )


def check_bool(owner: str, name: str, value: Any) -> None:
    """``value`` is True or False (not 0 or 1)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{owner}.{name} must be True or False, got {shown(value)}")


def check_choice(owner: str, name: str, value: Any, choices: Collection[str]) -> None:
    """``value`` is a str equal, ignoring case, to one of the upper-case ``choices``."""
    if not isinstance(value, str) or value.upper() not in choices:
        raise InvalidInputError(f"{owner}.{name} must be one of {', '.join(choices)} (any case), got {shown(value)}")


def check_instance(owner: str, name: str, value: Any, cls: type) -> None:
    """``value`` is a ``cls``."""
    if not isinstance(value, cls):
        raise InvalidInputError(f"{owner}.{name} must be a {cls.__name__}, got {type(value).__name__}")

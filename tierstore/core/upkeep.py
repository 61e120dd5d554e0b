"""Store-wide upkeep through the migrator: sweeps (and their dry run), archive
compaction, restore, the cold catalog rebuilt from the object store, and the
background sweeps. :class:`tierstore.TierStore` delegates here; each function
checks its arguments before it takes the sweep lock."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tierstore import embedding as _embedding
from tierstore.core import opening
from tierstore.core.engine import Engine
from tierstore.core.trace import encode_vector
from tierstore.errors import InvalidInputError
from tierstore.records import SweepReport
from tierstore.rules.validation import check_id_list, check_namespace, check_positive_int, check_seconds, check_vector
from tierstore.tiers.background import check_sweep_args


def sweep(
    eng: Engine, max_items: int | None, time_budget_s: float | None, progress: bool | None, dry_run: bool
) -> SweepReport:
    """See :meth:`TierStore.sweep`."""
    eng.check_open()
    if max_items is not None:
        max_items = check_positive_int(max_items, "max_items")
    time_budget_s = check_seconds(time_budget_s, "time_budget_s", optional=True)
    if not isinstance(dry_run, bool):
        raise InvalidInputError(f"dry_run must be True or False, got {dry_run!r}")
    if dry_run:
        return eng.migrator.preview(max_items, time_budget_s)
    return eng.sweep(max_items, time_budget_s, progress)


def compact_cold(eng: Engine, progress: bool | None) -> int:
    """See :meth:`TierStore.compact_cold`."""
    eng.check_writable()
    with eng.sweep_lock:
        try:
            return eng.migrator.compact_archives(eng.store_time.now(), everything=True, progress=progress, strict=True)
        finally:
            eng.migrator.settle_tombstones()


def restore(
    eng: Engine,
    ns: str,
    *,
    ids: Iterable[str] | None,
    where: Mapping[str, Any] | None,
    text: str | None,
    query: Any,
    k: int | None,
    limit: int | None,
    progress: bool | None,
) -> list[str]:
    """See :meth:`TierStore.restore`: every argument checked, then the
    migrator's restore under the sweep lock, then the trace line."""
    eng.check_writable()
    check_namespace(ns)
    if ids is None and where is None and text is None and query is None:
        raise InvalidInputError("restore needs ids, where, text or query")
    id_list = None if ids is None else check_id_list(ids)
    if limit is not None:
        limit = check_positive_int(limit, "limit")
    if k is not None:
        if query is None:
            raise InvalidInputError("restore k= goes with query= (restore by meaning); use limit= otherwise")
        k = check_positive_int(k, "k")
    q = None if query is None else check_vector(_embedding.embed_query(eng.embedder, query), eng.dim, "query")
    if q is not None:
        limit = min(k or 5, limit) if limit is not None else (k or 5)
    if where is not None and not isinstance(where, Mapping):
        raise InvalidInputError("restore where must be a dict")
    where_dict = None if where is None else dict(where)
    with eng.sweep_lock:
        restored: list[str] = eng.migrator.restore(
            ns, ids=id_list, where=where_dict, text=text, query=q, limit=limit, progress=progress
        )
    if eng.trace is not None:
        eng.trace.write(
            "restore",
            eng.store_time.now(),
            ns=ns,
            ids=id_list,
            where=where_dict,
            text=text,
            query=None if q is None else encode_vector(q),
            limit=limit,
            restored=restored,
        )
    return restored


def rebuild_catalog(eng: Engine, progress: bool | None) -> dict[str, int]:
    """See :meth:`TierStore.rebuild_catalog`."""
    eng.check_writable()
    with eng.sweep_lock:
        counts: dict[str, int] = eng.migrator.rebuild_cold_catalog(progress)
        if counts["marks"]:  # a restored mark on a memory archived before it was damped gets its TTL of 0
            opening.repair_supersessions(eng)
        return counts


def start_migrator(eng: Engine, interval_s: float, max_items: int, time_budget_s: float) -> None:
    """See :meth:`TierStore.start_migrator`."""
    eng.check_writable()
    interval_s, max_items, time_budget_s = check_sweep_args(interval_s, max_items, time_budget_s)
    eng.require_trusted_clock()
    eng.migrator.start(interval_s, max_items, time_budget_s)

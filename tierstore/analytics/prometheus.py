"""Prometheus metrics of a store.

:func:`metrics_text` writes the Prometheus text exposition format (0.0.4)
itself: the format is a few lines of ``# HELP``/``# TYPE`` and ``name{labels}
value``, so writing it needs no dependency, gives the same bytes with or
without one, and touches no global registry. Serve it from any HTTP handler.

With the optional extra ``prometheus``
:class:`TierStoreCollector` exposes the same families to a
``prometheus_client`` registry, for applications that already serve their
own ``/metrics`` with it.

Families (no namespace label: namespaces are tenants, and a label per tenant
would grow without bound):

- ``tierstore_events_total{kind}`` (counter): lifecycle events logged, folded
  (compacted) ones included, so it never goes down;
- ``tierstore_accesses_total`` (counter): accesses in the access log;
- ``tierstore_memories{tier,type}`` (gauge), ``tierstore_due_now``,
  ``tierstore_pinned``, ``tierstore_namespaces`` (gauges): ``stats()``'s numbers;
- ``tierstore_memory_bytes{part}`` (gauge): what the store holds in memory by
  part (``stats().memory_bytes``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tierstore.analytics.lifecycle import EVENT_KINDS, folded_state
from tierstore.core.engine import engine_of
from tierstore.core.reads import memory_bytes
from tierstore.errors import MissingDependencyError
from tierstore.optional import install_hint
from tierstore.records import TIER_NAMES


@dataclass
class Family:
    """One metric family: ``name`` without the ``_total`` suffix of counters."""

    name: str
    kind: str  # "counter" | "gauge"
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.kind == "counter" else self.name


def families(store: Any) -> list[Family]:
    """The metric families of ``store`` now (flushes pending accesses first)."""
    # The gauges are stats()'s numbers, read with the same queries here rather
    # than through stats(), which may grow costlier (lifecycle metrics) than a
    # scrape should be.
    eng = engine_of(store)
    eng.flush()
    q = eng.catalog.query
    by_type: dict[str, dict[str, int]] = {}
    for mtype, tier, n in q("SELECT memory_type, tier, count(*) FROM memories GROUP BY memory_type, tier"):
        by_type.setdefault(mtype, {})[TIER_NAMES[tier]] = int(n)
    pinned = int(q("SELECT count(*) FROM memories WHERE pinned = 1")[0][0])
    namespaces = int(q("SELECT count(DISTINCT ns) FROM memories")[0][0])
    due_now = eng.catalog.count_due(eng.now())
    counts = {k: 0 for k in EVENT_KINDS}
    for kind, n in eng.catalog.query("SELECT kind, count(*) FROM events GROUP BY kind"):
        counts[kind] = counts.get(kind, 0) + int(n)
    for kind, n in folded_state(eng)["events"].items():
        counts[kind] = counts.get(kind, 0) + int(n)
    row = eng.catalog.query_one("SELECT coalesce(sum(count), 0) FROM access_log")
    accesses = int(row[0]) if row else 0
    events = Family(
        "tierstore_events",
        "counter",
        "Lifecycle events logged, by kind (compacted ones included).",
        [({"kind": k}, n) for k, n in counts.items()],
    )
    acc = Family(
        "tierstore_accesses",
        "counter",
        "Accesses counted (touches, recorded search hits, promotions).",
        [({}, accesses)],
    )
    # Every type of the policy, with zeros: a series should not vanish when its last memory goes.
    types = sorted(set(eng.policy.type_names) | set(by_type))
    mem = Family(
        "tierstore_memories",
        "gauge",
        "Memories per tier and type.",
        [
            ({"tier": tier, "type": mtype}, by_type.get(mtype, {}).get(tier, 0))
            for mtype in types
            for tier in TIER_NAMES
        ],
    )
    return [
        events,
        acc,
        mem,
        Family(
            "tierstore_due_now",
            "gauge",
            "Memories whose due time has passed: work for the next sweep.",
            [({}, due_now)],
        ),
        Family("tierstore_pinned", "gauge", "Pinned memories (exempt from expiry).", [({}, pinned)]),
        Family("tierstore_namespaces", "gauge", "Namespaces holding memories.", [({}, namespaces)]),
        Family(
            "tierstore_memory_bytes",
            "gauge",
            "Bytes the store holds in memory, by part (the caches bounded by their settings).",
            [({"part": part}, n) for part, n in memory_bytes(eng).items()],
        ),
        Family(
            "tierstore_cold_search_errors",
            "counter",
            "Archive objects a search that reached the cold tier could not read (it served the rest).",
            [({}, eng.cold_search_errors)],
        ),
    ]


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(x: float) -> str:
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 2**53):
        return str(int(x))
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


def render(fams: list[Family]) -> str:
    """Families as Prometheus text format 0.0.4."""
    out = []
    for f in fams:
        name = f.sample_name
        out.append(f"# HELP {name} {_escape_help(f.help)}")
        out.append(f"# TYPE {name} {f.kind}")
        for labels, value in f.samples:
            lab = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items())
            out.append(f"{name}{{{lab}}} {_value(value)}" if lab else f"{name} {_value(value)}")
    return "\n".join(out) + "\n"


def metrics_text(store: Any) -> str:
    """The store's metrics in the Prometheus text exposition format (0.0.4,
    ``Content-Type: text/plain; version=0.0.4``)."""
    eng = engine_of(store)
    eng.check_open()
    return render(families(eng))


class TierStoreCollector:
    """A ``prometheus_client`` collector of the same families:
    ``REGISTRY.register(TierStoreCollector(store))``. Needs the extra
    ``prometheus``; every scrape reads the catalog once."""

    def __init__(self, store: Any) -> None:
        try:
            from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        except ImportError:
            raise MissingDependencyError(
                f"TierStoreCollector needs prometheus-client: {install_hint('prometheus')}"
            ) from None
        self._store = store
        self._kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}

    def collect(self) -> Iterator[Any]:
        for f in families(self._store):
            names = list(f.samples[0][0]) if f.samples else []
            fam = self._kinds[f.kind](f.name, f.help, labels=names)
            for labels, value in f.samples:
                fam.add_metric([labels[n] for n in names], value)
            yield fam

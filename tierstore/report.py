"""``tierstore report``: an HTML page of lifecycle plots.

:func:`write_report` writes ``index.html`` and PNG plots into a folder:

- ``decay.png``: each type's weight curve from the policy,
  ``W(t) = W0·2^(-t/h)`` without use and with an access every ``boost_every``
  (each access adds the type's boost), against the demote / archive / delete
  thresholds and the TTL;
- ``survival.png``: Kaplan–Meier survival per type (time to archive or delete);
- ``tiers.png``: memories per tier at the end of each day;
- ``reactivation.png``: per type, the share of demotions and archivings undone
  (promote or restore) within the window;
- ``access.png``: access counts of memories when they were archived or deleted.

matplotlib is an optional extra (``pip install tierstore[report]``), imported
only here and drawn with the Agg canvas: no display, no pyplot global state.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import InvalidInputError, MissingDependencyError
from .lifecycle import DAY, format_duration, lifecycle_metrics

if TYPE_CHECKING:
    from .store import TierStore

REQUIRED = ("survival", "access_at_end", "reactivation", "value", "tiers", "policy", "events")
TIER_COLOURS = {"hot": "#d62728", "warm": "#ff7f0e", "cold": "#1f77b4"}


def _mpl() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError("tierstore report needs matplotlib: pip install tierstore[report]") from None
    return Figure, FigureCanvasAgg


def write_report(store_or_metrics: "TierStore | Mapping[str, Any]", out_dir: str | os.PathLike[str], *,
                 boost_every_s: float | None = None, reactivation_days: float = 7.0) -> Path:
    """Write ``out_dir/index.html`` and its PNG plots; returns the HTML path.

    store_or_metrics: an open store (its metrics are computed now) or a dict
    from :func:`tierstore.lifecycle.lifecycle_metrics`. boost_every_s: the
    access interval (seconds) of the decay plot's "with use" curves; default,
    per type, one access per half-life. reactivation_days: the window, when a
    store is given.
    """
    Figure, Canvas = _mpl()
    if isinstance(store_or_metrics, Mapping):
        metrics = store_or_metrics
        missing = [k for k in REQUIRED if k not in metrics]
        if missing:
            raise InvalidInputError(f"write_report: not a lifecycle metrics dict (missing {', '.join(missing)})")
        title = "tierstore lifecycle report"
    else:
        metrics = lifecycle_metrics(store_or_metrics, reactivation_days=reactivation_days)
        title = f"tierstore lifecycle report: {store_or_metrics.path}"
    if boost_every_s is not None and not (isinstance(boost_every_s, (int, float)) and boost_every_s > 0
                                          and math.isfinite(boost_every_s)):
        raise InvalidInputError(f"boost_every_s must be a positive number of seconds, got {boost_every_s!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def save(fig: Any, name: str) -> str:
        Canvas(fig)
        fig.savefig(out / name, dpi=100)
        return name

    images = {
        "decay": save(_decay_figure(Figure, metrics["policy"], boost_every_s), "decay.png"),
        "survival": save(_survival_figure(Figure, metrics["survival"]), "survival.png"),
        "tiers": save(_tiers_figure(Figure, metrics["tiers"]), "tiers.png"),
        "reactivation": save(_reactivation_figure(Figure, metrics["reactivation"]), "reactivation.png"),
        "access": save(_access_figure(Figure, metrics["access_at_end"]), "access.png"),
    }
    page = out / "index.html"
    page.write_text(_html(title, metrics, images, boost_every_s), encoding="utf-8")
    return page


# ---------------------------------------------------------------------------
# plots

def _unit(seconds: float) -> tuple[float, str]:
    if seconds <= 3 * 3600:
        return 60.0, "minutes"
    if seconds <= 3 * DAY:
        return 3600.0, "hours"
    return DAY, "days"


def weight_curve(w0: float, half_life: float, boost: float, every: float | None, ts: list[float]) -> list[float]:
    """Decayed weight at times ``ts`` (seconds, ascending) for a memory
    created at 0 with weight ``w0``, accessed at every multiple of ``every``
    (``None``: never); each access adds ``boost`` (the seed's formula)."""
    out = []
    w_ref, t_ref = w0, 0.0
    next_access = every if every else math.inf
    for t in ts:
        while next_access <= t:
            w_ref = w_ref * 2.0 ** (-(next_access - t_ref) / half_life) + boost
            t_ref = next_access
            next_access += every  # type: ignore[operator]
        out.append(w_ref * 2.0 ** (-(t - t_ref) / half_life))
    return out


def _decay_figure(Figure: Any, policy: Mapping[str, Any], boost_every_s: float | None) -> Any:
    types = policy["types"]
    th = policy["thresholds"]
    n = max(1, len(types))
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows), layout="constrained")
    fig.suptitle("Weight decay per type: W(t) = W0·2^(-t/h), unused and with regular use")
    for i, (name, t) in enumerate(types.items()):
        ax = fig.add_subplot(rows, cols, i + 1)
        h = float(t["half_life_s"])
        ttl = t["ttl_s"]
        every = boost_every_s or h
        horizon = max(6 * h, 1.5 * ttl if ttl else 0.0)
        scale, unit = _unit(horizon)
        ts = [horizon * k / 400 for k in range(401)]
        x = [v / scale for v in ts]
        ax.plot(x, weight_curve(t["initial_weight"], h, t["boost"], None, ts), label="unused", color="#444")
        ax.plot(x, weight_curve(t["initial_weight"], h, t["boost"], every, ts),
                label=f"used every {format_duration(every)}", color="#2ca02c")
        for key, style in (("demote", ":"), ("archive", "--"), ("delete", "-.")):
            if th[key] > 0:
                ax.axhline(th[key], linestyle=style, color="#888", linewidth=0.8, label=f"{key} {th[key]:g}")
        if ttl:
            ax.axvline(ttl / scale, color="#9467bd", linewidth=0.8, label=f"TTL {format_duration(ttl)}")
        ax.set_title(f"{name} (h = {format_duration(h)})", fontsize=10)
        ax.set_xlabel(unit, fontsize=8)
        ax.set_ylabel("weight", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6, loc="upper right")
    return fig


def _survival_figure(Figure: Any, survival: Mapping[str, Any]) -> Any:
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    by_type = survival["by_type"]
    longest = max((s["longest_s"] or 0.0 for s in by_type.values()), default=DAY) or DAY
    ends = [p[0] for s in by_type.values() for p in s["curve"][1:] if p[0] > 0]
    # Types live minutes to months: a log axis when the ends span orders of magnitude.
    log = bool(ends) and longest / min(ends) > 100
    scale, unit = (3600.0, "hours") if log else _unit(max(longest, 1.0))
    first = min(ends) / 2 if log else 0.0  # where a log axis starts the curves (t = 0 is off-axis)
    for name, s in by_type.items():
        curve = s["curve"]
        xs = [max(p[0], first) / scale for p in curve] + [max(s["longest_s"] or curve[-1][0], first) / scale]
        ys = [p[1] for p in curve] + [curve[-1][1]]
        line = ax.step(xs, ys, where="post", label=f"{name} (n={s['memories']}, {s['censored']} alive)")[0]
        if s["median_s"] is not None:
            ax.plot([max(s["median_s"], first) / scale], [0.5], "o", color=line.get_color(), markersize=4)
    if log:
        ax.set_xscale("log")
    ax.axhline(0.5, color="#bbb", linewidth=0.8, linestyle=":")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"{unit} since creation" + (" (log scale)" if log else ""))
    ax.set_ylabel("fraction not yet archived or deleted")
    ax.set_title("Survival per type (Kaplan–Meier; dots: median)")
    if by_type:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no memories yet", ha="center", transform=ax.transAxes)
    return fig


def _tiers_figure(Figure: Any, tiers: Mapping[str, Any]) -> Any:
    # Two panels: the cold tier grows for ever and would flatten hot and warm.
    fig = Figure(figsize=(7, 5), layout="constrained")
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    days = tiers["days"]
    top.set_title("Tier occupancy over time (rebuilt from the event log)")
    if days:
        x = [d - days[0] for d in days]
        for ax, names in ((top, ("hot", "warm")), (bottom, ("cold",))):
            for tier in names:
                ax.plot(x, tiers[tier], label=tier, color=TIER_COLOURS[tier], drawstyle="steps-post")
            ax.set_ylabel("memories")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=8, loc="upper left")
        start = _dt.datetime.fromtimestamp(days[0] * DAY, _dt.timezone.utc).strftime("%Y-%m-%d")
        bottom.set_xlabel(f"days since {start} (UTC), counts at the end of each day")
    else:
        top.text(0.5, 0.5, "no events yet", ha="center", transform=top.transAxes)
    return fig


def _reactivation_figure(Figure: Any, react: Mapping[str, Any]) -> Any:
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    names = list(react["by_type"])
    width = 0.38
    for j, (kind, label, colour) in enumerate((("demote", "demoted → promoted", TIER_COLOURS["warm"]),
                                                ("archive", "archived → restored", TIER_COLOURS["cold"]))):
        rates, notes = [], []
        for name in names:
            part = react["by_type"][name]["by_kind"][kind]
            rates.append(0.0 if part["rate"] is None else part["rate"])
            notes.append(f"{part['numerator']}/{part['denominator']}" if part["denominator"] else "")
        xs = [i + (j - 0.5) * width for i in range(len(names))]
        bars = ax.bar(xs, rates, width, label=label, color=colour)
        for b, note in zip(bars, notes):
            if note:
                ax.annotate(note, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom",
                            fontsize=7)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("share brought back to hot")
    rate = "n/a" if react["rate"] is None else f"{100 * react['rate']:.1f} %"
    ax.set_title(f"Reactivation within {react['window_days']:g} d (all: {rate}, "
                 f"{react['numerator']}/{react['denominator']})")
    if names:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "nothing demoted or archived yet", ha="center", transform=ax.transAxes)
    return fig


def _access_figure(Figure: Any, acc: Mapping[str, Any]) -> Any:
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    labels = [b["label"] for b in acc["buckets"]]
    ax.bar(labels, [b["count"] for b in acc["buckets"]], color="#7f7f7f")
    ax.set_xlabel("accesses when first archived or deleted")
    ax.set_ylabel("memories")
    mean = "n/a" if acc["mean"] is None else f"{acc['mean']:.2f}"
    ax.set_title(f"Access counts at the end of life (mean {mean}, n={acc['count']})")
    return fig


# ---------------------------------------------------------------------------
# page

def _table(head: list[str], rows: list[list[Any]]) -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _html(title: str, m: Mapping[str, Any], images: dict[str, str], boost_every_s: float | None) -> str:
    surv = m["survival"]["by_type"]
    surv_rows = [[t, s["memories"], s["ended"], s["censored"], s["archived"], s["deleted"],
                  format_duration(s["median_s"]) if s["median_s"] is not None else "n/a",
                  format_duration(s["p90_s"]) if s["p90_s"] is not None else "n/a"] for t, s in surv.items()]
    r = m["reactivation"]
    react_rows = [[k, v["numerator"], v["denominator"], _pct(v["rate"]), v["pending"],
                   format_duration(v["median_delay_s"]) if v["median_delay_s"] is not None else "n/a"]
                  for k, v in [("all", r), *(("after " + k, x) for k, x in r["by_kind"].items()),
                               *r["by_type"].items()]]
    v = m["value"]
    value_rows = [[t, x["memories"], x["rated"], x["retrievals"],
                   "n/a" if x["mean_value"] is None else f"{x['mean_value']:.2f}"] for t, x in v["by_type"].items()]
    top_rows = [[x["ns"], x["id"], x["memory_type"], x["retrievals"], f"{x['positive']}/{x['negative']}",
                 f"{x['value']:.2f}", x.get("content") or "(deleted)"] for x in v["top"]]
    events = m["events"]["by_kind"]
    pol = m["policy"]
    pol_rows = [[t, format_duration(p["ttl_s"]) if p["ttl_s"] else "never", format_duration(p["half_life_s"]),
                 p["boost"], p["initial_weight"], "yes" if p["refresh_on_read"] else "no"]
                for t, p in pol["types"].items()]
    every = "one access per half-life" if boost_every_s is None else f"one access every {format_duration(boost_every_s)}"
    cutoff = m.get("compaction", {}).get("cutoff")
    compaction = "" if cutoff is None else (
        f"<p>Events before {html.escape(_dt.datetime.fromtimestamp(cutoff, _dt.timezone.utc).isoformat())} were "
        "compacted (see docs/lifecycle.md for what that keeps).</p>")
    now = _dt.datetime.fromtimestamp(m.get("now", 0.0), _dt.timezone.utc).isoformat()
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 72em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; font-size: 0.9em; }}
td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>As of {html.escape(now)}. {m['events']['total']} lifecycle events:
{html.escape(', '.join(f'{k} {n}' for k, n in events.items() if n))}.</p>
{compaction}
<h2>Policy: weight decay per type</h2>
<p>Each type's weight without use and with {html.escape(every)}, against the migrator's thresholds
(a hot memory at or below <em>demote</em> moves to warm; at or below <em>archive</em>, to cold).
Half-lives shown are the type's; a memory's own is shorter when its confidence is low.</p>
{_table(["type", "TTL", "half-life", "boost", "initial weight", "TTL refreshes on read"], pol_rows)}
<img src="{images['decay']}" alt="weight decay per type">
<h2>Survival</h2>
<p>Time from creation to the first archive or delete. Memories still alive are censored (they count as at
risk until now), so the median is a Kaplan–Meier estimate; n/a: fewer than half (or 90 %) have ended.</p>
{_table(["type", "memories", "ended", "alive", "archived", "deleted", "median", "p90"], surv_rows)}
<img src="{images['survival']}" alt="survival per type">
<h2>Tier occupancy</h2>
<img src="{images['tiers']}" alt="tier occupancy over time">
<h2>Reactivation</h2>
<p>A demotion or archiving is reactivated when the memory is promoted or restored to hot within
{r['window_days']:g} days. Pending: the window is still open.</p>
{_table(["group", "reactivated", "of", "rate", "pending", "median delay"], react_rows)}
<img src="{images['reactivation']}" alt="reactivation">
<h2>Accesses at the end of life</h2>
<img src="{images['access']}" alt="access counts at archive or delete">
<h2>Memory value</h2>
<p>Value = retrievals × positive-feedback rate. {v['rated']} of {v['memories']} memories with accesses or
feedback have feedback (the others are unrated).</p>
{_table(["type", "memories", "rated", "retrievals", "mean value"], value_rows)}
{_table(["namespace", "id", "type", "retrievals", "feedback +/-", "value", "content"], top_rows)}
</body></html>
"""

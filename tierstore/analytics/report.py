"""``tierstore report``: an HTML page of lifecycle tables and plots.

:func:`write_report` writes ``index.html`` and PNG plots into a folder. Each
plot has a function that returns its matplotlib ``Figure`` (``None`` when
there is nothing to draw yet), so tests can read the axes:

- :func:`decay_figure`: every type's weight over time on one time axis,
  unused and with regular use, against the demote and archive thresholds;
  a ``×`` where the TTL archives the memory;
- :func:`survival_figure`: Kaplan–Meier survival per type (time to archive or
  delete), the x axis ending with the longest observed life;
- :func:`tiers_figure`: memories per tier at the end of each day, dated;
- :func:`reactivation_figure`: per type, the share of demotions and
  archivings undone (promote, restore, or reactivation of a used cold hit) within the window;
- :func:`access_figure`: access counts of memories when first archived or
  deleted.

A plot without data is replaced on the page by a sentence saying why
(:func:`no_data`), not drawn as empty axes.

matplotlib is an optional extra (``report``), imported
only here and drawn with the Agg canvas: no display, no pyplot global state.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tierstore.analytics.lifecycle import BACK_CAUSES, DAY, TIERS, lifecycle_metrics
from tierstore.errors import InvalidInputError, MissingDependencyError
from tierstore.optional import install_hint

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.typing import LineStyleType

    from tierstore.store import TierStore

REQUIRED = ("survival", "access_at_end", "reactivation", "value", "tiers", "policy", "events")
PLOTS = ("decay", "survival", "tiers", "reactivation", "access")
TIER_COLOURS = {"hot": "#d62728", "warm": "#ff7f0e", "cold": "#1f77b4"}
# matplotlib's tab10; types and tiers never share a plot, so their colours may repeat.
TYPE_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
WIDTH_IN = 10.0  # every figure is this wide, so the page reads as one column
DPI = 100
HOUR = 3600.0
TEETH = 6  # accesses drawn on the decay plot's "used" curves


def _mpl() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(f"tierstore report needs matplotlib: {install_hint('report')}") from None
    return Figure


# ---------------------------------------------------------------------------
# readable numbers


def when(t: float) -> str:
    """A POSIX time as ``2026-12-03 14:05 UTC``."""
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def day_label(day: int) -> str:
    """A POSIX day number as ``2026-12-03``."""
    return _dt.datetime.fromtimestamp(day * DAY, _dt.UTC).strftime("%Y-%m-%d")


def duration(seconds: float | None) -> str:
    """``"45 seconds"``, ``"20 minutes"``, ``"5.5 hours"``, ``"3.2 days"``, ``"2.7 years"``."""
    if seconds is None:
        return "n/a"
    s = float(seconds)
    for limit, size, unit in (
        (120, 1.0, "second"),
        (120 * 60, 60.0, "minute"),
        (48 * HOUR, HOUR, "hour"),
        (730 * DAY, DAY, "day"),
        (math.inf, 365 * DAY, "year"),
    ):
        if abs(s) < limit:
            x = s / size
            # one decimal below ten ("3.2 days"), whole numbers above ("23 days")
            text = f"{x:.1f}".removesuffix(".0") if abs(x) < 10 else f"{x:.0f}"
            return f"{text} {unit}" + ("" if text == "1" else "s")
    raise AssertionError("unreachable")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


# ---------------------------------------------------------------------------
# when there is nothing to draw


def no_data(plot: str, metrics: Mapping[str, Any]) -> str | None:
    """Why ``plot`` (one of :data:`PLOTS`) has nothing to show yet, as a
    sentence for the page; ``None`` when it has data. The figure functions
    return ``None`` exactly when this returns a sentence."""
    if plot == "decay":
        return None if metrics["policy"]["types"] else "The policy defines no memory types."
    if plot == "survival":
        s = metrics["survival"]["all"]
        if not s["memories"]:
            return "No data yet: no memory has been created."
        if not s["ended"]:
            return (
                f"No data yet: none of the {s['memories']} memories has been archived or deleted "
                f"(the oldest is {duration(s['longest_s'])} old), so every curve would be flat at 100 %."
            )
        return None
    if plot == "tiers":
        days = metrics["tiers"]["days"]
        if not days:
            return "No data yet: no memory has been created."
        if len(days) == 1:
            return (
                f"One day of history so far ({day_label(days[0])}): the counts are in the table "
                "“Memories now”; the plot starts with the second day."
            )
        return None
    if plot == "reactivation":
        r = metrics["reactivation"]
        if r["denominator"]:
            return None
        if r["pending"]:
            return (
                f"No data yet: {r['pending']} demotions or archivings are still within their "
                f"{r['window_days']:g}-day window."
            )
        return "No data yet: nothing has been demoted or archived."
    if plot == "access":
        return None if metrics["access_at_end"]["count"] else "No data yet: no memory has been archived or deleted."
    raise InvalidInputError(f"unknown plot {plot!r} (known: {', '.join(PLOTS)})")


# ---------------------------------------------------------------------------
# shared axis helpers

# Tick marks of a logarithmic time axis, in seconds, with readable labels.
_MAJOR_TICKS = (
    (1, "1 s"),
    (10, "10 s"),
    (60, "1 min"),
    (600, "10 min"),
    (HOUR, "1 h"),
    (6 * HOUR, "6 h"),
    (DAY, "1 day"),
    (7 * DAY, "1 week"),
    (30 * DAY, "30 days"),
    (365 * DAY, "1 year"),
    (3650 * DAY, "10 years"),
)
_FINE_TICKS = (
    (30, "30 s"),
    (5 * 60, "5 min"),
    (30 * 60, "30 min"),
    (3 * HOUR, "3 h"),
    (12 * HOUR, "12 h"),
    (2 * DAY, "2 days"),
    (3 * DAY, "3 days"),
    (14 * DAY, "2 weeks"),
    (90 * DAY, "90 days"),
    (180 * DAY, "180 days"),
    (730 * DAY, "2 years"),
    (1825 * DAY, "5 years"),
)


def _log_time_axis(ax: Axes, lo: float, hi: float) -> None:
    """A log x axis from ``lo`` to ``hi`` seconds labelled ``1 h``, ``1 day``…"""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = [(t, label) for t, label in _MAJOR_TICKS if lo <= t <= hi]
    if len(ticks) < 4:  # a narrow range: add the in-between marks
        ticks = sorted(ticks + [(t, label) for t, label in _FINE_TICKS if lo <= t <= hi])
    ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())  # matplotlib would label minor ticks 2×10⁴…


def _linear_unit(seconds: float) -> tuple[float, str]:
    if seconds <= 3 * HOUR:
        return 60.0, "minutes"
    if seconds <= 3 * DAY:
        return HOUR, "hours"
    return DAY, "days"


def type_colours(metrics: Mapping[str, Any]) -> dict[str, str]:
    """One colour per memory type, the same in every plot: the policy's
    types in order, then any other type logged, alphabetically."""
    names = list(metrics["policy"]["types"])
    names += sorted(set(metrics["survival"]["by_type"]) - set(names))
    return {name: TYPE_COLOURS[i % len(TYPE_COLOURS)] for i, name in enumerate(names)}


def _style(ax: Axes) -> None:
    ax.tick_params(labelsize=8)
    ax.grid(True, color="#eee", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend_outside(fig: Figure, handles: Sequence[Any] | None = None, title: str | None = None) -> Any:
    # Outside the axes, to the right: a legend inside covers data on some store or other.
    kw: dict[str, Any] = {
        "loc": "outside right upper",
        "fontsize": 8,
        "frameon": False,
        "title": title,
        "title_fontsize": 8,
        "alignment": "left",
    }
    if handles is not None:
        kw["handles"] = list(handles)
    return fig.legend(**kw)


def _new_figure(height_in: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = _mpl()(figsize=(WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)  # the Agg canvas, attached: savefig and draw need no pyplot
    return fig


# ---------------------------------------------------------------------------
# decay


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


def type_fate(tp: Mapping[str, Any], thresholds: Mapping[str, float], every: float) -> dict[str, Any]:
    """What the policy does to one memory of a type (at full confidence).

    Unused: ``leaves_hot_s`` (weight reaches demote, or the TTL archives it
    first), ``archived_s`` (the earlier of the weight reaching archive and
    the TTL; ``None``: never), ``by_ttl`` (the TTL came first). Accessed every
    ``every`` seconds: ``used_low`` (the lowest weight between accesses, which
    the troughs approach from above or start at), ``used_archived_s`` (when the
    TTL archives it anyway: it is not refreshed on read, or the accesses are
    further apart than the TTL; ``None``: never by TTL)."""
    w0, h, ttl = float(tp["initial_weight"]), float(tp["half_life_s"]), tp["ttl_s"]

    def crossing(level: float) -> float | None:
        return None if level <= 0 else max(0.0, h * math.log2(w0 / level))

    demote, archive = crossing(thresholds["demote"]), crossing(thresholds["archive"])
    ends = [x for x in (archive, ttl) if x is not None]
    archived = min(ends) if ends else None
    by_ttl = ttl is not None and (archive is None or ttl < archive)
    leaves = min(x for x in (demote, archived) if x is not None) if (demote, archived) != (None, None) else None
    q = 2.0 ** (-every / h)
    # troughs x(n+1) = (x(n) + boost)·q move monotonically from w0·q to boost·q/(1-q)
    low = min(w0 * q, float(tp["boost"]) * q / (1.0 - q))
    used_archived = ttl if ttl is not None and (not tp["refresh_on_read"] or every > ttl) else None
    return {
        "leaves_hot_s": leaves,
        "archived_s": archived,
        "by_ttl": by_ttl,
        "used_low": low,
        "used_archived_s": used_archived,
    }


def _decay_times(lo: float, hi: float, every: float | None, stop: float) -> list[float]:
    """Sample times for one curve: log-spaced, plus both sides of every access
    so the saw teeth are sharp on a log axis."""
    end = min(hi, stop)
    n = 400
    ts = {lo * (end / lo) ** (k / n) for k in range(n + 1)} if end > lo else {lo}
    if every:
        k = 1
        while k * every <= end and k <= 2000:  # past 2000 teeth the curve is a band at any resolution
            ts.update((k * every * (1 - 1e-9), k * every))
            k += 1
    ts.add(end)
    return sorted(t for t in ts if lo <= t <= end)


def _every_text(boost_every_s: float | None) -> str:
    return "once per half-life" if boost_every_s is None else f"every {duration(boost_every_s)}"


def decay_figure(metrics: Mapping[str, Any], boost_every_s: float | None = None) -> Figure | None:
    """Weight against time since creation, every type on one log time axis:
    top never used, bottom accessed every ``boost_every_s`` (default: each
    type's own half-life). A curve ends where the memory is archived."""
    if no_data("decay", metrics):
        return None
    from matplotlib.lines import Line2D

    types = metrics["policy"]["types"]
    th = metrics["policy"]["thresholds"]
    fates = {name: type_fate(tp, th, boost_every_s or float(tp["half_life_s"])) for name, tp in types.items()}
    # left edge: well before the first half-life or TTL, so every curve starts flat at W0
    lo = min(
        min(float(tp["half_life_s"]) / 20, float(tp["ttl_s"]) / 4 if tp["ttl_s"] else math.inf) for tp in types.values()
    )
    # right edge: the last archiving of an unused memory, or 3 of its half-lives past demote if never archived
    hi = 1.25 * max(
        (
            f["archived_s"]
            if f["archived_s"] is not None
            else (f["leaves_hot_s"] or 0.0) + 3 * float(types[n]["half_life_s"])
        )
        for n, f in fates.items()
    )
    hi = max(hi, lo * 100)
    fig = _new_figure(6.4)
    top, bottom = fig.subplots(2, 1, sharex=True, sharey=True)
    peak = 0.0
    handles = []
    seen: set[tuple[float, float, float]] = set()
    continued = False
    colours = type_colours(metrics)
    for name, tp in types.items():
        colour = colours[name]
        w0, h, boost = float(tp["initial_weight"]), float(tp["half_life_s"]), float(tp["boost"])
        # Types with the same decay draw the same curve: dash the later ones so both stay visible.
        style: LineStyleType = "-" if (w0, h, boost) not in seen else (0, (4, 3))
        seen.add((w0, h, boost))
        fate = fates[name]
        every = boost_every_s or h
        # Regular use repeats the same tooth; past a few of them the curve would be a solid band that
        # hides the others, so it stops after TEETH accesses ("continues the same way").
        teeth_end = (TEETH + 1) * every * (1 - 1e-9)
        used_stop = fate["used_archived_s"]
        for ax, use, stop, ttl_end in (
            (top, None, fate["archived_s"], fate["by_ttl"]),
            (
                bottom,
                every,
                used_stop if used_stop is not None and used_stop <= teeth_end else teeth_end,
                used_stop is not None and used_stop <= teeth_end,
            ),
        ):
            ts = _decay_times(lo, hi, use, stop if stop is not None else math.inf)
            if not ts:
                continue  # archived at creation (W0 at or below archive): nothing to draw
            ws = weight_curve(w0, h, boost, use, ts)
            cut_by_weight = False
            if use is not None and th["archive"] > 0:
                # with use a trough below archive archives the memory there
                cut = next((j for j, w in enumerate(ws) if w <= th["archive"]), None)
                if cut is not None:
                    ts, ws, ttl_end, cut_by_weight = ts[: cut + 1], ws[: cut + 1], False, True
            peak = max(peak, max(ws))
            ax.plot(ts, ws, color=colour, linewidth=1.6, linestyle=style)
            if ttl_end and stop is not None and stop <= hi:
                ax.plot([ts[-1]], [ws[-1]], "x", color=colour, markersize=8, markeredgewidth=2)
            elif use is not None and not cut_by_weight and stop == teeth_end and stop <= hi:
                ax.plot([ts[-1]], [ws[-1]], ">", color=colour, markersize=5)
                continued = True
        label = f"{name}: half-life {duration(h)}, TTL {duration(tp['ttl_s']) if tp['ttl_s'] else 'none'}"
        handles.append(Line2D([], [], color=colour, linewidth=1.6, linestyle=style, label=label))
    styles: dict[str, LineStyleType] = {"demote": ":", "archive": "--"}
    for key, style in styles.items():
        if th[key] > 0:
            for ax in (top, bottom):
                ax.axhline(th[key], color="#555", linestyle=style, linewidth=1)
            handles.append(
                Line2D([], [], color="#555", linestyle=style, linewidth=1, label=f"{key} threshold {th[key]:g}")
            )
    handles.append(
        Line2D(
            [],
            [],
            color="#333",
            marker="x",
            linestyle="none",
            markersize=8,
            markeredgewidth=2,
            label="archived by its TTL",
        )
    )
    if continued:
        handles.append(
            Line2D(
                [],
                [],
                color="#333",
                marker=">",
                linestyle="none",
                markersize=5,
                label=f"used: continues the same way after {TEETH} accesses",
            )
        )
    for ax in (top, bottom):
        _style(ax)
        ax.set_ylabel("weight", fontsize=9)
    _log_time_axis(bottom, lo, hi)
    top.set_ylim(0, 1.08 * max(peak, th["demote"], 1e-9))
    top.set_title(
        "Never used: below demote it moves to warm; below archive, or at its TTL, to cold", fontsize=10, loc="left"
    )
    bottom.set_title(
        f"Accessed {_every_text(boost_every_s)} (each access adds the type's boost)", fontsize=10, loc="left"
    )
    bottom.set_xlabel("time since creation (log scale)", fontsize=9)
    _legend_outside(fig, handles)
    return fig


# ---------------------------------------------------------------------------
# survival


def survival_figure(metrics: Mapping[str, Any]) -> Figure | None:
    """Kaplan–Meier survival per type; log time axis when the lives span
    orders of magnitude; the x axis ends with the longest observed life."""
    if no_data("survival", metrics):
        return None
    by_type = metrics["survival"]["by_type"]
    end = max(float(s["longest_s"] or 0.0) for s in by_type.values())
    ends = [p[0] for s in by_type.values() for p in s["curve"][1:] if p[0] > 0]
    # Types live minutes to months: a log axis when the ends span orders of magnitude.
    log = bool(ends) and end / min(ends) > 100
    first = min(ends) / 2 if log else 0.0  # a log axis starts the curves here (t = 0 is off-axis)
    scale, unit = (1.0, "") if log else _linear_unit(max(end, 1.0))
    fig = _new_figure(4.4)
    ax = fig.add_subplot()
    colours = type_colours(metrics)
    for name, s in by_type.items():
        colour = colours[name]
        curve = s["curve"]
        last = max(float(s["longest_s"] or 0.0), curve[-1][0])
        xs = [max(p[0], first) / scale for p in curve] + [max(last, first) / scale]
        ys = [p[1] for p in curve] + [curve[-1][1]]
        median = "" if s["median_s"] is None else f", median {duration(s['median_s'])}"
        ax.step(
            xs,
            ys,
            where="post",
            color=colour,
            linewidth=1.6,
            label=f"{name}: {s['memories']} memories, {s['censored']} not yet ended{median}",
        )
        if s["median_s"] is not None:
            ax.plot([max(s["median_s"], first) / scale], [0.5], "o", color=colour, markersize=5)
    ax.axhline(0.5, color="#999", linewidth=0.8, linestyle=":")
    if log:
        _log_time_axis(ax, first, max(end, first * 10))
        ax.set_xlabel("time since creation (log scale)", fontsize=9)
    else:
        ax.set_xlim(0, max(end, 1.0) / scale)
        ax.set_xlabel(f"{unit} since creation", fontsize=9)
    from matplotlib.ticker import PercentFormatter

    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.set_ylabel("not yet archived or deleted", fontsize=9)
    ax.set_title("Survival per type (Kaplan–Meier; dots: medians)", fontsize=11, loc="left")
    _style(ax)
    _legend_outside(fig)
    return fig


# ---------------------------------------------------------------------------
# tiers


def tier_window(tiers: Mapping[str, Any]) -> tuple[int, int]:
    """How many days of the series to draw, and the index of the last day
    on which a tier count changed (0: none after the first day).

    A store opened long after its last transition (a demo store, an idle
    agent) has a long flat tail that would squeeze its history into a sliver:
    when the tail is longer than the active history, the plot ends a little
    after the last change and the page says so."""
    days = tiers["days"]
    last_change = 0
    for i in range(1, len(days)):
        if any(tiers[t][i] != tiers[t][i - 1] for t in TIERS):
            last_change = i
    tail = len(days) - 1 - last_change
    if tail > max(last_change, 1):
        return min(len(days), last_change + 1 + max(1, last_change // 10)), last_change
    return len(days), last_change


def tiers_figure(metrics: Mapping[str, Any]) -> Figure | None:
    """Hot and warm (top) and cold (bottom) at the end of each day, on dates
    from the store's first day to its last (an idle tail cut, see
    :func:`tier_window`). Each day's count is drawn over that day. A history
    that starts with the store's first event (nothing compacted) is drawn
    from the day before it, empty: the counts rise from 0."""
    if no_data("tiers", metrics):
        return None
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    tiers = metrics["tiers"]
    n, _ = tier_window(tiers)
    days = list(tiers["days"][:n])
    counts = {t: list(tiers[t][:n]) for t in TIERS}
    if metrics.get("compaction", {}).get("cutoff") is None:
        days.insert(0, days[0] - 1)
        for t in TIERS:
            counts[t].insert(0, 0)
    utc = _dt.UTC
    # one more edge than days: the step of day d spans [d, d + 1)
    edges = [_dt.datetime.fromtimestamp(d * DAY, utc) for d in days] + [
        _dt.datetime.fromtimestamp((days[-1] + 1) * DAY, utc)
    ]
    fig = _new_figure(5.2)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    for ax, names in ((top, ("hot", "warm")), (bottom, ("cold",))):
        high = 0
        for tier in names:
            ys = counts[tier]
            high = max(high, max(ys))
            ax.stairs(ys, edges, color=TIER_COLOURS[tier], linewidth=1.6, baseline=None)
        # counts are whole and never negative: integer ticks from 0
        ax.set_ylim(0, max(1, high) * 1.08)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("memories", fontsize=9)
        _style(ax)
    locator = AutoDateLocator(tz=utc)
    bottom.xaxis.set_major_locator(locator)
    # no offset text: it names one year ("2024-Jan") under an axis that may span two; the label says the span
    bottom.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=utc, show_offset=False))
    bottom.set_xlim(edges[0], edges[-1])
    bottom.set_xlabel(
        f"{day_label(days[0])} to {day_label(days[-1])} (UTC); each step is the count at the end of that day",
        fontsize=9,
    )
    top.set_title("Memories per tier (rebuilt from the event log)", fontsize=11, loc="left")
    _legend_outside(fig, [Line2D([], [], color=TIER_COLOURS[t], linewidth=1.6, label=t) for t in TIERS])
    return fig


# ---------------------------------------------------------------------------
# reactivation


def reactivation_figure(metrics: Mapping[str, Any]) -> Figure | None:
    """Per type, the share of demotions and of archivings brought back to hot
    within the window; the y axis fits the tallest bar and its label."""
    if no_data("reactivation", metrics):
        return None
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    react = metrics["reactivation"]
    names = list(react["by_type"])
    fig = _new_figure(3.8)
    ax = fig.add_subplot()
    width = 0.38
    tallest = 0.0
    for j, (kind, colour) in enumerate((("demote", TIER_COLOURS["warm"]), ("archive", TIER_COLOURS["cold"]))):
        for i, name in enumerate(names):
            part = react["by_type"][name]["by_kind"][kind]
            x = i + (j - 0.5) * width
            if not part["denominator"]:
                # nothing of this kind to undo: say so, rather than draw a bar of 0 %
                ax.annotate(
                    "none",
                    (x, 0),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color="#999",
                )
                continue
            rate = float(part["rate"])
            tallest = max(tallest, rate)
            ax.bar([x], [rate], width, color=colour)
            ax.annotate(
                f"{part['numerator']}/{part['denominator']}",
                (x, rate),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
            )
    # one legend entry per kind, even when the first type has no bar of it
    from matplotlib.patches import Patch

    handles = [
        Patch(color=TIER_COLOURS["warm"], label="demoted → promoted"),
        Patch(color=TIER_COLOURS["cold"], label="archived → restored or reactivated"),
    ]
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    # room above the tallest bar for its "n/d" label, and never below 1 %
    top = min(1.0, max(tallest, 0.01)) * 1.25
    ax.set_ylim(0, top)
    # ticks on round percentages (2.5 % steps would print as "2%" with whole-number labels);
    # below 5 % the steps are fractions of a percent and need a decimal
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 5, 10]))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0 if top >= 0.05 else 1))
    ax.set_ylabel("brought back to hot", fontsize=9)
    ax.set_title(
        f"Reactivation within {react['window_days']:g} days (all types: {_pct(react['rate'])}, "
        f"{react['numerator']} of {react['denominator']})",
        fontsize=11,
        loc="left",
    )
    _style(ax)
    ax.grid(False, axis="x")
    _legend_outside(fig, handles, title="numbers: came back / moved out")
    return fig


# ---------------------------------------------------------------------------
# access counts


def access_figure(metrics: Mapping[str, Any]) -> Figure | None:
    """Histogram of access counts when memories were first archived or deleted."""
    if no_data("access", metrics):
        return None
    from matplotlib.ticker import MaxNLocator

    acc = metrics["access_at_end"]
    fig = _new_figure(3.4)
    ax = fig.add_subplot()
    labels = [b["label"] for b in acc["buckets"]]
    counts = [b["count"] for b in acc["buckets"]]
    bars = ax.bar(labels, counts, color="#7f7f7f", width=0.7)
    ax.bar_label(bars, [str(c) if c else "" for c in counts], fontsize=8, padding=2)
    ax.set_ylim(0, max(counts) * 1.15)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("accesses when first archived or deleted", fontsize=9)
    ax.set_ylabel("memories", fontsize=9)
    mean = "n/a" if acc["mean"] is None else f"{acc['mean']:.2f}"
    ax.set_title(f"Access counts at the end of life ({acc['count']} memories, mean {mean})", fontsize=11, loc="left")
    _style(ax)
    ax.grid(False, axis="x")
    return fig


# ---------------------------------------------------------------------------
# the page


def write_report(
    store_or_metrics: TierStore | Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    boost_every_s: float | None = None,
    reactivation_days: float = 7.0,
    now: float | None = None,
) -> Path:
    """Write ``out_dir/index.html`` and its PNG plots; returns the HTML path.

    store_or_metrics: an open store (its metrics are computed as of ``now``)
    or a dict from :func:`tierstore.analytics.lifecycle.lifecycle_metrics` (already
    evaluated at its own ``now``). boost_every_s: the access interval
    (seconds) of the decay plot's "with use" curves; default, per type, one
    access per half-life. reactivation_days: the window, when a store is
    given. now: POSIX seconds to draw a store as of (default: its clock);
    a store run on a manual clock is drawn at its own time this way.
    """
    _mpl()  # fail early, before any file is written, when matplotlib is missing
    if isinstance(store_or_metrics, Mapping):
        metrics = store_or_metrics
        missing = [k for k in REQUIRED if k not in metrics]
        if missing:
            raise InvalidInputError(f"write_report: not a lifecycle metrics dict (missing {', '.join(missing)})")
        if now is not None:
            raise InvalidInputError(
                "write_report: now applies to a store; a metrics dict was computed at its own"
                " now (pass now to lifecycle_metrics instead)"
            )
        source = None
    else:
        metrics = lifecycle_metrics(store_or_metrics, now=now, reactivation_days=reactivation_days)
        source = str(store_or_metrics.path)
    if boost_every_s is not None and (
        isinstance(boost_every_s, bool)
        or not isinstance(boost_every_s, (int, float))
        or not (boost_every_s > 0 and math.isfinite(boost_every_s))
    ):
        raise InvalidInputError(f"boost_every_s must be a positive number of seconds, got {boost_every_s!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    figures = {
        "decay": decay_figure(metrics, boost_every_s),
        "survival": survival_figure(metrics),
        "tiers": tiers_figure(metrics),
        "reactivation": reactivation_figure(metrics),
        "access": access_figure(metrics),
    }
    images: dict[str, str | None] = {}
    for name, fig in figures.items():
        path = out / f"{name}.png"
        if fig is None:
            # a PNG left by an earlier report of this folder would contradict the page
            path.unlink(missing_ok=True)
            images[name] = None
        else:
            fig.savefig(path, dpi=DPI)
            images[name] = path.name
    page = out / "index.html"
    page.write_text(_html(source, metrics, images, boost_every_s), encoding="utf-8")
    return page


def _table(head: list[str], rows: list[list[Any]], foot: list[Any] | None = None) -> str:
    if not rows:
        return ""  # a header over nothing says less than the "no data yet" line below it
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    tail = (
        ""
        if foot is None
        else '<tr class="total">' + "".join(f"<td>{html.escape(str(c))}</td>" for c in foot) + "</tr>"
    )
    return f"<table><tr>{th}</tr>{body}{tail}</table>"


def tier_counts(metrics: Mapping[str, Any]) -> tuple[list[list[Any]], list[Any]]:
    """The "Memories now" table: a row per type (every type of the policy,
    zeros included, then any other type logged) with hot, warm, cold, total,
    and the totals row."""
    by_type = metrics["tiers"].get("by_type", {})
    names = list(metrics["policy"]["types"]) + sorted(set(by_type) - set(metrics["policy"]["types"]))
    rows = []
    for name in names:
        c = by_type.get(name, {})
        counts = [int(c.get(t, 0)) for t in TIERS]
        rows.append([name, *counts, sum(counts)])
    totals = [sum(r[i] for r in rows) for i in range(1, 5)]
    return rows, ["all types", *totals]


def _image(images: Mapping[str, str | None], name: str, alt: str, m: Mapping[str, Any]) -> str:
    src = images[name]
    if src is None:
        return f'<p class="nodata">{html.escape(no_data(name, m) or "")}</p>'
    return f'<img src="{html.escape(src)}" alt="{html.escape(alt)}">'


def _html(
    source: str | None, m: Mapping[str, Any], images: Mapping[str, str | None], boost_every_s: float | None
) -> str:
    now = float(m.get("now", 0.0))
    surv = m["survival"]["by_type"]
    surv_rows = [
        [
            t,
            s["memories"],
            s["ended"],
            s["censored"],
            s["archived"],
            s["deleted"],
            duration(s["median_s"]),
            duration(s["p90_s"]),
            s.get("alive_now", "n/a"),
        ]
        for t, s in surv.items()
    ]
    r = m["reactivation"]
    react_rows = [
        [
            k,
            v["numerator"],
            v["denominator"],
            _pct(v["rate"]),
            v["pending"],
            duration(v["median_delay_s"]),
            " / ".join(str(v["by_cause"][c]) for c in BACK_CAUSES),
        ]
        for k, v in [("all", r), *(("after " + k, x) for k, x in r["by_kind"].items()), *r["by_type"].items()]
    ]
    v = m["value"]
    value_rows = [
        [t, x["memories"], x["rated"], x["retrievals"], "n/a" if x["mean_value"] is None else f"{x['mean_value']:.2f}"]
        for t, x in v["by_type"].items()
    ]
    top_rows = [
        [
            x["ns"],
            x["id"],
            x["memory_type"],
            x["retrievals"],
            f"{x['positive']}/{x['negative']}",
            f"{x['value']:.2f}",
            x.get("content") or "(deleted)",
        ]
        for x in v["top"]
    ]
    events = m["events"]["by_kind"]
    pol = m["policy"]
    th = pol["thresholds"]
    every_head = _every_text(boost_every_s)
    pol_rows = []
    for t, p in pol["types"].items():
        fate = type_fate(p, th, boost_every_s or float(p["half_life_s"]))
        archived = (
            duration(fate["archived_s"]) + (" (TTL)" if fate["by_ttl"] else "")
            if fate["archived_s"] is not None
            else "never"
        )
        low = fate["used_low"]
        verdict = (
            "stays hot"
            if low > th["demote"]
            else ("dips to warm between uses" if low > th["archive"] else "falls to cold between uses")
        )
        if fate["used_archived_s"] is not None:
            verdict += f"; archived at its TTL ({duration(fate['used_archived_s'])})"
        pol_rows.append(
            [
                t,
                duration(p["ttl_s"]) if p["ttl_s"] else "none",
                duration(p["half_life_s"]),
                p["boost"],
                p["initial_weight"],
                "yes" if p["refresh_on_read"] else "no",
                duration(fate["leaves_hot_s"]),
                archived,
                f"{low:.2f}: {verdict}",
            ]
        )
    counts_rows, counts_total = tier_counts(m)
    days = m["tiers"]["days"]
    if days:
        n, last_change = tier_window(m["tiers"])
        span = (
            f"History from {day_label(days[0])} to {day_label(days[-1])} ({len(days)} days)."
            if len(days) > 1
            else f"History: {day_label(days[0])} (one day)."
        )
        tiers_note = ""
        if n < len(days):
            tiers_note = (
                f"<p>No tier changed after {html.escape(day_label(days[last_change]))} until now "
                f"({html.escape(when(now))}); the plot ends soon after.</p>"
            )
    else:
        span, tiers_note = "No history yet.", ""
    cutoff = m.get("compaction", {}).get("cutoff")
    compaction = (
        ""
        if cutoff is None
        else (
            f"<p>Events before {html.escape(when(cutoff))} were compacted (see docs/lifecycle.md for what that "
            "keeps).</p>"
        )
    )
    kinds = ", ".join(f"{k} {n}" for k, n in events.items() if n)
    title = "tierstore lifecycle report"
    store_line = "" if source is None else f'<p class="sub">Store: <code>{html.escape(source)}</code></p>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 72em; color: #222; line-height: 1.4; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; font-size: 0.9em; }}
td:first-child, th:first-child {{ text-align: left; }}
tr.total td {{ font-weight: 600; border-top: 2px solid #888; }}
img {{ max-width: 100%; display: block; margin-bottom: 1.5em; }}
p.nodata {{ color: #666; font-style: italic; border-left: 3px solid #ccc; padding-left: 0.8em; }}
p.sub {{ color: #555; margin-top: -0.5em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
{store_line}
<p>As of <strong>{html.escape(when(now))}</strong>. {span}
{m["events"]["total"]} lifecycle events{": " + html.escape(kinds) if kinds else ""}.</p>
{compaction}
<h2>Memories now</h2>
<p>Memories per tier and type as of {html.escape(when(now))}, rebuilt from the event log.</p>
{_table(["type", *TIERS, "total"], counts_rows, counts_total)}
<h2>Policy: weight decay per type</h2>
<p>The migrator moves a hot memory whose weight is at or below <em>demote</em> ({th["demote"]:g}) to warm, and
one at or below <em>archive</em> ({th["archive"]:g}) or past its TTL to cold (deleted instead when its weight is
at or below <em>delete</em>, {th["delete"]:g}, and its confidence at or below
{th["delete_below_confidence"]:g}). The times below are for a memory at full confidence; a memory's own
half-life and TTL are shorter when its confidence is low.</p>
{
        _table(
            [
                "type",
                "TTL",
                "half-life",
                "boost",
                "initial weight",
                "TTL refreshed on read",
                "unused: leaves hot after",
                "unused: archived after",
                f"used {every_head}: lowest weight",
            ],
            pol_rows,
        )
    }
{_image(images, "decay", "weight of a memory over time per type", m)}
<h2>Survival</h2>
<p>Time from creation to a memory's first archive or delete (its first life). Memories whose first life has
not ended are censored (they count as at risk until now), so the median is a Kaplan–Meier estimate; n/a: fewer
than half (or 90 %) have ended. A memory archived and later restored has ended its first life: it counts in
<em>ended</em>, and in <em>hot or warm now</em> (the memories searchable now, as in the table above).</p>
{
        _table(
            ["type", "memories", "ended", "not yet ended", "archived", "deleted", "median", "p90", "hot or warm now"],
            surv_rows,
        )
    }
{_image(images, "survival", "survival per type", m)}
<h2>Tier occupancy</h2>
{tiers_note}
{_image(images, "tiers", "memories per tier over time", m)}
<h2>Reactivation</h2>
<p>A demotion or archiving is reactivated when the memory comes back to hot within
{r["window_days"]:g} days. Pending: the window is still open. What brought it back: <em>used</em>, a search
hit or a touch used it from the cold tier; <em>promoted</em>, a used warm hit; <em>re-added</em>, the same
memory was added again (a duplicate of an archived one comes back instead of a copy); <em>restored</em>,
<code>restore</code> or a reversed supersession.</p>
{
        _table(
            [
                "group",
                "reactivated",
                "of",
                "rate",
                "pending",
                "median delay",
                "brought back: " + " / ".join(BACK_CAUSES),
            ],
            react_rows,
        )
    }
{_image(images, "reactivation", "reactivation per type", m)}
<h2>Accesses at the end of life</h2>
{_image(images, "access", "access counts at archive or delete", m)}
<h2>Memory value</h2>
<p>Value = retrievals × positive-feedback rate. {v["rated"]} of {v["memories"]} memories with accesses or
feedback have feedback (the others are unrated).</p>
{_table(["type", "memories", "rated", "retrievals", "mean value"], value_rows)}
{_table(["namespace", "id", "type", "retrievals", "feedback +/-", "value", "content"], top_rows) if top_rows else ""}
</body></html>
"""

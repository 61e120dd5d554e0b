"""Sweeps in a background thread: what ``start_migrator`` runs, for one
store (``Migrator``) and for a cluster (``Cluster``) alike."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tierstore.records import SweepReport
from tierstore.rules.validation import check_positive_int, check_seconds

SweepFn = Callable[[int, float], SweepReport]  # (max_items, time_budget_s) -> report


def next_delay(delay: float, interval_s: float, report: SweepReport | None) -> float:
    """Seconds until the next pass after one that took ``delay`` to come:
    doubled (at most ``max(60, interval_s)``) after a failed pass (``report``
    None, or with errors), a quarter of the interval while work remains
    due, else the interval."""
    if report is None or report.errors:
        return min(delay * 2, max(60.0, interval_s))  # back off while sweeps fail
    return interval_s / 4 if report.remaining_due else interval_s  # more due than one pass took: sooner


def check_sweep_args(interval_s: float, max_items: int, time_budget_s: float) -> tuple[float, int, float]:
    """``start_migrator``'s arguments, checked (InvalidInputError) and normalised."""
    return (
        check_seconds(interval_s, "interval_s"),
        check_positive_int(max_items, "max_items"),
        check_seconds(time_budget_s, "time_budget_s"),
    )


class BackgroundSweeps:
    """Calls ``sweep(max_items, time_budget_s)`` every ``interval_s`` seconds
    of wall-clock time in a daemon thread: four times as often while a pass
    leaves work due, and backing off (doubling, up to ``max(60 s,
    interval_s)``) while passes fail. The last 100 failures are kept in
    :attr:`errors`."""

    def __init__(self, sweep: SweepFn, name: str) -> None:
        self._sweep = sweep
        self._name = name
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.errors: list[str] = []

    def start(self, interval_s: float, max_items: int, time_budget_s: float) -> None:
        """Start the thread (no-op while it runs). The caller checks the
        arguments (:func:`check_sweep_args`) before its own other checks."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()

        def run() -> None:
            delay = interval_s
            while not self._stop.wait(delay):
                try:
                    report: SweepReport | None = self._sweep(max_items, time_budget_s)
                except Exception as exc:  # noqa: BLE001 - kept for stats, retried with backoff
                    report = None
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                if report is not None:
                    self.errors.extend(report.errors)
                del self.errors[:-100]
                delay = next_delay(delay, interval_s, report)

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread, waiting up to ``timeout`` seconds for a sweep under way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

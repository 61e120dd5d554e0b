"""BackgroundSweeps: the loop behind start_migrator, for a store and a cluster."""

from __future__ import annotations

import threading
import time

from tierstore.records import SweepReport
from tierstore.tiers.background import BackgroundSweeps, next_delay


def _report(remaining_due: int = 0, errors: list[str] | None = None) -> SweepReport:
    return SweepReport(
        now=0.0,
        dry_run=False,
        examined=0,
        kept=0,
        demoted=0,
        archived=0,
        deleted=0,
        compacted=0,
        remaining_due=remaining_due,
        elapsed_s=0.0,
        by_type={},
        errors=errors or [],
    )


class Script:
    """A sweep that answers from a script and records when it was called."""

    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.calls: list[tuple[float, int, float]] = []
        self.done = threading.Event()

    def __call__(self, max_items: int, budget: float) -> SweepReport:
        self.calls.append((time.monotonic(), max_items, budget))
        answer = self.answers[min(len(self.calls), len(self.answers)) - 1]
        if len(self.calls) >= len(self.answers):
            self.done.set()
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_next_delay():
    assert next_delay(10.0, 10.0, _report()) == 10.0
    assert next_delay(10.0, 10.0, _report(remaining_due=3)) == 2.5
    assert next_delay(10.0, 10.0, None) == 20.0
    assert next_delay(10.0, 10.0, _report(errors=["x"])) == 20.0
    assert next_delay(40.0, 10.0, None) == 60.0  # capped at a minute
    assert next_delay(100.0, 120.0, None) == 120.0  # or at the interval when it is longer
    assert next_delay(60.0, 10.0, _report()) == 10.0  # a good pass ends the backoff


def test_it_sweeps_with_its_bounds_until_stopped_and_keeps_failures():
    sweep = Script(
        [RuntimeError("bucket down"), _report(errors=["archive x: damaged"]), _report(remaining_due=5), _report()]
    )
    bg = BackgroundSweeps(sweep, "test-sweeps")
    bg.start(0.05, 123, 2.5)
    bg.start(0.05, 999, 9.0)  # already running: no second thread
    assert sweep.done.wait(30)
    bg.stop()
    assert not bg.running
    n = len(sweep.calls)
    time.sleep(0.3)
    assert len(sweep.calls) == n  # stopped
    assert all(c[1:] == (123, 2.5) for c in sweep.calls)
    assert bg.errors[:2] == ["RuntimeError: bucket down", "archive x: damaged"]

"""A routed call's deadline: seconds from the call's start, covering every
wait the router makes for it (a slot changing owner, a re-placement, the
owner's answer, retries). Past it the call raises
:class:`~tierstore.cluster.errors.DeadlineExceededError` naming what it was
waiting for."""

from __future__ import annotations

import time
from typing import Any

from tierstore.cluster.errors import DeadlineExceededError
from tierstore.rules.validation import check_seconds

__all__ = ["Deadline", "check_deadline"]


def check_deadline(value: Any, what: str = "deadline_s") -> float:
    """A deadline: a positive, finite number of seconds (InvalidInputError otherwise)."""
    return float(check_seconds(value, what))


class Deadline:
    """The end of one call's time: ``seconds`` (already checked) from now, on the monotonic clock."""

    __slots__ = ("end", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        """Seconds left (0.0 once past)."""
        return max(0.0, self.end - time.monotonic())

    def exceeded(self, slot: int, waiting_for: str, detail: str) -> DeadlineExceededError:
        """The error to raise: ``detail`` says what the call was waiting for."""
        return DeadlineExceededError(
            f"deadline of {self.seconds:g} s exceeded: {detail}",
            slot=slot,
            deadline_s=self.seconds,
            waiting_for=waiting_for,
        )

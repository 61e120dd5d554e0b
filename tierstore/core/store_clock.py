"""Store time: a clock that never runs backwards, and a check of the clock a
store is opened with.

Every lifetime is a difference of times, so a clock set back (a VM restored
from a snapshot, a device before NTP) or jumped forward (a store written by a
simulation's clock, opened with the machine's) would silently shorten or end
memories' lives. A store therefore keeps

* its **high-water mark**: the latest time it has seen. Store time is the
  clock's reading, never earlier than that mark: an access or a feedback under
  a clock set back is recorded at the mark, so no memory's state is dated
  before its own past.
* its **clock record** in the catalog: the mark and the clock's offset from
  this machine's wall-clock time when it was written (0 for the system clock,
  the simulated minus the real time for a :class:`ManualClock`).

Opening with the system clock compares it with the record. A clock behind the
mark, or whose offset differs from the recorded one (the store's time moved by
more, or less, than real time did), fails the check: destructive work
(``sweep``, the background migrator) is then refused until the caller says
otherwise (``allow_clock_jump=True``; on the command line ``--allow-clock-jump``
or ``--now``). Any other clock is the caller telling the time, and is trusted.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
from dataclasses import dataclass

from tierstore.clock import Clock, SystemClock

# Clock differences below this are ordinary (NTP slews, a store closed a few
# minutes after its last operation); seconds.
TOLERANCE_S = 600.0


def format_time(t: float) -> str:
    """POSIX seconds as ``2026-12-03 14:05 UTC``."""
    return _dt.datetime.fromtimestamp(t, _dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def format_span(seconds: float) -> str:
    """A positive duration in its largest sensible unit: ``3.2 days``."""
    s = abs(seconds)
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.0f} seconds"


@dataclass(frozen=True)
class ClockRecord:
    """What the catalog remembers of store time (meta ``clock``)."""

    high_water: float  # the latest store time seen, POSIX seconds
    offset: float  # the clock's reading minus wall-clock time when recorded, seconds (0: the system clock)

    def to_json(self) -> str:
        return json.dumps({"high_water": self.high_water, "offset": self.offset})

    @classmethod
    def from_json(cls, raw: str | None) -> ClockRecord | None:
        if not raw:
            return None
        doc = json.loads(raw)
        return cls(float(doc["high_water"]), float(doc["offset"]))

    def own_time(self, wall: float | None = None) -> float:
        """The store's time now, as its own clock would tell it: the wall
        clock's for a store kept on the system clock, its high-water mark for
        one driven by another clock (a simulation's clock stopped with it)."""
        wall = time.time() if wall is None else wall
        if abs(self.offset) <= TOLERANCE_S:
            return max(self.high_water, wall)
        return self.high_water


@dataclass(frozen=True)
class ClockCheck:
    """The clock a store was opened with, against the store's record.

    ``behind_s``: how far the clock reads before the high-water mark.
    ``jump_s``: how much further the store's time moved than real time did
    since the record was written (the offset's change). ``told``: the clock is
    not the system clock, i.e. the caller gives the time and is trusted."""

    now: float
    record: ClockRecord | None
    behind_s: float
    jump_s: float
    told: bool

    @property
    def ok(self) -> bool:
        return self.told or (self.behind_s <= TOLERANCE_S and abs(self.jump_s) <= TOLERANCE_S)

    def reason(self) -> str:
        """One line: what is wrong with the clock, and what to do."""
        if self.ok or self.record is None:
            return "the clock agrees with the store"
        mark = format_time(self.record.high_water)
        if self.behind_s > TOLERANCE_S:
            what = (
                f"this clock reads {format_time(self.now)}, {format_span(self.behind_s)} before the latest time "
                f"the store has seen ({mark}): was it set back?"
            )
        else:
            what = (
                f"the store's time ({mark}) was kept by another clock, {format_span(self.jump_s)} "
                f"{'behind' if self.jump_s > 0 else 'ahead of'} this machine's: at this machine's time every "
                f"memory would look {format_span(self.jump_s)} {'older' if self.jump_s > 0 else 'younger'}"
            )
        return (
            f"{what}; refusing to sweep (it would archive or delete by the wrong time): give the time "
            f"(--now, or a clock), or allow the jump (--allow-clock-jump, allow_clock_jump=True)"
        )


def parse_time(text: str) -> float:
    """A time given by a person: ISO 8601 (``2026-12-03``, ``2026-12-03T14:05``,
    with an offset or ``Z``; without one it is UTC) or POSIX seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: give ISO 8601 (2026-12-03 or 2026-12-03T14:05Z) or POSIX seconds"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.UTC)
    return t.timestamp()


def read_clock_record(catalog_path: str) -> ClockRecord | None:
    """The clock record of the store whose catalog is at ``catalog_path``,
    read without opening the store (SQLite read-only; a store open in another
    process is fine). None when there is none."""
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{catalog_path}?mode=ro", uri=True)
    except sqlite3.OperationalError:
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'clock'").fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return ClockRecord.from_json(row[0]) if row else None


def check_clock(clock: Clock, record: ClockRecord | None, wall: float | None = None) -> ClockCheck:
    """Compare ``clock`` with the store's ``record`` (see :class:`ClockCheck`)."""
    now = float(clock.now())
    wall = time.time() if wall is None else wall
    told = not isinstance(clock, SystemClock)
    if record is None:
        return ClockCheck(now, None, 0.0, 0.0, told)
    return ClockCheck(now, record, max(0.0, record.high_water - now), _offset(clock, now, wall) - record.offset, told)


def _offset(clock: Clock, reading: float, wall: float) -> float:
    """The clock's offset from this machine's wall-clock time: 0 for the system
    clock by definition (its reading is the machine's time, right or wrong)."""
    return 0.0 if isinstance(clock, SystemClock) else reading - wall


class StoreClock:
    """A clock's reading, never earlier than the store's high-water mark.

    Thread-safe enough for its purpose: the mark only grows, and two threads
    racing to raise it differ by the time between their two readings."""

    def __init__(self, clock: Clock, high_water: float = -math.inf) -> None:
        self.clock = clock
        self._high = high_water

    def now(self) -> float:
        t = self.clock.now()
        if t >= self._high:
            self._high = t
            return t
        return self._high

    @property
    def high_water(self) -> float:
        return self._high

    def record(self) -> ClockRecord:
        """The record to keep: the mark, and this clock's offset from wall-clock time now."""
        return ClockRecord(self._high, _offset(self.clock, float(self.clock.now()), time.time()))

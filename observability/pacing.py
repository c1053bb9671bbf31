"""``FlushPacer``: how long the background writer waits between timed / step-end flushes.

A flush costs the writer a large, nearly size-independent amount of CPU (on the CPU machine mostly
a cold start: its code and data must be fetched again after a second of training) plus a little
per row, and on a machine whose training keeps every core busy that CPU comes out of the training
step about 1:1 (``benchmarks/README.md``). The pacer keeps the writer's
share of wall time within ``budget``: after each flush it sets the next interval to the writer's
CPU since the previous flush (smoothed) divided by ``budget``, never shorter than the configured
``flush_seconds`` and never longer than ``ceiling``. With a flush of fixed cost ``F`` and per-second
row cost ``r``, the interval settles at ``F / (budget - r)`` (the map ``T -> (F + r T) / budget`` is
a contraction for ``r < budget``); when rows alone cost more than the budget it stays at ``ceiling``.
Where the cold start itself grows with the pause (as measured there), the interval settles
longer, at most ``ceiling``.

So a large model's run (a step of minutes, a flush per step) flushes exactly as configured, and a
tiny, fast loop trades a few seconds of live lag for a bounded overhead. ``budget = 0`` turns pacing
off: every interval is ``flush_seconds``.
"""

from __future__ import annotations

import math


class FlushPacer:
    """The writer's current flush interval, stretched to keep its CPU within a share of wall time.

    Args:
        base: the configured interval (``flush_seconds``), > 0: the shortest the pacer uses.
        budget: writer CPU seconds allowed per wall second, in [0, 1]; 0 disables pacing.
        ceiling: the longest interval (seconds; below ``base`` it is ``base``).
        smoothing: weight of the newest flush in the running CPU estimate, in (0, 1].
    """

    def __init__(
        self, base: float, *, budget: float, ceiling: float, smoothing: float = 0.5
    ) -> None:
        if not base > 0:
            raise ValueError(f"flush pacer base must be > 0 seconds, got {base!r}")
        if not 0.0 <= budget <= 1.0:
            raise ValueError(f"flush pacer budget must be in [0, 1], got {budget!r}")
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"flush pacer smoothing must be in (0, 1], got {smoothing!r}")
        self.base, self.budget, self.smoothing = base, budget, smoothing
        self.ceiling = max(base, ceiling)
        self.interval = base
        """Seconds the writer now waits between flushes (read by the training thread: a float
        attribute, replaced whole)."""
        self.cpu_per_flush: float | None = None
        """Smoothed writer CPU seconds per flush interval (None before the first)."""

    @property
    def stretch(self) -> float:
        """``interval / base`` (>= 1): the factor every time threshold is scaled by."""
        return self.interval / self.base

    def record(self, cpu_seconds: float) -> float:
        """Account the writer CPU spent since the previous flush (this flush included) and return
        the next interval."""
        if not math.isfinite(cpu_seconds) or cpu_seconds < 0:
            return self.interval  # an unreadable clock: keep the current pace
        if self.cpu_per_flush is None:
            self.cpu_per_flush = cpu_seconds
        else:
            w = self.smoothing
            self.cpu_per_flush = w * cpu_seconds + (1 - w) * self.cpu_per_flush
        if self.budget > 0:
            self.interval = min(self.ceiling, max(self.base, self.cpu_per_flush / self.budget))
        return self.interval

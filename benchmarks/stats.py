"""Seeds and spread for every benchmark figure: one helper, used by all scripts.

A learning outcome is reported over seeds as mean ± sample standard deviation with a 95%
Student-t interval of the mean; an A-vs-B claim as the paired difference (same seed on both
arms) with its 95% interval. A difference whose interval spans 0 is a tie, and is written so.

    >>> s = summary([0.60, 0.64, 0.62])
    >>> round(s.mean, 3), round(s.sd, 3), s.n
    (0.62, 0.02, 3)
    >>> paired([0.7, 0.8, 0.9], [0.6, 0.7, 0.9]).verdict("A", "B")
    'tie'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95% Student-t quantiles t_{0.975, df}, df = 1 .. 30 (standard tables).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (df ≥ 1)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Summary:
    """Mean, sample sd, count, range and 95% t-interval of the mean of per-seed values."""

    values: tuple[float, ...]
    mean: float
    sd: float
    n: int
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        return t975(self.n - 1) * self.sd / math.sqrt(self.n) if self.n > 1 else math.inf

    @property
    def interval(self) -> tuple[float, float]:
        return self.mean - self.half_width, self.mean + self.half_width

    def fmt(self, digits: int = 3, scale: float = 1.0) -> str:
        """`mean ± sd (min–max, n seeds)`, values multiplied by `scale` (100 for points)."""
        m, s = self.mean * scale, self.sd * scale
        lo, hi = self.lo * scale, self.hi * scale
        return f"{m:.{digits}f} ± {s:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f}, n={self.n})"


@dataclass(frozen=True)
class Paired:
    """Paired difference A − B over seeds, with its 95% t-interval and t statistic."""

    diff: Summary

    @property
    def interval(self) -> tuple[float, float]:
        return self.diff.interval

    @property
    def t(self) -> float:
        if self.diff.n < 2:
            return math.nan
        if self.diff.sd == 0.0:
            return math.copysign(math.inf, self.diff.mean) if self.diff.mean else 0.0
        return self.diff.mean / (self.diff.sd / math.sqrt(self.diff.n))

    def verdict(self, a: str, b: str) -> str:
        """`'<a> ahead'`, `'<b> ahead'`, or `'tie'` when the interval spans 0."""
        lo, hi = self.interval
        if lo > 0:
            return f"{a} ahead"
        if hi < 0:
            return f"{b} ahead"
        return "tie"

    def fmt(self, a: str, b: str, digits: int = 3, scale: float = 1.0) -> str:
        """`A − B = +d [lo, hi] 95% CI, t = .., n = ..: verdict`."""
        lo, hi = (x * scale for x in self.interval)
        d = self.diff.mean * scale
        return (
            f"{a} − {b} = {d:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}] 95% CI, "
            f"t = {self.t:.2f}, n = {self.diff.n}: {self.verdict(a, b)}"
        )


def summary(values: Sequence[float]) -> Summary:
    """Summarize per-seed values (at least one)."""
    xs = tuple(float(v) for v in values)
    if not xs:
        raise ValueError("summary needs at least one value")
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return Summary(xs, mean, sd, n, min(xs), max(xs))


def paired(a: Sequence[float], b: Sequence[float]) -> Paired:
    """Paired difference of two arms measured on the same seeds, in the same order."""
    if len(a) != len(b):
        raise ValueError(f"paired arms need equal seeds, got {len(a)} and {len(b)}")
    return Paired(summary([x - y for x, y in zip(a, b, strict=True)]))


def best_of_sweep(results: dict[float, Sequence[float]]) -> tuple[float, Summary]:
    """The sweep setting with the highest mean over seeds, and its summary.

    `results` maps a hyperparameter value (e.g. a learning rate) to per-seed outcomes; every arm
    of a comparison gets the same sweep and reports its best, with the whole sweep in the record.
    """
    if not results:
        raise ValueError("best_of_sweep needs at least one setting")
    best = max(results, key=lambda k: summary(results[k]).mean)
    return best, summary(results[best])

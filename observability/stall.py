"""Stall detection: a run whose held-out accuracy (or task reward) does not improve.

Progress is measured on the best series the run recorded: greedy held-out accuracy (``evals``
split ``heldout``, first vs last evaluation) when the run — and the baseline, when one is given —
evaluated at two steps or more; else the per-step task reward (``reward_signals.task_reward``:
the verifier in a mixed-reward run), the mean of its last w steps against its first w,
w = max(2, N // 4). The gain's noise σ: held-out √Σ max(p(1 − p), 1/n)/n over the two evaluations
(binomial; the 1/n floor keeps p = 0 or 1 from claiming certainty); reward σ_step·√(2/w), σ_step
the sampling error of a step's mean (``analysis.reward_sampling_noise``).
A run *improves* when gain ≥ max(z·σ, ``min_gain``) (z = 1.64, one-sided 95%; min_gain = 0.02).
Without a baseline a run stalls when it does not improve; with one, when its gain falls short of
the baseline's by more than z·√(σ² + σ_b²) (a control that did not improve either leaves nothing
to fall behind). The held-out σ is conservative: both evaluations score the same prompts, but the
per-prompt outcomes that a paired test needs are not recorded (the default run's 40 steps,
0.570 → 0.688 on 128 prompts, is a gain of 1.96σ).
Reads no ``runs`` row. Left out: plateaus after early progress (the whole run is one window), a
trend test over the intermediate evaluations.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import duckdb

from observability.analysis import reward_sampling_noise
from observability.reward_signals import task_reward

MIN_GAIN = 0.02
"""Smallest gain (accuracy or reward units) that counts as improving, whatever the noise."""
Z = 1.64
"""Gains are compared in units of their noise σ (one-sided 95%)."""


@dataclass(frozen=True)
class Progress:
    """How far one series moved between the start and the end of a run."""

    metric: str
    """``heldout_accuracy`` or ``task_reward``."""
    first_step: int
    last_step: int
    start: float
    end: float
    noise: float
    """σ of ``end − start``."""

    @property
    def gain(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Stall:
    """The stall verdict of a run (``stalled`` False: it improved, or kept up with its baseline)."""

    stalled: bool
    reason: str
    """One line: the gain, its noise, and the baseline's gain when one was given."""
    progress: Progress | None
    """None when the run has too few steps to tell."""
    baseline: Progress | None = None

    def __bool__(self) -> bool:
        return self.stalled

    def to_dict(self) -> dict:
        out = asdict(self)
        for key in ("progress", "baseline"):
            p = getattr(self, key)
            if p is not None:
                out[key]["gain"] = p.gain
        return out


def _heldout(con: duckdb.DuckDBPyConnection, rid: str) -> Progress | None:
    rows = con.execute(
        "SELECT step, any_value(n), any_value(accuracy) FROM evals WHERE run_id = ? "
        "AND split = 'heldout' AND accuracy IS NOT NULL AND n > 0 GROUP BY step ORDER BY step",
        [rid],
    ).fetchall()
    if len(rows) < 2:
        return None
    (s0, n0, p0), (s1, n1, p1) = rows[0], rows[-1]
    var = max(p0 * (1 - p0), 1 / n0) / n0 + max(p1 * (1 - p1), 1 / n1) / n1
    return Progress("heldout_accuracy", int(s0), int(s1), float(p0), float(p1), math.sqrt(var))


def _reward(con: duckdb.DuckDBPyConnection, rid: str) -> Progress | None:
    src, params = task_reward(con, rid)
    rows = con.execute(
        f"SELECT step, avg(r) FROM ({src}) WHERE r IS NOT NULL GROUP BY step ORDER BY step",
        params,
    ).fetchall()
    if len(rows) < 4:
        return None
    w = max(2, len(rows) // 4)
    start = sum(r for _, r in rows[:w]) / w
    end = sum(r for _, r in rows[-w:]) / w
    noise = reward_sampling_noise(con, rid) * math.sqrt(2 / w)
    return Progress("task_reward", int(rows[0][0]), int(rows[-1][0]), start, end, noise)


def progress(
    con: duckdb.DuckDBPyConnection, rid: str, metric: str | None = None
) -> Progress | None:
    """The run's ``Progress`` on ``metric`` (None: held-out accuracy if evaluated twice, else the
    task reward); None when the series is too short (< 2 evaluations, < 4 steps)."""
    if metric not in (None, "heldout_accuracy", "task_reward"):
        raise ValueError(f"metric {metric!r} not in ['heldout_accuracy', 'task_reward']")
    if metric in (None, "heldout_accuracy"):
        found = _heldout(con, rid)
        if found is not None or metric == "heldout_accuracy":
            return found
    return _reward(con, rid)


def _fmt(p: Progress) -> str:
    return (
        f"{p.metric} {p.start:.3f} → {p.end:.3f} (gain {p.gain:+.3f} ± {p.noise:.3f}, "
        f"steps {p.first_step}–{p.last_step})"
    )


def detect_stall(
    con: duckdb.DuckDBPyConnection,
    rid: str,
    *,
    baseline: duckdb.DuckDBPyConnection | None = None,
    baseline_rid: str | None = None,
    min_gain: float = MIN_GAIN,
    z: float = Z,
) -> Stall:
    """The stall verdict of run ``rid`` (against ``baseline``'s run ``baseline_rid`` when given)."""
    metric = None
    if baseline is not None:  # compare like with like: held-out only when both evaluated
        both = _heldout(con, rid) is not None and _heldout(baseline, baseline_rid) is not None
        metric = "heldout_accuracy" if both else "task_reward"
    p = progress(con, rid, metric)
    if p is None:
        return Stall(False, "too few steps or evaluations to tell", None)
    improving = p.gain >= max(z * p.noise, min_gain)
    b = progress(baseline, baseline_rid, p.metric) if baseline is not None else None
    if b is None:
        verdict = "improving" if improving else "not improving"
        return Stall(not improving, f"{verdict}: {_fmt(p)}", p)
    margin = z * math.hypot(p.noise, b.noise)
    behind = p.gain < b.gain - margin
    verdict = "behind the baseline" if behind else "keeps up with the baseline"
    return Stall(behind, f"{verdict}: {_fmt(p)}; baseline {_fmt(b)}", p, b)

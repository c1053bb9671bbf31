"""Health alarms over the ``steps`` rollup: heuristics that flag a run worth a look.

Each alarm compares the mean over the latest ``window`` steps ("recent") with a threshold or
with the mean over the first ``window`` steps ("baseline"). Simplifications: one rank-averaged
series per run (``queries.steps``); NaN steps are ignored; a run shorter than two windows raises
no trend alarm (rising mismatch, collapsing entropy), only the absolute ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class AlarmConfig:
    """Thresholds of the health alarms."""

    window: int = 5
    """Steps in the recent and the baseline windows (>= 1)."""
    mismatch_rise_factor: float = 2.0
    """Alarm when recent mean |Δlogp| > factor × baseline mean (> 1)."""
    mismatch_floor: float = 1e-3
    """...and recent mean |Δlogp| is above this absolute level (>= 0): fp32 noise is no alarm."""
    masked_fraction_max: float = 0.05
    """Alarm when the recent mean masked-token fraction exceeds this (in [0, 1])."""
    degenerate_fraction_max: float = 0.5
    """Alarm when the recent mean fraction of zero-variance groups exceeds this (in [0, 1])."""
    entropy_collapse_factor: float = 0.25
    """Alarm when recent mean entropy < factor × baseline mean entropy (in (0, 1))."""
    entropy_floor: float = 0.02
    """Alarm when recent mean entropy is below this absolute level (>= 0)."""

    def __post_init__(self) -> None:
        rules = {
            "window": (self.window >= 1, ">= 1"),
            "mismatch_rise_factor": (self.mismatch_rise_factor > 1, "> 1"),
            "mismatch_floor": (self.mismatch_floor >= 0, ">= 0"),
            "masked_fraction_max": (0 <= self.masked_fraction_max <= 1, "in [0, 1]"),
            "degenerate_fraction_max": (0 <= self.degenerate_fraction_max <= 1, "in [0, 1]"),
            "entropy_collapse_factor": (0 < self.entropy_collapse_factor < 1, "in (0, 1)"),
            "entropy_floor": (self.entropy_floor >= 0, ">= 0"),
        }
        for name, (ok, allowed) in rules.items():
            if not ok:
                raise ValueError(
                    f"AlarmConfig.{name} must be {allowed}, got {getattr(self, name)!r}"
                )


@dataclass(frozen=True)
class Alarm:
    """One raised alarm: a stable ``kind`` and a human message with the numbers."""

    kind: str
    message: str


ALARM_KINDS = (
    "mismatch_rising",
    "masked_fraction",
    "degenerate_groups",
    "staleness_limit",
    "entropy_collapse",
)


def _mean(s: pd.Series) -> float:
    v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else float("nan")


def health_alarms(
    steps: pd.DataFrame, *, staleness_limit: int | None = None, config: AlarmConfig | None = None
) -> list[Alarm]:
    """Alarms for one run's ``steps`` rollup (ordered by step)."""
    cfg = config or AlarmConfig()
    if steps.empty:
        return []
    w = cfg.window
    recent, base = steps.tail(w), steps.head(w)
    trend = len(steps) >= 2 * w
    out: list[Alarm] = []

    m_recent, m_base = _mean(recent["mismatch_abs_mean"]), _mean(base["mismatch_abs_mean"])
    if trend and m_recent > cfg.mismatch_floor and m_recent > cfg.mismatch_rise_factor * m_base:
        out.append(
            Alarm(
                "mismatch_rising",
                f"mean |Δlogp| rose from {m_base:.2e} to {m_recent:.2e} "
                f"(> {cfg.mismatch_rise_factor:g}× over the last {w} steps)",
            )
        )
    masked = _mean(recent["masked_fraction"])
    if masked > cfg.masked_fraction_max:
        out.append(
            Alarm(
                "masked_fraction",
                f"masked-token fraction {masked:.3f} > {cfg.masked_fraction_max:g} "
                f"over the last {w} steps",
            )
        )
    degenerate = _mean(recent["degenerate_group_fraction"])
    if degenerate > cfg.degenerate_fraction_max:
        out.append(
            Alarm(
                "degenerate_groups",
                f"{degenerate:.0%} of groups have zero reward variance "
                f"(> {cfg.degenerate_fraction_max:.0%}) over the last {w} steps",
            )
        )
    stale = pd.to_numeric(recent["staleness_max"], errors="coerce").max()
    if staleness_limit is not None and pd.notna(stale) and stale > 0 and stale >= staleness_limit:
        out.append(
            Alarm("staleness_limit", f"staleness {int(stale)} reached the limit {staleness_limit}")
        )
    e_recent, e_base = _mean(recent["entropy"]), _mean(base["entropy"])
    if e_recent < cfg.entropy_floor or (trend and e_recent < cfg.entropy_collapse_factor * e_base):
        out.append(
            Alarm(
                "entropy_collapse", f"entropy {e_recent:.3f} (baseline {e_base:.3f}) is collapsing"
            )
        )
    return out

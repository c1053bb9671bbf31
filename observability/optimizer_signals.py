"""Optimizer suspects: a step size that breaks the policy, as per-step levels for ``analysis``.

Read from ``steps`` only (never ``runs``), ranked in the same table as every other suspect
(``analysis.rank_suspects``), counted above ``Signal.floor`` in units of τ:
- ``update_size``: ‖Δθ‖₂ / ‖θ‖₂ of the step (``update_norm`` / ``param_norm``), the relative step
  whatever set it (learning rate, schedule, Adam's normalisation). AdamW moves every coordinate by
  about lr, so on this model the ratio is ≈ 14·lr at the first step and falls as the moments
  fill: the default lr 3e-5 gives 4e-4 → 2e-4, lr 1e-4 (the OPD configs) 1.4e-3 → 7e-4, lr 1e-3
  1.4e-2 → 5e-3 (and collapses). τ 4e-3.
- ``learning_rate``: log2(lr / the run's first lr): a schedule that raised the rate; τ 1 (doubled).
  A rate that is too large from the start shows as ``update_size``.
- ``grad_norm``: trailing-3 gradient norm / the median over the run's first max(3, 10%) steps: a
  gradient that blows up; floor 3, τ 2 (moved at 5×).
- ``adam_reset``: the update ratio of a step right after an optimizer reset
  (``optimizer_reset`` on the step before) / the median ratio of steps that follow none: a fresh
  AdamW's bias-corrected first steps move every coordinate by ≈ lr; floor 2, τ 2 (moved at 4×).
Simplifications: steps averaged over ranks; a step without the columns (skipped, imported) counts
as no sign.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from observability.reward_signals import Signal

OPTIMIZER_SIGNALS = (
    Signal("update_size", "relative step ‖Δθ‖/‖θ‖ of the optimizer update", 4e-3),
    Signal("learning_rate", "log2 of the learning rate over the run's first (a schedule)", 1.0),
    Signal(
        "grad_norm",
        "gradient norm (trailing 3 steps) over its median at the start",
        2.0,
        floor=3.0,
    ),
    Signal(
        "adam_reset",
        "update ratio right after an optimizer reset over the steps without one",
        2.0,
        floor=2.0,
    ),
)
"""The optimizer candidates (always columns of ``optimizer_levels``), in tie order."""

_STEPS = """
SELECT step, avg(update_norm / nullif(param_norm, 0))::DOUBLE AS ratio,
       avg(lr)::DOUBLE AS lr, avg(grad_norm)::DOUBLE AS grad,
       bool_or(coalesce(optimizer_reset, false)) AS reset
FROM steps WHERE run_id = $rid GROUP BY step ORDER BY step"""


def optimizer_levels(con: duckdb.DuckDBPyConnection, rid: str) -> pd.DataFrame:
    """Per step (column ``step``): every ``OPTIMIZER_SIGNALS`` level."""
    s = con.execute(_STEPS, {"rid": rid}).df()
    out = pd.DataFrame({"step": s["step"], "update_size": s["ratio"]})
    lr = s["lr"].astype("float64")
    first_lr = lr.dropna().iloc[0] if lr.notna().any() else np.nan
    out["learning_rate"] = np.log2(lr / first_lr) if first_lr and first_lr > 0 else np.nan
    grad = s["grad"].astype("float64")
    start = grad.dropna().iloc[: max(3, len(s) // 10)].median()
    out["grad_norm"] = grad.rolling(3, min_periods=1).mean() / start if start > 0 else np.nan
    after = s["reset"].shift(1, fill_value=False).astype(bool)  # the step after a reset
    usual = s["ratio"][~after].median()
    out["adam_reset"] = (s["ratio"] / usual).where(after) if usual > 0 else np.nan
    return out

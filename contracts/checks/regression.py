"""Contract *regression* (only with ``--baseline``): no worse than the baseline run.

Compares run-level means over steps with loss tokens: mean |Δlogp| may not exceed
baseline * (1 + rel) + abs; the masked fraction may not exceed baseline + margin. A baseline
without steps is an error (nothing to compare with: fail closed).
"""

from __future__ import annotations

import duckdb

from contracts.context import CheckContext, CheckError, finding, not_applicable
from contracts.result import CheckResult, verdict
from contracts.spec import check

C = "regression"


def _mean(con: duckdb.DuckDBPyConnection, column: str) -> tuple[float | None, int]:
    """(mean of ``column`` over steps with loss tokens, number of steps)."""
    mean, n = con.execute(
        f"SELECT avg({column}), count(*) FROM steps WHERE coalesce(n_loss_tokens, 1) > 0"
    ).fetchall()[0]
    return mean, n


def _compare(ctx: CheckContext, column: str, threshold_of, what: str) -> CheckResult:
    if ctx.baseline is None:
        raise CheckError("regression checks need a baseline run")
    observed, n = _mean(ctx.con, column)
    if n == 0:
        return not_applicable("the run recorded no steps with loss tokens")
    base, n_base = _mean(ctx.baseline, column)
    if n_base == 0 or base is None:
        raise CheckError(f"baseline {ctx.baseline_dir} has no steps with {column}")
    threshold = threshold_of(base)
    bad = not (observed is not None and observed <= threshold)
    example = {"run_mean": observed, "baseline_mean": base, "baseline": str(ctx.baseline_dir)}
    return finding(
        verdict(n_violations=int(bad)),
        observed=observed,
        threshold=threshold,
        n_rows=n,
        n_violations=int(bad),
        examples=[example] if bad else [],
        message=f"run mean {what} vs baseline {base:.4g} over {n_base} steps",
    )


@check(C, "mismatch_abs_mean", needs_baseline=True, needs=("steps.mismatch_abs_mean",))
def mismatch_abs_mean(ctx: CheckContext) -> CheckResult:
    """Mean |train_logp - rollout_logp| no worse than the baseline's by more than the margin."""
    r = ctx.policy.regression
    return _compare(
        ctx,
        "mismatch_abs_mean",
        lambda base: base * (1.0 + r.mismatch_rel_margin) + r.mismatch_abs_margin,
        "mean |dlogp|",
    )


@check(C, "masked_fraction", needs_baseline=True, needs=("steps.masked_fraction",))
def masked_fraction(ctx: CheckContext) -> CheckResult:
    """Masked fraction no worse than the baseline's by more than the margin."""
    r = ctx.policy.regression
    return _compare(
        ctx, "masked_fraction", lambda base: base + r.masked_fraction_margin, "masked fraction"
    )

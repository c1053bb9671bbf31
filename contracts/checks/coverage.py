"""Whether per-token checks apply: a run without per-token rows is ``not_applicable`` only if it
never claimed any; samples that declare sampled tokens with none in the store fail (fail closed)."""

from __future__ import annotations

from contracts.context import CheckContext, finding, not_applicable
from contracts.result import FAIL, CheckResult


def missing_tokens(ctx: CheckContext, count: str, what: str) -> CheckResult | None:
    """None when ``ctx.token_counts[count]`` (``tokens`` or ``actions``) is non-zero; else a
    not_applicable or fail result."""
    if ctx.token_counts[count]:
        return None
    claimed = ctx.rows(
        "SELECT sample_id, step, n_response_tokens FROM samples "
        "WHERE tokens_sampled AND n_response_tokens > 0 ORDER BY sample_id"
    )
    if not claimed:
        return not_applicable(f"the run recorded no {what} (no samples with per-token rows)")
    n = len(claimed)
    return finding(
        FAIL,
        observed=n,
        threshold=0,
        n_rows=n,
        n_violations=n,
        examples=claimed[:5],
        message=f"{n} samples declare per-token rows but the tokens table has no {what}",
    )

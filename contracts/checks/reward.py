"""Contract *reward*: the stored total reward is exactly what its recorded components make.

Rules: every sample with ``reward_components`` rows has ``samples.reward`` = Σ weight · value over
its non-null components (float32 storage: |Δ| ≤ 1e-5 · max(1, |reward|)); a component row whose
value is null carries a failure reason (a judge that could not be parsed is a reason, never a
silent zero or a missing row).
"""

from __future__ import annotations

from contracts.context import CheckContext, not_applicable
from contracts.result import CheckResult
from contracts.spec import check

C = "reward"
REL_TOL = 1e-5
"""Relative tolerance of the recomputation (the total is stored as float32)."""


@check(C, "total_recomputes", needs=("reward_components", "samples.reward"))
def total_recomputes(ctx: CheckContext) -> CheckResult:
    """samples.reward equals Σ weight · value over the sample's non-null reward components."""
    if not ctx.scalar("SELECT count(*) FROM reward_components"):
        return not_applicable("the run recorded no reward components")
    source = """
        WITH c AS (SELECT sample_id, sum(weight * value) FILTER (WHERE value IS NOT NULL)
                              AS recomputed,
                          list(component || '=' || coalesce(value::VARCHAR, 'null') || '*'
                               || coalesce(weight::VARCHAR, 'null') ORDER BY component) AS terms
                   FROM reward_components GROUP BY sample_id)
        SELECT s.step, s.sample_id, s.reward, coalesce(c.recomputed, 0.0) AS recomputed, c.terms
        FROM samples s JOIN c ON c.sample_id = s.sample_id"""
    return ctx.count_violations(
        source=source,
        violation=f"abs(reward - recomputed) > {REL_TOL} * greatest(1.0, abs(reward))",
        order="sample_id",
        message="samples whose total reward differs from sum(weight * value) of its components",
    )


@check(C, "failed_components_have_reasons", needs=("reward_components",))
def failed_components_have_reasons(ctx: CheckContext) -> CheckResult:
    """A reward component without a value names why (e.g. judge_unparseable)."""
    if not ctx.scalar("SELECT count(*) FROM reward_components"):
        return not_applicable("the run recorded no reward components")
    return ctx.count_violations(
        source="SELECT step, sample_id, component, value, weight, failure_reason "
        "FROM reward_components WHERE value IS NULL",
        violation="nullif(failure_reason, '') IS NULL",
        order="sample_id, component",
        message="reward components without a value and without a failure reason",
    )

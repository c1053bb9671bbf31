"""Contract *long_horizon*: the critic and compaction facts of SAO and CompactionRL runs.

Rules: tokens the policy did not generate — prompts (a rebuilt context's system + resume too),
observations (the summary prompt too) and copied tails — are never in the loss; the segments of
one trajectory carry one reward; a step's policy-loss denominator equals the trainable tokens
(actions and summaries) in its loss across all segments (runs normalising over tokens,
``loss_denominator`` recorded); critic values and returns are finite on every generated token of
a run that records them; the critic's frozen (attention) parameters never change (one checksum
over the run). Runs without a critic or compaction are ``not_applicable``.
Simplification: the denominator rule needs every sample's tokens recorded
(``telemetry.token_sample_rate = 1``); steps with unsampled tokens are left out.
"""

from __future__ import annotations

from contracts.checks.coverage import missing_tokens
from contracts.context import CheckContext, not_applicable
from contracts.result import CheckResult
from contracts.spec import check

C = "long_horizon"
UNTRAINED = ("prompt", "observation", "tail", "padding")


@check(C, "untrained_roles_not_in_loss")
def untrained_roles_not_in_loss(ctx: CheckContext) -> CheckResult:
    """Prompt, observation and copied-tail tokens never carry loss."""
    skip = missing_tokens(ctx, "tokens", "tokens")
    if skip is not None:
        return skip
    roles = ", ".join(f"'{r}'" for r in UNTRAINED)
    return ctx.count_violations(
        source=f"SELECT sample_id, step, pos, token_id, role, segment, loss_mask FROM tokens "
        f"WHERE role IN ({roles})",
        violation="loss_mask",
        order="sample_id, pos",
        one_per="sample_id",
        message="prompt, observation or copied-tail tokens with loss_mask set",
    )


@check(C, "segments_share_reward", needs=("samples.parent_sample_id", "samples.segment"))
def segments_share_reward(ctx: CheckContext) -> CheckResult:
    """Every segment of a compacted trajectory carries the trajectory's reward."""
    if not ctx.scalar("SELECT count(*) FROM samples WHERE segment > 0"):
        return not_applicable("the run recorded no compacted trajectories (segment > 0)")
    source = """
        SELECT coalesce(parent_sample_id, sample_id) AS trajectory, any_value(step) AS step,
               count(*) AS segments, count(DISTINCT reward) AS rewards,
               min(reward) AS reward_min, max(reward) AS reward_max
        FROM samples GROUP BY 1 HAVING count(*) > 1"""
    return ctx.count_violations(
        source=source,
        violation="rewards <> 1 OR reward_min IS DISTINCT FROM reward_max",
        order="trajectory",
        message="compacted trajectories whose segments carry different rewards",
    )


@check(C, "loss_denominator", needs=("steps.loss_denominator",))
def loss_denominator(ctx: CheckContext) -> CheckResult:
    """The policy-loss denominator equals the step's trainable tokens across all segments."""
    if not ctx.scalar("SELECT count(loss_denominator) FROM steps"):
        return not_applicable("the run records no token-normalised loss denominator")
    skip = missing_tokens(ctx, "tokens", "tokens")
    if skip is not None:
        return skip
    source = """
        WITH full_steps AS (
            SELECT step FROM samples GROUP BY step HAVING bool_and(coalesce(tokens_sampled, false))
        ), counted AS (
            SELECT step, count(*) FILTER (WHERE loss_mask AND role IN ('action', 'summary'))
                   AS trainable_tokens,
                   count(DISTINCT sample_id) FILTER (WHERE segment > 0) AS later_segments
            FROM tokens GROUP BY step
        )
        SELECT s.step, s.loss_denominator, c.trainable_tokens, c.later_segments
        FROM steps s JOIN counted c USING (step) JOIN full_steps USING (step)
        WHERE s.loss_denominator IS NOT NULL"""
    return ctx.count_violations(
        source=source,
        violation="loss_denominator <> trainable_tokens",
        order="step",
        message="steps whose loss denominator differs from their trainable-token count "
        "(a mean of segment means, or tokens missing from the set)",
    )


@check(C, "values_finite", needs=("tokens.value", "tokens.return"))
def values_finite(ctx: CheckContext) -> CheckResult:
    """Critic values and returns are finite on every generated token of a run with a critic."""
    if not ctx.scalar("SELECT count(value) FROM tokens"):
        return not_applicable("the run records no critic values (tokens.value)")
    return ctx.count_violations(
        source='SELECT sample_id, step, pos, role, value, "return" FROM tokens '
        "WHERE role IN ('action', 'summary')",
        violation='NOT (isfinite(value) AND isfinite("return"))',
        order="sample_id, pos",
        one_per="sample_id",
        message="generated tokens with a null, NaN or infinite critic value or return",
    )


@check(C, "critic_attention_frozen", needs=("steps.critic_frozen_checksum",))
def critic_attention_frozen(ctx: CheckContext) -> CheckResult:
    """The critic's frozen parameters are unchanged by training (one checksum all run)."""
    if not ctx.scalar("SELECT count(critic_frozen_checksum) FROM steps"):
        return not_applicable("the run records no critic checksum (no critic)")
    source = """
        SELECT step, critic_frozen_checksum,
               first_value(critic_frozen_checksum) OVER (ORDER BY step) AS first_checksum
        FROM steps WHERE critic_frozen_checksum IS NOT NULL"""
    return ctx.count_violations(
        source=source,
        violation="critic_frozen_checksum <> first_checksum",
        order="step",
        message="steps after which the critic's frozen (attention) parameters had changed",
    )

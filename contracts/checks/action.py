"""Contract *action & probability*: the tokens in the loss are the rollout's actions, scored twice.

Rules: finite rollout and train log-probs on every action token; ``loss_mask`` only on actions;
trainer token IDs equal the rollout's (TITO); tokenizer, chat template and sampling recorded and
consistent; the recorded trust mask equals the run's declared rule recomputed from the stored
log-probs; per-step mismatch and masked fraction within the policy's thresholds.
Simplification: tokens within ``trust_boundary_tol`` (in log-ratio) of a mask bound are not
judged, since the trainer rounds exp() in fp32 and DuckDB in fp64.
"""

from __future__ import annotations

import math

from contracts.checks.coverage import missing_tokens
from contracts.context import CheckContext, not_applicable
from contracts.result import CheckResult
from contracts.spec import check

C = "action"
_TOKEN_COLS = "sample_id, step, pos, token_id, role"
_GENERATED = "('action', 'summary')"
"""Roles the policy generated (log-probs, trust mask)."""


@check(C, "logp_finite", needs=("tokens.rollout_logp", "tokens.train_logp"), version=2)
def logp_finite(ctx: CheckContext) -> CheckResult:
    """Every generated token (action, summary) has finite rollout and train log-probs."""
    skip = missing_tokens(ctx, "actions", "action tokens")
    if skip is not None:
        return skip
    return ctx.count_violations(
        source=f"SELECT {_TOKEN_COLS}, rollout_logp, train_logp FROM tokens "
        f"WHERE role IN {_GENERATED}",
        violation="NOT (isfinite(rollout_logp) AND isfinite(train_logp))",
        order="sample_id, pos",
        one_per="sample_id",
        message="action tokens with a null, NaN or infinite rollout or train log-prob",
    )


@check(C, "loss_mask_on_actions", version=2)
def loss_mask_on_actions(ctx: CheckContext) -> CheckResult:
    """loss_mask is set only on generated tokens: actions and summaries (never prompt,
    observation or copied tail)."""
    skip = missing_tokens(ctx, "tokens", "tokens")
    if skip is not None:
        return skip
    return ctx.count_violations(
        source=f"SELECT {_TOKEN_COLS}, loss_mask, mask_reason FROM tokens",
        violation="loss_mask AND (role IS NULL OR role NOT IN ('action', 'summary'))",
        order="sample_id, pos",
        message="tokens in the loss whose role is not 'action' or 'summary'",
    )


@check(C, "tito_exact_ids", needs=("tokens.train_token_id",))
def tito_exact_ids(ctx: CheckContext) -> CheckResult:
    """The trainer scored the rollout's exact token IDs (first divergence per sample shown)."""
    skip = missing_tokens(ctx, "tokens", "tokens")
    if skip is not None:
        return skip
    if not ctx.token_counts["train_token_ids"]:
        return not_applicable("the run records no trainer token ids (tokens.train_token_id)")
    return ctx.count_violations(
        source=f"SELECT {_TOKEN_COLS}, train_token_id, prefix_hash FROM tokens "
        "WHERE train_token_id IS NOT NULL",
        violation="train_token_id <> token_id",
        order="sample_id, pos",
        one_per="sample_id",
        message="tokens whose trainer id differs from the rollout's id at the same position",
    )


@check(
    C,
    "run_metadata_consistent",
    needs=("samples.tokenizer_rev", "samples.chat_template_rev", "samples.sampling"),
)
def run_metadata_consistent(ctx: CheckContext) -> CheckResult:
    """Every sample records tokenizer, chat-template revisions and sampling, equal across the run."""
    if not ctx.scalar("SELECT count(*) FROM samples"):
        return not_applicable("the run recorded no samples")
    source = """
        WITH ref AS (SELECT
            coalesce((SELECT any_value(tokenizer_rev) FROM runs),
                     (SELECT mode(tokenizer_rev) FROM samples)) AS run_tokenizer_rev,
            coalesce((SELECT any_value(chat_template_rev) FROM runs),
                     (SELECT mode(chat_template_rev) FROM samples)) AS run_chat_template_rev,
            (SELECT mode(sampling) FROM samples) AS run_sampling)
        SELECT s.sample_id, s.step, s.tokenizer_rev, s.chat_template_rev, s.sampling, ref.*
        FROM samples s, ref"""
    violation = """NOT (
        nullif(tokenizer_rev, '') IS NOT NULL AND nullif(chat_template_rev, '') IS NOT NULL
        AND nullif(sampling, '') IS NOT NULL AND tokenizer_rev = run_tokenizer_rev
        AND chat_template_rev = run_chat_template_rev AND sampling = run_sampling)"""
    return ctx.count_violations(
        source=source,
        violation=violation,
        order="sample_id",
        message="samples missing tokenizer / chat-template revision or sampling config, or "
        "differing from the run's",
    )


def _rule_sql(ctx: CheckContext) -> tuple[str, str, list[float], str]:
    """(expected-reason SQL over ratio ``r``, boundary SQL over log-ratio ``d``, params, label)."""
    run, tol = ctx.run, ctx.policy.thresholds.trust_boundary_tol
    rule = run.trust_rule
    if rule == "icepop":
        beta = float(run.icepop_beta)
        bounds = [math.log(beta), -math.log(beta)]
        expected = "CASE WHEN r >= 1.0 / ? AND r <= ? THEN 'kept' ELSE 'icepop' END"
        return expected, _near(bounds, tol), [beta, beta], f"icepop beta={beta:g}"
    if rule == "dis":
        lo, hi = float(run.dis_eps_low), float(run.dis_eps_high)
        bounds = [math.log(1.0 + hi)] + ([math.log(1.0 - lo)] if lo < 1 else [])
        expected = (
            "CASE WHEN r <= 1.0 - ? THEN 'dis_low' WHEN NOT (r < 1.0 + ?) THEN 'dis_high' "
            "ELSE 'kept' END"
        )
        return expected, _near(bounds, tol), [lo, hi], f"dis eps_low={lo:g} eps_high={hi:g}"
    return "'kept'", "false", [], "no trust mask (trust_rule none)"


def _near(bounds: list[float], tol: float) -> str:
    return " OR ".join(f"abs(d - ({b!r})) <= {tol!r}" for b in bounds)


@check(
    C,
    "trust_mask_recomputed",
    needs=("tokens.rollout_logp", "tokens.train_logp", "tokens.trust_mask", "tokens.mask_reason"),
    version=2,
)
def trust_mask_recomputed(ctx: CheckContext) -> CheckResult:
    """The recorded trust mask and reason of every generated token (actions, summaries) equal the
    run's declared rule recomputed from its log-probs (tokens of samples out of the batch:
    ``stale``, or ``dropped`` for environment failures and dropped groups)."""
    skip = missing_tokens(ctx, "actions", "action tokens")
    if skip is not None:
        return skip
    expected, near, params, label = _rule_sql(ctx)
    source = f"""
        SELECT sample_id, step, pos, rollout_logp, train_logp, r AS ratio, trust_mask,
               mask_reason, coalesce(sample_status, {expected}) AS expected_reason
        FROM (SELECT sample_id, step, pos, rollout_logp, train_logp, trust_mask, mask_reason,
                     CASE WHEN sample_id IN (SELECT sample_id FROM samples WHERE status = 'stale')
                          THEN 'stale'
                          WHEN sample_id IN (SELECT sample_id FROM samples
                                             WHERE status IN ('env_failure', 'dropped_group'))
                          THEN 'dropped' END AS sample_status,
                     (train_logp - rollout_logp)::DOUBLE AS d, exp(d) AS r
              FROM tokens
              WHERE role IN {_GENERATED} AND isfinite(rollout_logp) AND isfinite(train_logp))
        WHERE NOT ({near})"""
    return ctx.count_violations(
        source=source,
        violation="trust_mask IS DISTINCT FROM (expected_reason = 'kept') "
        "OR mask_reason IS DISTINCT FROM expected_reason",
        order="sample_id, pos",
        message=f"action tokens whose recorded trust mask or reason differs from {label}",
        params=params,
    )


def _step_metric(ctx: CheckContext, column: str, limit: float, what: str) -> CheckResult:
    if not ctx.scalar("SELECT count(*) FROM steps"):
        return not_applicable("the run recorded no steps")
    source = (
        f"SELECT step, rank, policy_version, {column}, n_loss_tokens FROM steps "
        "WHERE coalesce(n_loss_tokens, 1) > 0"
    )
    result = ctx.count_violations(
        source=source,
        violation=f"NOT ({column} <= {limit!r})",
        order=f"{column} DESC NULLS FIRST, step",
        message=f"steps whose {what} exceeds {limit:g} (or is missing)",
    )
    worst = ctx.scalar(f"SELECT max({column}) FROM ({source})")
    return result.replace(observed=worst, threshold=limit)


@check(C, "mismatch_abs_mean", needs=("steps.mismatch_abs_mean",))
def mismatch_abs_mean(ctx: CheckContext) -> CheckResult:
    """Per-step mean |train_logp - rollout_logp| within the policy's threshold."""
    limit = ctx.policy.thresholds.mismatch_abs_mean
    return _step_metric(ctx, "mismatch_abs_mean", limit, "mean |dlogp|")


@check(C, "mismatch_abs_p99", needs=("steps.mismatch_abs_p99",))
def mismatch_abs_p99(ctx: CheckContext) -> CheckResult:
    """Per-step p99 |train_logp - rollout_logp| within the policy's threshold."""
    limit = ctx.policy.thresholds.mismatch_abs_p99
    return _step_metric(ctx, "mismatch_abs_p99", limit, "p99 |dlogp|")


@check(C, "masked_fraction", needs=("steps.masked_fraction",))
def masked_fraction(ctx: CheckContext) -> CheckResult:
    """Per-step fraction of loss tokens removed by the trust masks within the policy's threshold."""
    limit = ctx.policy.thresholds.masked_fraction
    return _step_metric(ctx, "masked_fraction", limit, "masked fraction")

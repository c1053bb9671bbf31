"""Contract *agentic*: multi-turn, asynchronous rollouts keep their token facts.

Rules: observation tokens are never in the loss; every turn's engine context equals the exact
trajectory before it (TITO across turns: ``turns.context_hash = turns.prefix_hash``, and the
stored per-token prefix hash agrees); no token was decoded against keys/values of another policy
version than its own (``tokens.kv_version = policy_version_rollout``); a worker's versions never go
back in time (turns it finished before another started carry no newer version; its switches go up);
samples the environment failed are never trained. Runs without turns (single-turn, sync) are
``not_applicable`` for the turn and worker rules.
"""

from __future__ import annotations

from contracts.context import CheckContext, not_applicable
from contracts.result import CheckResult
from contracts.spec import check

C = "agentic"
ENV_FAILURES = ("env_timeout", "env_crash", "tool_malformed")


def _no_turns(ctx: CheckContext) -> CheckResult | None:
    if not ctx.scalar("SELECT count(*) FROM turns"):
        return not_applicable("the run recorded no turns (no async multi-turn rollout)")
    return None


@check(C, "observations_not_in_loss")
def observations_not_in_loss(ctx: CheckContext) -> CheckResult:
    """No observation token carries loss (the policy did not generate it)."""
    if not ctx.scalar("SELECT count(*) FROM tokens WHERE role = 'observation'"):
        return not_applicable("the run recorded no observation tokens")
    return ctx.count_violations(
        source="SELECT sample_id, step, pos, token_id, turn, loss_mask FROM tokens "
        "WHERE role = 'observation'",
        violation="loss_mask",
        order="sample_id, pos",
        one_per="sample_id",
        message="observation tokens with loss_mask set",
    )


@check(C, "tito_prefix_across_turns")
def tito_prefix_across_turns(ctx: CheckContext) -> CheckResult:
    """Every turn's engine context is the exact trajectory before it (prefix hashes equal)."""
    skip = _no_turns(ctx)
    if skip is not None:
        return skip
    source = """
        SELECT u.sample_id, u.step, u.turn, u.worker, u.start_pos, u.context_len,
               u.context_hash, u.prefix_hash, t.prefix_hash AS token_prefix_hash
        FROM turns u LEFT JOIN tokens t
          ON t.sample_id = u.sample_id AND t.pos = u.start_pos - 1"""
    return ctx.count_violations(
        source=source,
        violation="context_hash <> prefix_hash OR context_hash IS NULL "
        "OR (token_prefix_hash IS NOT NULL AND token_prefix_hash <> prefix_hash)",
        order="sample_id, turn",
        one_per="sample_id",
        message="turns whose engine context differs from the exact trajectory before them "
        "(history re-tokenized or rebuilt)",
    )


@check(C, "kv_version_equals_token_version")
def kv_version_equals_token_version(ctx: CheckContext) -> CheckResult:
    """Every generated token was decoded against keys/values of its own policy version."""
    if not ctx.scalar("SELECT count(*) FROM tokens WHERE kv_version IS NOT NULL"):
        return not_applicable("the run records no KV versions (tokens.kv_version)")
    return ctx.count_violations(
        source="SELECT sample_id, step, pos, turn, policy_version_rollout, kv_version "
        "FROM tokens WHERE kv_version IS NOT NULL",
        violation="kv_version <> policy_version_rollout",
        order="sample_id, pos",
        one_per="sample_id",
        message="tokens decoded against keys/values of another weights version "
        "(KV kept across a weight switch)",
    )


@check(C, "versions_monotonic_per_worker")
def versions_monotonic_per_worker(ctx: CheckContext) -> CheckResult:
    """A worker never generates with an older version after a newer one (turns and switches)."""
    skip = _no_turns(ctx)
    if skip is not None:
        return skip
    source = """
        WITH before AS (
            SELECT y.sample_id, y.turn, y.worker, y.step, y.policy_version_first,
                   max(x.policy_version_last) AS newest_before
            FROM turns y JOIN turns x ON x.worker = y.worker AND x.t_gen_end <= y.t_gen_start
            GROUP BY ALL),
        switches AS (
            SELECT engine, policy_version, ts,
                   lag(policy_version) OVER (PARTITION BY engine ORDER BY ts) AS prev
            FROM weight_syncs WHERE phase = 'switch' AND engine LIKE 'worker-%')
        SELECT 'turn' AS kind, sample_id, turn, worker::VARCHAR AS worker, step,
               policy_version_first AS version, newest_before AS previous FROM before
        UNION ALL
        SELECT 'switch', NULL, NULL, engine, NULL, policy_version, prev FROM switches"""
    return ctx.count_violations(
        source=source,
        violation="previous IS NOT NULL AND version < previous",
        order="kind, worker, version",
        message="turns or weight switches of a worker with an older version than one it had "
        "already used",
    )


@check(C, "env_failures_not_trained")
def env_failures_not_trained(ctx: CheckContext) -> CheckResult:
    """Samples the environment failed (timeout, crash, malformed tool output) are never trained."""
    failures = ", ".join(f"'{r}'" for r in ENV_FAILURES)
    if not ctx.scalar(f"SELECT count(*) FROM samples WHERE failure_reason IN ({failures})"):
        return not_applicable("the run recorded no environment failures")
    return ctx.count_violations(
        source=f"SELECT sample_id, step, status, failure_reason FROM samples "
        f"WHERE failure_reason IN ({failures})",
        violation="status = 'trained'",
        order="sample_id",
        message="environment-failed samples that were trained",
    )

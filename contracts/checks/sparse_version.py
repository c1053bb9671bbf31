"""Contract *sparse & version*: the sparse choices and the weights behind every trained sample agree.

Rules: train and rollout Top-k index *sets* are equal for every recorded (sample, layer, pos)
(a key recorded by one engine only is a violation); when π_old is its own forward of the
trainer (``algorithm.old_logp = "separate"``), it repeats the training forward on every action
token (GLM-5's nondeterministic Top-k failure shows here first); every trained sample carries
its rollout and train policy versions, staleness = train - rollout <= τ (the run's declared
limit, optionally capped by the policy); every trained sample's rollout version has a complete
weight sync: the required phases, in canonical order by time, ending in ``ack`` (per receiving
engine: an async run's workers record their own send, switch and ack under the sync's id).
"""

from __future__ import annotations

from contracts.context import CheckContext, CheckError, not_applicable
from contracts.result import CheckResult
from contracts.spec import check
from observability.enums import SYNC_PHASES

C = "sparse_version"


@check(C, "topk_index_sets_equal", needs=("topk",))
def topk_index_sets_equal(ctx: CheckContext) -> CheckResult:
    """Train and rollout Top-k index sets are equal for every recorded (sample, layer, pos)."""
    if not ctx.scalar("SELECT count(*) FROM topk"):
        return not_applicable("the run recorded no Top-k indices")
    side = """SELECT sample_id, coalesce(layer, -1) AS layer_key, layer, pos, step,
                     list_sort(indices) AS idx, boundary_ties FROM topk WHERE engine = '{}'"""
    source = f"""
        WITH t AS ({side.format("train")}), r AS ({side.format("rollout")})
        SELECT coalesce(t.sample_id, r.sample_id) AS sample_id,
               coalesce(t.layer, r.layer) AS layer, coalesce(t.pos, r.pos) AS pos,
               coalesce(t.step, r.step) AS step, t.idx AS train_indices,
               r.idx AS rollout_indices,
               list_filter(t.idx, lambda x: NOT list_contains(r.idx, x)) AS train_only,
               list_filter(r.idx, lambda x: NOT list_contains(t.idx, x)) AS rollout_only,
               t.boundary_ties AS train_boundary_ties, r.boundary_ties AS rollout_boundary_ties
        FROM t FULL OUTER JOIN r
          ON t.sample_id = r.sample_id AND t.layer_key = r.layer_key AND t.pos = r.pos"""
    return ctx.count_violations(
        source=source,
        violation="train_indices IS NULL OR rollout_indices IS NULL "
        "OR train_indices <> rollout_indices",
        order="sample_id, layer, pos",
        message="(sample, layer, pos) keys whose train and rollout Top-k sets differ or are "
        "recorded by one engine only",
    )


@check(C, "trainer_forward_repeatable", needs=("tokens.old_logp", "tokens.train_logp"))
def trainer_forward_repeatable(ctx: CheckContext) -> CheckResult:
    """A separate π_old forward of the same weights reproduces the training forward's log-probs."""
    source_of_old = ctx.run.config.get("algorithm", {}).get("old_logp")
    if source_of_old != "separate":
        return not_applicable(
            f"π_old is not a separate trainer forward (algorithm.old_logp={source_of_old!r})"
        )
    tol = ctx.policy.thresholds.trainer_repeat_tol
    source = """SELECT sample_id, step, pos, token_id, old_logp, train_logp,
                       abs(old_logp - train_logp) AS repeat_abs
                FROM tokens WHERE role = 'action' AND loss_mask"""
    result = ctx.count_violations(
        source=source,
        violation=f"repeat_abs > {tol!r}",
        order="repeat_abs DESC NULLS FIRST, sample_id, pos",
        message=f"action tokens whose separate π_old forward differs from the training forward "
        f"by more than {tol} nats (a nondeterministic trainer kernel)",
    )
    return result.replace(
        observed=ctx.scalar(f"SELECT max(repeat_abs) FROM ({source})"), threshold=tol
    )


def staleness_limit(ctx: CheckContext) -> int:
    """τ: the run's declared limit, capped by the policy's ``staleness_limit`` when set."""
    declared, cap = ctx.run.staleness_limit, ctx.policy.thresholds.staleness_limit
    limits = [int(x) for x in (declared, cap) if x is not None]
    if not limits:
        raise CheckError("neither the run (runs.staleness_limit) nor the policy declares τ")
    return min(limits)


@check(
    C,
    "staleness_within_limit",
    needs=("samples.policy_version_rollout", "samples.policy_version_train", "samples.staleness"),
)
def staleness_within_limit(ctx: CheckContext) -> CheckResult:
    """Every trained sample carries its policy versions and staleness <= τ."""
    if not ctx.scalar("SELECT count(*) FROM samples WHERE status = 'trained'"):
        return not_applicable("the run recorded no trained samples")
    tau = staleness_limit(ctx)
    source = """SELECT sample_id, step, policy_version_rollout, policy_version_train, staleness
                FROM samples WHERE status = 'trained'"""
    result = ctx.count_violations(
        source=source,
        violation=f"""NOT (policy_version_rollout IS NOT NULL AND policy_version_train IS NOT NULL
            AND staleness = policy_version_train - policy_version_rollout AND staleness <= {tau})""",
        order="staleness DESC NULLS FIRST, sample_id",
        message=f"trained samples without policy versions or with staleness > τ={tau}",
    )
    return result.replace(
        observed=ctx.scalar(f"SELECT max(staleness) FROM ({source})"), threshold=tau
    )


@check(C, "sync_complete", needs=("samples.policy_version_rollout", "weight_syncs"))
def sync_complete(ctx: CheckContext) -> CheckResult:
    """No trained sample comes from a version whose weight sync lacks a complete sequence ending in ack."""
    if not ctx.scalar("SELECT count(*) FROM samples WHERE status = 'trained'"):
        return not_applicable("the run recorded no trained samples")
    required = list(ctx.policy.thresholds.sync_required_phases)
    source = """
        WITH p AS (SELECT sync_id, engine, policy_version, phase, ts,
                          list_position(?::VARCHAR[], phase) AS ord FROM weight_syncs),
        q AS (SELECT *, lag(ord) OVER (PARTITION BY sync_id, engine ORDER BY ts, ord) AS prev
              FROM p),
        syncs AS (
            SELECT sync_id, engine, min(policy_version) AS policy_version,
                   count(DISTINCT policy_version) = 1 AND bool_and(prev IS NULL OR ord > prev)
                   AND list_has_all(list(phase), ?::VARCHAR[]) AS complete,
                   list(phase ORDER BY ts, ord) AS phases
            FROM q GROUP BY sync_id, engine),
        versions AS (
            SELECT policy_version, bool_or(complete) AS complete,
                   list({'sync_id': sync_id, 'phases': phases} ORDER BY sync_id) AS syncs
            FROM syncs GROUP BY policy_version)
        SELECT s.sample_id, s.step, s.policy_version_rollout, v.complete AS sync_complete,
               v.syncs
        FROM samples s LEFT JOIN versions v ON v.policy_version = s.policy_version_rollout
        WHERE s.status = 'trained'"""
    return ctx.count_violations(
        source=source,
        violation="NOT sync_complete",
        order="policy_version_rollout, sample_id",
        one_per="policy_version_rollout",
        message=f"trained samples whose rollout version has no complete weight sync "
        f"(phases {required} in order, ending in ack); one example per version",
        params=[list(SYNC_PHASES), required],
    )

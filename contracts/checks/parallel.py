"""Contract *parallel*: a multi-rank run is one complete run, and tensor parallelism leaves the
action probabilities where TP = 1 puts them.

- ``ranks_complete``: every recorded step has a ``steps`` row from each rank 0..world_size-1
  (``runs.world_size``), and the memory ledger (``memory_peaks``) covers the same ranks.
- ``ranks_agree``: under TP every rank holds the full vocabulary-parallel result, so the
  ``train_logprobs`` rows of all ranks are bitwise equal to rank 0's.
- ``tp_logprobs`` (with ``--baseline``): when the run and the baseline recorded ``train_logprobs``
  at different TP sizes, their log-probs and logsumexp at policy version 0 (the same weights, by
  construction of a comparison run) agree within ``thresholds.tp_logprob_tol`` on every target
  both recorded (same step, sample, position and token).
"""

from __future__ import annotations

from contracts.context import CheckContext, CheckError, finding, not_applicable
from contracts.result import CheckResult, verdict
from contracts.spec import check

C = "parallel"


def _world_size(ctx: CheckContext) -> int:
    size = ctx.scalar("SELECT max(world_size) FROM runs")
    if size is None:
        raise CheckError("the runs table has no world_size")
    return int(size)


@check(C, "ranks_complete")
def ranks_complete(ctx: CheckContext) -> CheckResult:
    """Every step was recorded by every rank; the memory ledger covers every rank."""
    world = _world_size(ctx)
    steps = ctx.count_violations(
        source="SELECT step, count(DISTINCT rank) AS n_ranks, min(rank) AS lo, max(rank) AS hi "
        "FROM steps GROUP BY step",
        violation=f"n_ranks <> {world} OR lo <> 0 OR hi <> {world - 1}",
        columns="step, n_ranks, lo, hi",
        order="step",
        message=f"steps recorded by all {world} rank(s)",
    )
    if steps.n_violations or not ctx.scalar("SELECT count(*) FROM memory_peaks"):
        return steps
    ranks = [r["rank"] for r in ctx.rows("SELECT DISTINCT rank FROM memory_peaks ORDER BY 1")]
    bad = ranks != list(range(world))
    return finding(
        verdict(n_violations=int(bad)),
        observed=len(ranks),
        threshold=world,
        n_rows=steps.n_rows,
        n_violations=int(bad),
        examples=[{"memory_peaks_ranks": ranks, "world_size": world}] if bad else [],
        message=f"steps and memory_peaks recorded by all {world} rank(s)",
    )


@check(C, "ranks_agree")
def ranks_agree(ctx: CheckContext) -> CheckResult:
    """Every rank's train_logprobs equal rank 0's bitwise (replicated vocab-parallel results)."""
    if not ctx.scalar("SELECT count(*) FROM train_logprobs WHERE rank > 0"):
        return not_applicable("no train_logprobs rows from a rank other than 0")
    return ctx.count_violations(
        source="SELECT o.rank, o.step, o.sample_id, o.pos, o.logp, z.logp AS rank0_logp, "
        "o.logsumexp, z.logsumexp AS rank0_logsumexp FROM train_logprobs o "
        "LEFT JOIN train_logprobs z ON z.rank = 0 AND z.step = o.step "
        "AND z.sample_id = o.sample_id AND z.pos = o.pos WHERE o.rank > 0",
        violation="logp IS DISTINCT FROM rank0_logp OR logsumexp IS DISTINCT FROM rank0_logsumexp",
        order="step, sample_id, pos, rank",
        message="train_logprobs of every rank equal rank 0's",
    )


@check(C, "tp_logprobs", needs_baseline=True)
def tp_logprobs(ctx: CheckContext) -> CheckResult:
    """TP = N log-probs and logsumexp equal the baseline's TP = M ones on the same weights."""
    if ctx.baseline is None:
        raise CheckError("tp_logprobs needs a baseline run")
    mine = ctx.scalar("SELECT max(tp_size) FROM train_logprobs")
    theirs = ctx.baseline.execute("SELECT max(tp_size) FROM train_logprobs").fetchall()[0][0]
    if mine is None or theirs is None:
        return not_applicable("train_logprobs not recorded by the run and the baseline both")
    if mine == theirs:
        return not_applicable(f"run and baseline both at TP = {mine}")
    base = ctx.baseline.sql(
        "SELECT step, sample_id, pos, token_id, logp, logsumexp FROM train_logprobs "
        "WHERE rank = 0 AND policy_version = 0"
    ).to_arrow_table()
    ctx.con.register("baseline_logprobs", base)
    tol = ctx.policy.thresholds.tp_logprob_tol
    try:
        n, worst = ctx.con.execute(
            "SELECT count(*), max(greatest(abs(r.logp - b.logp), abs(r.logsumexp - b.logsumexp))) "
            "FROM train_logprobs r JOIN baseline_logprobs b USING (step, sample_id, pos, token_id) "
            "WHERE r.rank = 0 AND r.policy_version = 0"
        ).fetchall()[0]
        examples = ctx.rows(
            "SELECT r.step, r.sample_id, r.pos, r.logp, b.logp AS baseline_logp, r.logsumexp, "
            "b.logsumexp AS baseline_logsumexp FROM train_logprobs r "
            "JOIN baseline_logprobs b USING (step, sample_id, pos, token_id) "
            "WHERE r.rank = 0 AND r.policy_version = 0 AND "
            "greatest(abs(r.logp - b.logp), abs(r.logsumexp - b.logsumexp)) > ? "
            "ORDER BY 1, 2, 3 LIMIT 5",
            [tol],
        )
    finally:
        ctx.con.unregister("baseline_logprobs")
    if not n:
        return not_applicable("no target recorded at policy version 0 by both runs")
    bad = worst is None or worst > tol
    return finding(
        verdict(n_violations=int(bad)),
        observed=worst,
        threshold=tol,
        n_rows=n,
        n_violations=len(examples) if bad else 0,
        examples=examples,
        message=f"max |Δlogp|, |Δlogsumexp| at TP = {mine} vs the baseline's TP = {theirs}",
    )

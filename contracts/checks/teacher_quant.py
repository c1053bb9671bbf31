"""Contract *teacher & quantization*: distillation targets exist, every quantizer made the same bits.

Rules: a teacher-scored sample (``samples.teacher_id`` set, or any token with a teacher log-prob)
has a teacher ID and a finite teacher log-prob on every recorded action token; routes are
traceable (each domain goes to exactly one teacher, every sample of a routed domain names it, and
the per-step ``teacher_routes`` rows count exactly those samples); the teacher scored the ids and
prefix the rollout produced and the student trained on (the teacher's own prefix hash equals the
rollout's, and the trainer's ids equal the rollout's up to the token); for every
(policy version, tensor) the ``qat_fake`` and ``offline_real`` rows (and ``rollout_load`` when
present) have equal code/scale/zero hashes and equal quantizer spec. A (version, tensor) missing
one of the two required producers is a violation: bit-identity is unproven (fail closed).
"""

from __future__ import annotations

from contracts.context import CheckContext, not_applicable
from contracts.result import CheckResult
from contracts.spec import check

C = "teacher_quant"

SPEC_COLUMNS = (
    "bits",
    "qmin",
    "qmax",
    "group_size",
    "symmetric",
    "scale_dtype",
    "rounding",
    "packing",
)
"""Quantizer spec columns that must agree (mirrors ``core.quant.wiring.SPEC_COLUMNS``)."""
HASH_COLUMNS = ("scale_hash", "code_hash", "zero_hash")
"""Tensor hashes that must agree (mirrors ``core.quant.wiring.HASH_COLUMNS``)."""
REQUIRED_PRODUCERS = ("qat_fake", "offline_real")


@check(C, "teacher_logps_present", needs=("tokens.teacher_logp", "samples.teacher_id"))
def teacher_logps_present(ctx: CheckContext) -> CheckResult:
    """Teacher-scored samples have a teacher ID and teacher log-probs on every action token."""
    n_samples = ctx.scalar("SELECT count(*) FROM samples WHERE teacher_id IS NOT NULL")
    n_tokens = ctx.token_counts["teacher_logps"]
    if not n_samples and not n_tokens:
        return not_applicable("no sample is teacher-scored")
    source = """
        WITH ids AS (SELECT sample_id FROM samples WHERE teacher_id IS NOT NULL
                     UNION SELECT sample_id FROM tokens WHERE teacher_logp IS NOT NULL),
        tok AS (
            SELECT t.sample_id, count(*) FILTER (WHERE t.role = 'action') AS n_action_tokens,
                   count(*) FILTER (WHERE t.role = 'action'
                                    AND NOT coalesce(isfinite(t.teacher_logp), false))
                       AS n_missing_teacher_logp,
                   min(t.pos) FILTER (WHERE t.role = 'action'
                                      AND NOT coalesce(isfinite(t.teacher_logp), false))
                       AS first_missing_pos
            FROM tokens t SEMI JOIN ids ON t.sample_id = ids.sample_id GROUP BY t.sample_id)
        SELECT ids.sample_id, s.step, s.teacher_id, coalesce(tok.n_action_tokens, 0)
               AS n_action_tokens, coalesce(tok.n_missing_teacher_logp, 0)
               AS n_missing_teacher_logp, tok.first_missing_pos
        FROM ids LEFT JOIN samples s ON s.sample_id = ids.sample_id
                 LEFT JOIN tok ON tok.sample_id = ids.sample_id"""
    return ctx.count_violations(
        source=source,
        violation="nullif(teacher_id, '') IS NULL OR n_missing_teacher_logp > 0",
        order="sample_id",
        message="teacher-scored samples without a teacher id or with action tokens lacking a "
        "finite teacher log-prob",
    )


@check(C, "teacher_routes_traceable", needs=("teacher_routes", "samples.teacher_id"))
def teacher_routes_traceable(ctx: CheckContext) -> CheckResult:
    """Each routed domain goes to one teacher; every sample of it names that teacher; the
    per-step route rows count exactly those samples."""
    n_routes = ctx.scalar("SELECT count(*) FROM teacher_routes")
    n_named = ctx.scalar("SELECT count(*) FROM samples WHERE teacher_id IS NOT NULL")
    if not n_routes and not n_named:
        return not_applicable("the run routed no sample to a teacher")
    source = """
        WITH s AS (
            SELECT step, domain, teacher_id, count(*) AS n_samples FROM samples
            WHERE teacher_id IS NOT NULL OR domain IN (SELECT domain FROM teacher_routes)
            GROUP BY ALL),
        r AS (SELECT step, domain, teacher_id, n_samples AS n_routed FROM teacher_routes),
        d AS (SELECT domain, count(DISTINCT teacher_id) AS n_teachers,
                     string_agg(DISTINCT teacher_id, ', ') AS teachers
              FROM (SELECT domain, teacher_id FROM teacher_routes
                    UNION ALL SELECT domain, teacher_id FROM samples WHERE teacher_id IS NOT NULL)
              GROUP BY domain)
        SELECT coalesce(s.step, r.step) AS step, coalesce(s.domain, r.domain) AS domain,
               coalesce(s.teacher_id, r.teacher_id) AS teacher_id, s.n_samples, r.n_routed,
               d.n_teachers, d.teachers
        FROM s FULL JOIN r ON s.step = r.step AND s.domain = r.domain
                           AND s.teacher_id IS NOT DISTINCT FROM r.teacher_id
        LEFT JOIN d ON d.domain = coalesce(s.domain, r.domain)"""
    return ctx.count_violations(
        source=source,
        violation="teacher_id IS NULL OR n_samples IS DISTINCT FROM n_routed OR n_teachers <> 1",
        order="step, domain, teacher_id",
        message="(step, domain, teacher) groups with unrouted samples of a routed domain, more "
        "than one teacher per domain, or route rows that do not count the samples",
    )


@check(
    C,
    "teacher_same_ids",
    needs=("tokens.teacher_logp", "tokens.teacher_prefix_hash", "tokens.train_token_id"),
)
def teacher_same_ids(ctx: CheckContext) -> CheckResult:
    """The teacher scored the rollout's ids and prefix, and the student trained on the same."""
    if not ctx.token_counts["teacher_logps"]:
        return not_applicable("no token has a teacher log-prob")
    source = """
        SELECT step, sample_id, pos, token_id, train_token_id, prefix_hash, teacher_prefix_hash,
               teacher_logp, bool_and(coalesce(train_token_id = token_id, false))
                   OVER (PARTITION BY sample_id ORDER BY pos) AS student_prefix_same
        FROM tokens"""
    return ctx.count_violations(
        source=f"SELECT * FROM ({source}) WHERE teacher_logp IS NOT NULL",
        violation="teacher_prefix_hash IS DISTINCT FROM prefix_hash OR NOT student_prefix_same",
        order="sample_id, pos",
        one_per="sample_id",
        message="teacher-scored tokens whose teacher prefix differs from the rollout's, or whose "
        "student ids differ from the rollout's up to that token",
    )


@check(C, "quant_bit_identical", needs=("qparams",))
def quant_bit_identical(ctx: CheckContext) -> CheckResult:
    """For every (policy version, tensor), QAT fake-quant and offline real-quant are bit-identical."""
    if not ctx.scalar("SELECT count(*) FROM qparams"):
        return not_applicable("the run recorded no quantization parameters")
    compared = (*SPEC_COLUMNS, *HASH_COLUMNS, "numel")
    differs = ", ".join(
        f"""CASE WHEN count(DISTINCT coalesce("{c}"::VARCHAR, '<null>')) > 1 THEN '{c}' END"""
        for c in compared
    )
    rows = ", ".join(f"'{c}': \"{c}\"" for c in ("producer", *HASH_COLUMNS))
    source = f"""
        SELECT policy_version, tensor, list(DISTINCT producer ORDER BY producer) AS producers,
               list_filter([{differs}], lambda x: x IS NOT NULL) AS differing_columns,
               list({{{rows}}} ORDER BY producer) AS rows
        FROM qparams GROUP BY policy_version, tensor"""
    # Without QAT there is no fake-quant side to compare against: the check then proves that the
    # engine loaded exactly what the offline quantizer produced (offline_real vs rollout_load).
    has_qat = ctx.scalar("SELECT count(*) FROM qparams WHERE producer = 'qat_fake'")
    producers = REQUIRED_PRODUCERS if has_qat else ("offline_real",)
    required = ", ".join(f"'{p}'" for p in producers)
    return ctx.count_violations(
        source=source,
        violation=f"len(differing_columns) > 0 OR NOT list_has_all(producers, [{required}])",
        order="policy_version, tensor",
        message="(policy version, tensor) pairs whose producers disagree on codes, scales or "
        f"spec, or lack one of {list(producers)}",
    )

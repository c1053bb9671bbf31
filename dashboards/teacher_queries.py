"""The SQL of the Teachers and Rewards pages, as functions ``(con, *, params) -> DataFrame``.

Same rules as ``dashboards.queries`` (bound parameters only; per-token reads over a step window
and at most about ``TOKEN_SAMPLES`` samples of it); kept apart so each file stays one concept.
"""

from __future__ import annotations

import pandas as pd

from dashboards.queries import _SAMPLED, TOKEN_SAMPLES, Con, _sampled, df


def teacher_routes(con: Con) -> pd.DataFrame:
    """``teacher_routes`` per step and route (domain, teacher)."""
    return df(
        con,
        "SELECT step, domain, teacher_id, payload, n_samples, n_tokens, payload_bytes, "
        "reverse_kl, opd_adv_mean, opd_adv_std, topk_kl FROM teacher_routes "
        "ORDER BY step, domain",
    )


def route_table(con: Con) -> pd.DataFrame:
    """One row per route over the run: samples, tokens, bytes, first and last sampled KL, and its
    provenance: the domains the teacher was trained on, its source (``same`` when its lineage
    starts at the student's SFT base) against the declared one, the first 8 hex digits of its
    source and config hashes, and whether the route passes the provenance contract."""
    return df(
        con,
        """
        WITH r AS (
        SELECT domain, teacher_id, any_value(payload) AS payload, count(*) AS steps,
               sum(n_samples) AS samples, sum(n_tokens) AS tokens,
               sum(payload_bytes) AS payload_bytes,
               arg_min(reverse_kl, step) AS first_reverse_kl,
               arg_max(reverse_kl, step) AS last_reverse_kl,
               any_value(teacher_domains) AS domains,
               any_value(teacher_source_sha256) AS src,
               any_value(student_source_sha256) AS student_src,
               any_value(teacher_config_sha256) AS cfg,
               any_value(declared_source) AS declared_source
        FROM teacher_routes GROUP BY domain, teacher_id)
        SELECT domain, teacher_id, payload, steps, samples, tokens, payload_bytes,
               first_reverse_kl, last_reverse_kl,
               array_to_string(domains, ', ') AS trained_on,
               CASE WHEN src IS NULL OR student_src IS NULL THEN NULL
                    WHEN src = student_src THEN 'same' ELSE 'off' END AS source,
               declared_source, src[:8] AS source_sha, cfg[:8] AS config_sha,
               coalesce(list_contains(domains, domain)
                        AND (src = student_src) = (declared_source = 'same'), false)
                   AS provenance_ok
        FROM r ORDER BY domain""",
    )


def opd_advantage_histogram(
    con: Con,
    *,
    lo: int,
    hi: int,
    half_range: float = 4.0,
    bins: int = 41,
    max_samples: int = TOKEN_SAMPLES,
) -> pd.DataFrame:
    """Histogram of the OPD log-ratio teacher_logp − train_logp over teacher-scored tokens of
    steps [lo, hi], per domain: domain, advantage (bin centre), n. Values beyond ±half_range
    fall in the edge bins."""
    width = 2 * half_range / bins
    return df(
        con,
        f"""
        WITH t AS (SELECT sample_id, teacher_logp - train_logp AS a FROM tokens
                   WHERE teacher_logp IS NOT NULL AND train_logp IS NOT NULL AND {_SAMPLED})
        SELECT s.domain, least(greatest(floor((a + ?) / ?), 0), ? - 1) AS bin, count(*) AS n
        FROM t JOIN samples s USING (sample_id) GROUP BY ALL ORDER BY 1, 2""",
        [*_sampled(lo, hi, max_samples), half_range, width, bins],
    ).assign(advantage=lambda d: -half_range + (d["bin"] + 0.5) * width)


def reward_components(con: Con) -> pd.DataFrame:
    """Per step and component: mean value (non-null), weight, mean weighted contribution to the
    total, samples and failures (rows without a value)."""
    return df(
        con,
        """
        SELECT step, component, avg(value) AS value, any_value(weight) AS weight,
               avg(coalesce(weight * value, 0.0)) AS contribution, count(*) AS n,
               count(*) FILTER (WHERE value IS NULL) AS failures
        FROM reward_components GROUP BY step, component ORDER BY step, component""",
    )


def reward_failures(con: Con) -> pd.DataFrame:
    """Per step, component and reason: components that could not score (value null)."""
    return df(
        con,
        "SELECT step, component, coalesce(failure_reason, '(none)') AS failure_reason, "
        "count(*) AS n FROM reward_components WHERE value IS NULL "
        "GROUP BY ALL ORDER BY step, component",
    )

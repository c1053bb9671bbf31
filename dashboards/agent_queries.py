"""The SQL of the Agents page and the Versions page's per-worker panels (async rollout: turns,
environment latency and failures, per-token version spread, weight switches per worker), as
functions ``(con, *, params) -> DataFrame``. Same rules as ``dashboards.queries``; kept apart so
each file stays one concept.
"""

from __future__ import annotations

import pandas as pd

from dashboards.queries import Con, df


def turn_timeline(con: Con, *, last_n: int = 400) -> pd.DataFrame:
    """The latest ``last_n`` turns: per worker, generation and environment spans (seconds since
    the first of them)."""
    sql = """
        WITH t AS (SELECT * FROM turns WHERE t_gen_start IS NOT NULL
                   ORDER BY t_gen_start DESC LIMIT ?)
        SELECT sample_id, turn, worker, step, policy_version_first, env_event,
               epoch(t_gen_start) - min(epoch(t_gen_start)) OVER () AS gen_start,
               epoch(t_gen_end) - min(epoch(t_gen_start)) OVER () AS gen_end,
               epoch(t_env_end) - min(epoch(t_gen_start)) OVER () AS env_end
        FROM t ORDER BY worker, gen_start"""
    return df(con, sql, [last_n])


def turns_per_sample(con: Con) -> pd.DataFrame:
    return df(
        con,
        "SELECT n_turns, status, count(*) AS n FROM samples WHERE n_turns IS NOT NULL "
        "GROUP BY ALL ORDER BY n_turns, status",
    )


def env_latency(con: Con) -> pd.DataFrame:
    """Environment latency of every turn that waited (seconds), with the run's p50 and p99."""
    sql = """
        SELECT env_latency_s, env_event,
               quantile_cont(env_latency_s, 0.5) OVER () AS p50,
               quantile_cont(env_latency_s, 0.99) OVER () AS p99
        FROM turns WHERE env_latency_s > 0"""
    return df(con, sql)


def env_failures(con: Con) -> pd.DataFrame:
    sql = """
        SELECT failure_reason, status, count(*) AS n FROM samples
        WHERE failure_reason IN ('env_timeout', 'env_crash', 'tool_malformed')
           OR status IN ('env_failure', 'dropped_group')
        GROUP BY ALL ORDER BY n DESC"""
    return df(con, sql)


def version_spread(con: Con) -> pd.DataFrame:
    """Per sample: how many policy versions its generated tokens span (newest − oldest)."""
    sql = """
        SELECT policy_version_rollout_max - policy_version_rollout AS spread, count(*) AS n
        FROM samples WHERE policy_version_rollout_max IS NOT NULL GROUP BY ALL ORDER BY spread"""
    return df(con, sql)


def worker_switches(con: Con) -> pd.DataFrame:
    """Each worker's weight switches: version, seconds since the run's first switch, and the
    send → switch delay."""
    sql = """
        SELECT engine AS worker, policy_version, duration_s AS send_to_switch_s,
               epoch(ts) - min(epoch(ts)) OVER () AS t
        FROM weight_syncs WHERE phase = 'switch' AND engine LIKE 'worker-%'
        ORDER BY worker, t"""
    return df(con, sql)

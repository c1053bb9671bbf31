"""Breakdowns for the train/inference-gap and memory notebooks, over a telemetry connection.

Mismatch |Δlogp| = |train_logp − rollout_logp| on action tokens by run (labelled with the rollout
precision the run declared), by response position and by token id; the memory peak per step and
its breakdown by category and owner (``memory_peaks``). Pure DuckDB queries returning DataFrames;
only ``mismatch_by_run``/``mismatch_by_precision`` read ``runs.config`` (to label runs).
"""

from __future__ import annotations

import duckdb
import pandas as pd

from observability.analysis import resolve_run_id


def mismatch_by_position(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> pd.DataFrame:
    """Per response position (0 = first generated token): n, mean/p99 |Δlogp|, mean Δlogp, masked."""
    rid = resolve_run_id(con, run_id)
    return con.execute(
        """
        SELECT t.pos - s.n_prompt_tokens AS response_pos, count(*) AS n,
               avg(abs(t.train_logp - t.rollout_logp)) AS abs_delta_mean,
               quantile_cont(abs(t.train_logp - t.rollout_logp), 0.99) AS abs_delta_p99,
               avg(t.train_logp - t.rollout_logp) AS delta_mean,
               avg((NOT coalesce(t.trust_mask, false))::DOUBLE) AS masked_fraction
        FROM tokens t JOIN samples s ON s.run_id = t.run_id AND s.sample_id = t.sample_id
        WHERE t.run_id = ? AND t.role = 'action' GROUP BY 1 ORDER BY 1""",
        [rid],
    ).df()


def mismatch_by_token(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    *,
    min_count: int = 5,
    limit: int = 20,
) -> pd.DataFrame:
    """Per rollout token id seen ≥ ``min_count`` times: n, mean |Δlogp|, mean Δlogp, masked;
    the ``limit`` token ids with the largest mean |Δlogp|."""
    rid = resolve_run_id(con, run_id)
    return con.execute(
        """
        SELECT token_id, count(*) AS n, avg(abs(train_logp - rollout_logp)) AS abs_delta_mean,
               avg(train_logp - rollout_logp) AS delta_mean,
               CASE WHEN count(trust_mask) > 0  -- a run that records trust masks
                    THEN avg((NOT coalesce(trust_mask, false))::DOUBLE) END AS masked_fraction
        FROM tokens WHERE run_id = ? AND role = 'action' GROUP BY token_id HAVING count(*) >= ?
        ORDER BY abs_delta_mean DESC, token_id LIMIT ?""",
        [rid, min_count, limit],
    ).df()


_PRECISION = "json_extract_string(r.config, '$.rollout.precision')"
_GAP = """count(*) AS n, avg(abs(t.train_logp - t.rollout_logp)) AS abs_delta_mean,
       quantile_cont(abs(t.train_logp - t.rollout_logp), 0.99) AS abs_delta_p99,
       avg((NOT coalesce(t.trust_mask, false))::DOUBLE) AS masked_fraction"""


def mismatch_by_run(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per run of the connection (e.g. ``open_runs``): the rollout precision the run declared and
    its action-token mismatch (n, mean / p99 |Δlogp|, masked). Reads ``runs.config`` to label."""
    return con.execute(f"""
        SELECT t.run_id, any_value({_PRECISION}) AS precision, {_GAP}
        FROM tokens t LEFT JOIN runs r USING (run_id) WHERE t.role = 'action'
        GROUP BY t.run_id ORDER BY t.run_id""").df()


def mismatch_by_precision(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Action-token mismatch pooled over every run with the same declared rollout precision."""
    return con.execute(f"""
        SELECT {_PRECISION} AS precision, count(DISTINCT t.run_id) AS runs, {_GAP}
        FROM tokens t LEFT JOIN runs r USING (run_id) WHERE t.role = 'action'
        GROUP BY 1 ORDER BY abs_delta_mean""").df()


# ---------------------------------------------------------------- memory
def memory_by_step(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> pd.DataFrame:
    """Rank 0's peak per step and category (bytes summed over owners; lines not measured count 0):
    columns step, category, bytes."""
    rid = resolve_run_id(con, run_id)
    return con.execute(
        """
        SELECT step, category, coalesce(sum(bytes), 0)::BIGINT AS bytes FROM memory_peaks
        WHERE run_id = ? AND rank = 0 GROUP BY step, category ORDER BY step, category""",
        [rid],
    ).df()


def memory_breakdown(
    con: duckdb.DuckDBPyConnection, run_id: str | None = None, *, step: int | None = None
) -> pd.DataFrame:
    """Rank 0's peak at ``step`` (default: the step with the largest peak) by category and owner,
    largest first, with each line's share of the measured total; ``bytes`` null = not measured."""
    rid = resolve_run_id(con, run_id)
    if step is None:
        totals = memory_by_step(con, rid).groupby("step")["bytes"].sum()
        if totals.empty:
            return pd.DataFrame(columns=["step", "category", "owner", "bytes", "share"])
        step = int(totals.idxmax())
    return con.execute(
        """
        SELECT step, category, owner, bytes, bytes / sum(bytes) OVER () AS share
        FROM memory_peaks WHERE run_id = ? AND step = ? AND rank = 0
        ORDER BY bytes DESC NULLS LAST, category, owner""",
        [rid, step],
    ).df()

"""Every SQL query the dashboard runs, as functions ``(con, *, params) -> pandas.DataFrame``.

``con`` is one run's connection from ``observability.open_run`` (one view per telemetry table).
Values always travel as bound parameters (``?``); the only text spliced into SQL is column names
taken from ``observability.schema.TABLES`` and literals of this module. Per-token tables are
queried over a window of recent steps (``step BETWEEN lo AND hi``, pruned by Parquet statistics)
and, on big runs, over every s-th sample of it (``max_samples``), so panels stay fast on runs with
tens of millions of tokens; whole-run curves come from the ``steps`` rollup (one row per step and
rank). Every result is fully fetched (DuckDB 2.0 rule)."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from observability.schema import TABLES

Con = duckdb.DuckDBPyConnection

_STEP_MAX = ("policy_version", "wall_time", "mismatch_abs_p99", "staleness_max", "step_time_s")
_STEP_MAX += ("rollout_time_s", "train_time_s", "peak_memory_bytes")
_STEP_SUM = ("n_tokens", "n_loss_tokens", "n_trusted_tokens")
_STEP_KEYS = ("run_id", "step", "rank")


def _steps_select() -> str:
    """Aggregates of ``steps`` over ranks, one per schema column: max, sum or mean (booleans:
    all ranks; strings: any rank's)."""
    out = []
    for col in TABLES["steps"].columns:
        name = col.name
        if name in _STEP_KEYS:
            continue
        fn = "max" if name in _STEP_MAX else "sum" if name in _STEP_SUM else "avg"
        if pa.types.is_boolean(col.type):
            fn = "bool_and"
        elif pa.types.is_string(col.type):
            fn = "any_value"
        out.append(f'{fn}("{name}") AS "{name}"')
    return ", ".join(out)


_STEPS_SQL = (
    f"SELECT any_value(run_id) AS run_id, step, count(*) AS n_ranks, {_steps_select()} "
    "FROM steps WHERE step >= ? GROUP BY step ORDER BY step"
)


def df(con: Con, sql: str, params: list | tuple = ()) -> pd.DataFrame:
    """Run ``sql`` with bound ``params`` and fetch the whole result."""
    return con.execute(sql, list(params)).df()


def scalar(con: Con, sql: str, params: list | tuple = ()):
    rows = con.execute(sql, list(params)).fetchall()
    return rows[0][0] if rows else None


# -- run level ---------------------------------------------------------------------------------


def run_info(con: Con) -> pd.DataFrame:
    """The latest ``runs`` row (status, declared trust bands, staleness limit, ...)."""
    return df(con, "SELECT * FROM runs ORDER BY updated_at DESC LIMIT 1")


def steps(con: Con, *, from_step: int = 0) -> pd.DataFrame:
    """The ``steps`` rollup from ``from_step`` on, aggregated over ranks, ordered by step."""
    return df(con, _STEPS_SQL, [from_step])


def last_step(con: Con) -> int | None:
    return scalar(con, "SELECT max(step) FROM steps")


def step_window(con: Con, *, n_steps: int) -> tuple[int, int] | None:
    """(lo, hi) of the latest ``n_steps`` steps, or None before the first step."""
    hi = last_step(con)
    return None if hi is None else (max(0, int(hi) - n_steps + 1), int(hi))


def evals(con: Con, *, split: str = "heldout") -> pd.DataFrame:
    """Eval rows of one split (``heldout``; per domain ``heldout/<domain>``)."""
    return df(
        con,
        "SELECT run_id, step, split, n, accuracy, reward_mean FROM evals WHERE split = ? "
        "ORDER BY step",
        [split],
    )


def domain_evals(con: Con) -> pd.DataFrame:
    """Per-domain eval rows (splits ``heldout/<domain>``) with a ``domain`` column."""
    return df(
        con,
        "SELECT step, split[9:] AS domain, n, accuracy FROM evals "
        "WHERE split LIKE 'heldout/%' ORDER BY step, domain",
    )


# -- mismatch and masks (per-token window, sampled) --------------------------------------------

TOKEN_SAMPLES = 2048
"""Per-token panels read at most about this many samples of their window (every s-th sample id)."""
TOPK_SAMPLES = 256
"""Top-k / routing panels read at most about this many samples of their window."""

_SAMPLED = (
    "step BETWEEN ? AND ? AND sample_id % (SELECT greatest(1, ceil(count(*) / ?))::BIGINT "
    "FROM samples WHERE step BETWEEN ? AND ?) = 0"
)
"""Rows of steps [lo, hi] whose sample_id is a multiple of the stride that keeps about
``max_samples`` samples (params: lo, hi, max_samples, lo, hi); stride 1 on small runs."""
_ACTION_DELTA = (
    f"FROM tokens WHERE role = 'action' AND {_SAMPLED} "
    "AND train_logp IS NOT NULL AND rollout_logp IS NOT NULL"
)


def _sampled(lo: int, hi: int, max_samples: int) -> list[int]:
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}")
    return [lo, hi, max_samples, lo, hi]


def ratio_histogram(
    con: Con,
    *,
    lo: int,
    hi: int,
    half_range: float,
    bins: int = 81,
    max_samples: int = TOKEN_SAMPLES,
) -> pd.DataFrame:
    """Histogram of Δ = train_logp − rollout_logp over (sampled) action tokens of steps [lo, hi].

    ``bins`` equal bins in Δ (= log ratio) over [−half_range, half_range]; values beyond fall in
    the edge bins. Columns: bin, width, n, delta (bin centre), ratio = exp(delta), fraction.
    """
    if not (half_range > 0 and bins >= 1):
        raise ValueError(f"need half_range > 0 and bins >= 1, got {half_range}, {bins}")
    width = 2.0 * half_range / bins
    sql = f"""
        SELECT least(greatest(floor((train_logp - rollout_logp) / ? + ? / 2.0), 0),
                     ? - 1)::INTEGER AS bin, count(*) AS n
        {_ACTION_DELTA} GROUP BY bin ORDER BY bin"""
    out = df(con, sql, [width, bins, bins, *_sampled(lo, hi, max_samples)])
    out["width"] = width
    out["delta"] = (out["bin"] + 0.5 - bins / 2) * width
    out["ratio"] = np.exp(out["delta"].to_numpy(dtype=float))
    out["fraction"] = out["n"] / out["n"].sum() if len(out) else []
    return out


def mismatch_by_position(
    con: Con, *, lo: int, hi: int, buckets: int = 16, max_samples: int = TOKEN_SAMPLES
) -> pd.DataFrame:
    """Mean and p99 |Δ| by position: ``buckets`` equal-width buckets of the longest sequence."""
    sql = f"""
        WITH w AS (SELECT greatest(1, ceil(max(n_prompt_tokens + n_response_tokens)
                                           / ?::DOUBLE))::BIGINT AS width
                   FROM samples WHERE step BETWEEN ? AND ?),
        d AS (SELECT pos, abs(train_logp - rollout_logp) AS a {_ACTION_DELTA})
        SELECT (pos // width) * width AS pos_start, any_value(width) AS width,
               avg(a) AS mean_abs, approx_quantile(a, 0.99) AS p99_abs, count(*) AS n
        FROM d, w GROUP BY pos_start ORDER BY pos_start"""
    out = df(con, sql, [buckets, lo, hi, *_sampled(lo, hi, max_samples)])
    # approx_quantile of an all-zero bucket can come back as a denormal (~1e-308): call it 0.
    out["p99_abs"] = out["p99_abs"].where(out["p99_abs"] > 1e-30, 0.0)
    return out


def effective_sample_fraction(
    con: Con, *, lo: int, hi: int, max_samples: int = TOKEN_SAMPLES
) -> pd.DataFrame:
    """Per step: Kish ESS / n of the importance weights of action tokens (masked tokens weigh 0).

    ESS = (Σw)² / Σw², w = ratio · trust_mask; 1.0 when every weight is equal.
    """
    sql = f"""
        WITH w AS (SELECT step, CASE WHEN trust_mask THEN ratio ELSE 0 END AS w
                   FROM tokens WHERE role = 'action' AND ratio IS NOT NULL AND {_SAMPLED})
        SELECT step, CASE WHEN sum(w * w) > 0 THEN sum(w) ^ 2 / (count(*) * sum(w * w))
                          ELSE 0 END AS ess_fraction, count(*) AS n
        FROM w GROUP BY step ORDER BY step"""
    return df(con, sql, _sampled(lo, hi, max_samples))


def mask_reasons(con: Con, *, lo: int, hi: int, max_samples: int = TOKEN_SAMPLES) -> pd.DataFrame:
    """Per step and mask reason: (sampled) action tokens, ``kept`` included."""
    sql = f"""
        SELECT step, coalesce(mask_reason, 'unknown') AS reason, count(*) AS n
        FROM tokens WHERE role = 'action' AND {_SAMPLED}
        GROUP BY ALL ORDER BY step, reason"""
    return df(con, sql, _sampled(lo, hi, max_samples))


# -- versions ----------------------------------------------------------------------------------


def staleness_histogram(con: Con) -> pd.DataFrame:
    return df(
        con,
        "SELECT staleness, status, count(*) AS n FROM samples "
        "WHERE staleness IS NOT NULL GROUP BY ALL ORDER BY staleness, status",
    )


def staleness_by_step(con: Con) -> pd.DataFrame:
    sql = """
        SELECT step, avg(staleness) AS staleness_mean, max(staleness) AS staleness_max,
               count(*) FILTER (WHERE status = 'stale') AS n_stale, count(*) AS n
        FROM samples GROUP BY step ORDER BY step"""
    return df(con, sql)


def weight_syncs(con: Con, *, last_n: int = 12) -> pd.DataFrame:
    """Phases of the latest ``last_n`` weight syncs; ``start`` = ``ts`` − ``duration_s``."""
    sql = """
        SELECT sync_id, policy_version, phase, ts, duration_s, bytes, engine,
               probe_mismatch_abs_max
        FROM weight_syncs WHERE sync_id > (SELECT max(sync_id) FROM weight_syncs) - ?
        ORDER BY sync_id, ts"""
    out = df(con, sql, [last_n])
    dur = pd.to_timedelta(out["duration_s"].fillna(0.0), unit="s")
    return out.assign(start=out["ts"] - dur)


def sync_phase_durations(con: Con) -> pd.DataFrame:
    sql = """
        SELECT phase, avg(duration_s) AS mean_s, max(duration_s) AS max_s, count(*) AS n
        FROM weight_syncs GROUP BY phase ORDER BY mean_s DESC"""
    return df(con, sql)


# -- sparse attention / routing ----------------------------------------------------------------


def topk_agreement(con: Con, *, lo: int, hi: int, max_samples: int = TOPK_SAMPLES):
    """Per step and layer, train vs rollout over (sampled) query positions: exact Top-k set
    agreement (``index_hash``, else the sorted lists), overlap |A∩B|/k over rows that carry the
    index lists, mean boundary ties and the fraction of positions with ties.

    Layer −1 stands for the output logits (null ``layer``).
    """
    sql = f"""
        WITH s AS (SELECT step, sample_id, coalesce(layer, -1) AS layer, pos, engine, indices,
                          index_hash, boundary_ties FROM topk WHERE {_SAMPLED}),
        t AS (SELECT * FROM s WHERE engine = 'train'),
        r AS (SELECT * FROM s WHERE engine = 'rollout')
        SELECT t.step, t.layer,
               avg(CASE WHEN coalesce(t.index_hash = r.index_hash,
                                      list_sort(t.indices) = list_sort(r.indices))
                        THEN 1.0 ELSE 0.0 END) AS agreement,
               avg(len(list_intersect(t.indices, r.indices)) / len(t.indices))
                   FILTER (WHERE len(t.indices) > 0 AND len(r.indices) > 0) AS overlap,
               avg(coalesce(t.boundary_ties, 0) + coalesce(r.boundary_ties, 0)) / 2 AS ties,
               avg(CASE WHEN greatest(coalesce(t.boundary_ties, 0),
                                      coalesce(r.boundary_ties, 0)) > 0
                        THEN 1.0 ELSE 0.0 END) AS tie_fraction,
               count(*) AS n
        FROM t JOIN r USING (step, sample_id, layer, pos)
        GROUP BY ALL ORDER BY t.step, t.layer"""
    return df(con, sql, _sampled(lo, hi, max_samples))


def route_agreement(con: Con, *, lo: int, hi: int, max_samples: int = TOPK_SAMPLES):
    """Per step and MoE layer: exact expert-set agreement and overlap, train vs rollout."""
    sql = f"""
        WITH s AS (SELECT step, sample_id, layer, pos, engine, experts FROM moe_routes
                   WHERE {_SAMPLED}),
        t AS (SELECT * FROM s WHERE engine = 'train'),
        r AS (SELECT * FROM s WHERE engine = 'rollout')
        SELECT t.step, t.layer,
               avg(CASE WHEN list_sort(t.experts) = list_sort(r.experts) THEN 1.0 ELSE 0.0 END)
                   AS agreement,
               avg(len(list_intersect(t.experts, r.experts)) / greatest(len(t.experts), 1))
                   AS overlap,
               count(*) AS n
        FROM t JOIN r USING (step, sample_id, layer, pos)
        GROUP BY ALL ORDER BY t.step, t.layer"""
    return df(con, sql, _sampled(lo, hi, max_samples))


# -- quantization ------------------------------------------------------------------------------


def qparams_by_version(con: Con) -> pd.DataFrame:
    sql = """
        SELECT policy_version, producer, count(*) AS n_tensors, max(max_abs_err) AS max_err,
               avg(max_abs_err) AS mean_err
        FROM qparams GROUP BY ALL ORDER BY policy_version, producer"""
    return df(con, sql)


def qparams_latest(con: Con) -> pd.DataFrame:
    """Every qparams row of the latest policy version."""
    sql = """
        SELECT tensor, producer, bits, group_size, "symmetric", scale_dtype, rounding, packing,
               max_abs_err, numel, scale_hash, code_hash, policy_version
        FROM qparams WHERE policy_version = (SELECT max(policy_version) FROM qparams)
        ORDER BY tensor, producer"""
    return df(con, sql)


QUANT_PAIRS = (("qat_fake", "offline_real"), ("offline_real", "rollout_load"))
"""Producer pairs whose scales and codes must be bit-identical (QAT vs offline, sent vs loaded)."""


def qparams_equality(con: Con) -> pd.DataFrame:
    """Per policy version and producer pair: tensors compared and tensors with equal hashes."""
    sql = """
        SELECT a.policy_version, a.producer || ' vs ' || b.producer AS pair,
               count(*) AS n_tensors,
               count(*) FILTER (WHERE a.scale_hash IS NOT DISTINCT FROM b.scale_hash
                                AND a.code_hash IS NOT DISTINCT FROM b.code_hash
                                AND a.zero_hash IS NOT DISTINCT FROM b.zero_hash) AS n_equal
        FROM qparams a JOIN qparams b USING (policy_version, tensor)
        WHERE (a.producer, b.producer) IN ((?, ?), (?, ?))
        GROUP BY ALL ORDER BY a.policy_version, pair"""
    return df(con, sql, [p for pair in QUANT_PAIRS for p in pair])


# -- memory ------------------------------------------------------------------------------------


# -- contracts ---------------------------------------------------------------------------------


def contract_latest(con: Con) -> pd.DataFrame:
    """The latest result of every (contract, check), failures first."""
    sql = """
        SELECT run_id, checked_at, contract, "check", status, observed, threshold, n_rows,
               n_violations, example, step
        FROM contract_results
        QUALIFY row_number() OVER (PARTITION BY contract, "check" ORDER BY checked_at DESC) = 1
        ORDER BY status = 'pass', status = 'not_applicable', contract, "check"
    """
    return df(con, sql)


# -- token view --------------------------------------------------------------------------------


def token_steps(con: Con) -> list[int]:
    """Steps that have samples with per-token rows (``tokens_sampled``), newest first."""
    rows = con.execute(
        "SELECT DISTINCT step FROM samples WHERE tokens_sampled IS NOT FALSE ORDER BY step DESC"
    ).fetchall()
    return [r[0] for r in rows]


def samples_at(con: Con, *, step: int) -> pd.DataFrame:
    sql = """
        SELECT sample_id, group_id, prompt_id, reward, advantage, status, staleness,
               n_prompt_tokens, n_response_tokens, finish_reason, response_text
        FROM samples WHERE step = ? AND tokens_sampled IS NOT FALSE ORDER BY sample_id"""
    return df(con, sql, [step])


def sample_tokens(con: Con, *, step: int, sample_id: int) -> pd.DataFrame:
    """Every token row of one sample, by position (Δlogp and teacher gap computed here)."""
    sql = """
        SELECT pos, token_id, role, loss_mask, trust_mask, mask_reason, rollout_logp, train_logp,
               teacher_logp, ratio, advantage, entropy,
               train_logp - rollout_logp AS delta_logp,
               train_logp - teacher_logp AS teacher_gap
        FROM tokens WHERE step = ? AND sample_id = ? ORDER BY pos"""
    return df(con, sql, [step, sample_id])


# -- agents (async multi-turn rollout) -----------------------------------------------------------

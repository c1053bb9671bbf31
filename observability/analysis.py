"""Collapse analysis of a run's telemetry: onset, ranked suspects, token drill-down, baseline diff.

Pure functions over a DuckDB connection whose views are named as in ``observability.schema``
(``open_run``/``open_runs``), returning pandas DataFrames or small frozen dataclasses. Onset and
suspects read only ``steps``, ``samples``, ``tokens``, ``turns``, ``topk``, ``qparams`` and
``reward_components`` — never ``runs`` (config, run name): the diagnosis comes from what the run
did, not from what it was told to do.

Onset: ``observability.changepoint.find_onset`` on the per-step reward and entropy, with the
reward's noise floored at the sampling error of a step's mean reward (from ``samples``). In a run
with mixed rewards (``reward_components`` beyond one weight-1 ``verifier``) the reward series is
the verifier component's mean: the ground truth, not the scalarization the policy may be gaming.

Suspects. Each candidate cause (``SIGNALS``) is a per-step level with a tolerance τ — the level
at which the sign is no longer explained by a healthy run of this system. Engine-side levels
(mismatch, masked fraction) use *clean* samples only — fresh (staleness 0), token-identical (no
re-tokenized token, no token decoded against keys/values of another version, no turn whose engine
context differed from the trajectory), with the same Top-k sets in both engines, and drawn from
rollout weights without uncorrected quantization error (below ``quantization_error``'s τ) — so a sample
explained by an upstream cause is not counted again as engine mismatch. Over the window before the onset (the
whole run without one), with r the baseline run's largest per-step level (0 without a baseline):
    excess_t = max(level_t − r, 0) / τ,   strength = mean_t excess_t,
    first = first step with excess_t ≥ 1,  earliness = 1 − index(first) / len(window),
    score = log2(1 + strength) · (0.5 + 0.5·earliness)   (0 if it never reached 1).
Reward components of a mixed reward: ``observability.reward_signals`` (``reward_component:<c>``).
Stalls: the same table also ranks what a run is missing (``observability.stall_signals``: zero-
variance groups, clipping, vanished advantages, the critic, teacher routes, falling reward
components); a level counts above max(r, the signal's healthy ``floor``). ``observability.stall``
decides whether a run without an onset stalled. Step size: ``observability.optimizer_signals``
(relative update, learning-rate schedule, gradient norm, AdamW after a reset).
Simplifications: steps are averaged over ranks; per-token levels fall back to the exact ``steps``
aggregates (not restricted to clean samples) for steps whose token rows were not kept.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from observability.changepoint import NO_ONSET, Onset, find_onset
from observability.optimizer_signals import OPTIMIZER_SIGNALS, optimizer_levels
from observability.reward_signals import (
    Signal,
    component_levels,
    component_signals,
    mixed_reward,
    task_reward,
)
from observability.stall_signals import STALL_SIGNALS, dynamic_signals, stall_levels


# ---------------------------------------------------------------- run selection and step series
def run_ids(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Run ids that have ``steps`` rows (the runs table is not consulted)."""
    return [r[0] for r in con.execute("SELECT DISTINCT run_id FROM steps ORDER BY 1").fetchall()]


def resolve_run_id(con: duckdb.DuckDBPyConnection, run_id: str | None) -> str:
    ids = run_ids(con)
    if run_id is None:
        if len(ids) != 1:
            raise ValueError(f"connection holds {len(ids)} runs; pass run_id, one of {ids}")
        return ids[0]
    if run_id not in ids:
        raise ValueError(f"run_id {run_id!r} has no steps; runs: {ids}")
    return run_id


STEP_METRICS = (
    "reward_mean",
    "entropy",
    "mismatch_abs_mean",
    "masked_fraction",
    "staleness_max",
    "retokenized_fraction",
    "grad_norm",
    "clip_fraction",
)
"""``steps`` columns the step series and baseline comparison carry."""


def step_metrics(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> pd.DataFrame:
    """One row per step (averaged over ranks): ``step`` and every column of ``STEP_METRICS``."""
    rid = resolve_run_id(con, run_id)
    cols = ", ".join(f"avg({c})::DOUBLE AS {c}" for c in STEP_METRICS)
    return con.execute(
        f"SELECT step, {cols} FROM steps WHERE run_id = ? GROUP BY step ORDER BY step", [rid]
    ).df()


def reward_sampling_noise(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> float:
    """σ of a step's mean reward from its samples: sqrt(mean over steps of var_pop(reward) / n)."""
    rid = resolve_run_id(con, run_id)
    src, params = task_reward(con, rid)
    (v,) = con.execute(
        "SELECT sqrt(avg(v / n)) FROM (SELECT var_pop(r) AS v, count(*) AS n "
        f"FROM ({src}) GROUP BY step)",
        params,
    ).fetchall()[0]
    return float(v) if v is not None else 0.0


def collapse_onset(con: duckdb.DuckDBPyConnection, run_id: str | None = None, **kw) -> Onset:
    """``find_onset`` over the run's ``steps``; the reward noise floor comes from ``samples``."""
    rid = resolve_run_id(con, run_id)
    df = step_metrics(con, rid)
    if df.empty:
        return NO_ONSET
    if mixed_reward(con, rid):  # the verifier's mean, not the scalarization
        src, params = task_reward(con, rid)
        task = con.execute(f"SELECT step, avg(r) AS task FROM ({src}) GROUP BY step", params).df()
        df = df.merge(task, on="step", how="left")
        df["reward_mean"] = df["task"].fillna(df["reward_mean"])
    kw.setdefault("reward_noise", reward_sampling_noise(con, rid))
    return find_onset(
        df["step"].to_numpy(), df["reward_mean"].to_numpy(), df["entropy"].to_numpy(), **kw
    )


# ---------------------------------------------------------------- suspects
# Tolerances, from what this system measures when healthy: TITO holds exactly (0 re-tokenized
# tokens, 0 turns whose engine context differs from the trajectory); no token is decoded against
# keys/values of another version (both exactly 0 when healthy: any is the fault, τ = 1e-5); the synchronous loop trains fresh samples (staleness 0); fp32 engines agree to ~3e-7
# nats per token, bf16 engines to 5e-3–8e-3 (a bf16 rollout registers, 5–8×); IcePop (β = 2)
# masks no fp32 or bf16 token; deterministic Top-k kernels pick identical sets; int4 g32 rollout
# weights are off by ~1e-2 per tensor (max), and even bf16 rounding of them by ~6e-4.
SIGNALS = (
    Signal(
        "retokenized_tokens",
        "action tokens the trainer saw with other ids than the rollout produced (TITO violation)",
        1e-3,
    ),
    Signal(
        "staleness", "mean policy versions between generation and training of trained samples", 0.1
    ),
    Signal(
        "train_rollout_mismatch", "mean |train_logp − rollout_logp| on clean action tokens", 1e-3
    ),
    Signal("masked_fraction", "clean action tokens removed by the trust mask", 0.05),
    Signal("topk_disagreement", "clean positions whose DSA Top-k differs train vs rollout", 0.01),
    Signal(
        "quantization_error",
        "max |weight − dequantized| of rollout tensors the trainer does "
        "not also see (no matching QAT codes)",
        1e-4,
    ),
    Signal(
        "kv_version_mismatch",
        "action tokens decoded against keys/values of another policy version (KV kept across "
        "a weight switch)",
        1e-5,
    ),
    Signal(
        "history_retokenized",
        "turns whose engine context differs from the exact trajectory before them (multi-turn "
        "history re-tokenized)",
        1e-5,
    ),
)
"""The candidate causes, in the order the suspects table lists ties."""

_QUANT_BY_VERSION = """
r AS (SELECT policy_version, tensor, max_abs_err, code_hash, scale_hash FROM qparams
      WHERE run_id = $rid AND producer IN ('rollout_load', 'offline_real')),
q AS (SELECT DISTINCT policy_version, tensor, code_hash, scale_hash FROM qparams
      WHERE run_id = $rid AND producer = 'qat_fake'),
v AS (SELECT r.policy_version, avg(CASE WHEN q.tensor IS NULL THEN r.max_abs_err ELSE 0 END) AS err
      FROM r LEFT JOIN q ON q.policy_version = r.policy_version AND q.tensor = r.tensor
        AND q.code_hash = r.code_hash AND q.scale_hash = r.scale_hash GROUP BY 1)"""

_QUANT_TOLERANCE = next(s.tolerance for s in SIGNALS if s.name == "quantization_error")

_TOPK_DIFF = """
  SELECT a.step, a.sample_id, (a.index_hash IS DISTINCT FROM b.index_hash) AS differs
  FROM topk a JOIN topk b ON a.sample_id = b.sample_id AND a.pos = b.pos
    AND a.layer IS NOT DISTINCT FROM b.layer AND b.run_id = $rid AND b.engine = 'rollout'
  WHERE a.run_id = $rid AND a.engine = 'train'"""

_TOKEN_LEVELS = f"""
WITH t AS (
  SELECT sample_id, step, train_logp - rollout_logp AS d, trust_mask,
         coalesce(train_token_id <> token_id, false) AS retok,
         coalesce(kv_version <> policy_version_rollout, false) AS kv_bad
  FROM tokens WHERE run_id = $rid AND role = 'action'),
h AS (SELECT sample_id, bool_or(context_hash <> prefix_hash) AS hist_bad FROM turns
      WHERE run_id = $rid GROUP BY sample_id),
k AS (SELECT sample_id, bool_or(differs) AS topk_differs FROM ({_TOPK_DIFF}) GROUP BY sample_id),
f AS (SELECT sample_id, bool_or(retok) AS any_retok FROM t GROUP BY sample_id),
{_QUANT_BY_VERSION},
c AS (SELECT t.*, coalesce(s.staleness, 0) = 0 AND NOT f.any_retok AND NOT t.kv_bad
                  AND NOT coalesce(h.hist_bad, false)
                  AND NOT coalesce(k.topk_differs, false)
                  AND coalesce(v.err, 0) < {_QUANT_TOLERANCE} AS clean
      FROM t JOIN f USING (sample_id) LEFT JOIN k USING (sample_id) LEFT JOIN h USING (sample_id)
      LEFT JOIN (SELECT sample_id, staleness, policy_version_rollout FROM samples
                 WHERE run_id = $rid) s USING (sample_id)
      LEFT JOIN v ON v.policy_version = s.policy_version_rollout)
SELECT step, count(*) AS n_action, avg(retok::DOUBLE) AS retokenized_tokens,
       avg(abs(d)) FILTER (WHERE clean) AS train_rollout_mismatch,
       avg(d) FILTER (WHERE clean) AS mismatch_signed,
       CASE WHEN count(trust_mask) FILTER (WHERE clean) > 0  -- a run that records trust masks
            THEN avg((NOT coalesce(trust_mask, false))::DOUBLE) FILTER (WHERE clean)
       END AS masked_fraction
FROM c GROUP BY step"""

_TOPK_LEVELS = f"""
SELECT d.step, count(*) AS n_topk,
       avg(d.differs::DOUBLE) FILTER (WHERE coalesce(s.staleness, 0) = 0) AS topk_disagreement
FROM ({_TOPK_DIFF}) d LEFT JOIN samples s ON s.sample_id = d.sample_id AND s.run_id = $rid
GROUP BY d.step"""

_QUANT_LEVELS = f"""
WITH {_QUANT_BY_VERSION}
SELECT s.step, avg(v.err) AS quantization_error FROM samples s
JOIN v ON v.policy_version = s.policy_version_rollout WHERE s.run_id = $rid GROUP BY s.step"""


def suspect_levels(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> pd.DataFrame:
    """Per-step level of every ``SIGNALS`` candidate (columns ``step``, the names, ``mismatch_signed``)."""
    rid = resolve_run_id(con, run_id)
    p = {"rid": rid}
    out = con.execute(
        "SELECT step, avg(mismatch_abs_mean) AS s_mm, avg(masked_fraction) AS s_mf, "
        "avg(retokenized_fraction) AS s_rt, 1 - avg(topk_agreement) AS s_tk "
        "FROM steps WHERE run_id = $rid GROUP BY step ORDER BY step",
        p,
    ).df()
    for sql in (
        _TOKEN_LEVELS,
        _TOPK_LEVELS,
        _QUANT_LEVELS,
        "SELECT step, avg(staleness)::DOUBLE AS staleness FROM samples "
        "WHERE run_id = $rid AND status <> 'stale' GROUP BY step",
        "SELECT step, avg((kv_version <> policy_version_rollout)::DOUBLE) AS kv_version_mismatch "
        "FROM tokens WHERE run_id = $rid AND role = 'action' AND kv_version IS NOT NULL "
        "GROUP BY step",
        "SELECT step, avg((context_hash <> prefix_hash)::DOUBLE) AS history_retokenized "
        "FROM turns WHERE run_id = $rid GROUP BY step",
    ):
        out = out.merge(con.execute(sql, p).df(), on="step", how="left")
    fallback = {
        "train_rollout_mismatch": ("s_mm", "n_action"),
        "masked_fraction": ("s_mf", "n_action"),
        "retokenized_tokens": ("s_rt", "n_action"),
        "topk_disagreement": ("s_tk", "n_topk"),
    }
    for name, (col, count) in fallback.items():  # no per-token rows that step: step aggregates
        out[name] = out[name].astype("float64").mask(out[count].isna(), out[col].astype("float64"))
    extra = []
    for wide in (component_levels(con, rid), optimizer_levels(con, rid), stall_levels(con, rid)):
        if not wide.empty:
            out = out.merge(wide, on="step", how="left")
            extra += [c for c in wide.columns if c != "step"]
    cols = ["step", *(s.name for s in SIGNALS), "mismatch_signed", *extra]
    return out[cols].astype({c: "float64" for c in cols[1:]}).reset_index(drop=True)


def all_signals(levels: pd.DataFrame) -> tuple[Signal, ...]:
    """Every candidate of the table, in tie order: ``SIGNALS``, ``OPTIMIZER_SIGNALS``,
    ``STALL_SIGNALS``, then the reward-component, teacher-route and falling-component candidates
    present in ``levels``."""
    extra = component_signals(levels) + dynamic_signals(levels)
    return SIGNALS + OPTIMIZER_SIGNALS + STALL_SIGNALS + extra


def rank_suspects(
    levels: pd.DataFrame,
    *,
    onset_step: int | None = None,
    reference: dict[str, float] | None = None,
) -> pd.DataFrame:
    """Rank ``all_signals`` by how early and how strongly each moved before ``onset_step``.

    ``levels``: output of ``suspect_levels`` (a missing column counts 0); ``reference``:
    baseline level per signal (its largest per-step level).
    Returns one row per signal, best first: rank, suspect, score, strength, first_step,
    lead_steps (onset − first step), level_mean, reference (max of the baseline's and the floor),
    floor, tolerance, moved, description.
    """
    w = levels.sort_values("step")
    if onset_step is not None and (w["step"] < onset_step).any():
        w = w[w["step"] < onset_step]
    elif onset_step is not None:
        w = w[w["step"] <= onset_step]
    steps = w["step"].to_numpy()
    rows = []
    for order, sig in enumerate(all_signals(levels)):
        level = w[sig.name].fillna(0.0).to_numpy() if sig.name in w else np.zeros(len(w))
        ref = max(float((reference or {}).get(sig.name, 0.0) or 0.0), sig.floor)
        excess = np.maximum(level - ref, 0.0) / sig.tolerance
        moved = excess >= 1.0
        strength = float(excess.mean()) if excess.size else 0.0
        first = int(np.argmax(moved)) if moved.any() else None
        earliness = 1.0 - first / len(excess) if first is not None else 0.0
        score = np.log2(1.0 + strength) * (0.5 + 0.5 * earliness) if first is not None else 0.0
        first_step = int(steps[first]) if first is not None else None
        rows.append(
            {
                "suspect": sig.name,
                "score": float(score),
                "strength": strength,
                "first_step": first_step,
                "lead_steps": (onset_step - first_step)
                if (first_step is not None and onset_step is not None)
                else None,
                "level_mean": float(level.mean()) if level.size else 0.0,
                "reference": ref,
                "floor": sig.floor,
                "tolerance": sig.tolerance,
                "moved": first is not None,
                "description": sig.description,
                "_order": order,
            }
        )
    df = pd.DataFrame(rows).sort_values(["score", "_order"], ascending=[False, True])
    df = df.drop(columns="_order").reset_index(drop=True)
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df


def suspects(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    *,
    onset: Onset | None = None,
    baseline: duckdb.DuckDBPyConnection | None = None,
    baseline_run_id: str | None = None,
) -> pd.DataFrame:
    """The ranked suspects table of a run (onset detected unless given; optional baseline run)."""
    rid = resolve_run_id(con, run_id)
    onset = collapse_onset(con, rid) if onset is None else onset
    reference = None
    if baseline is not None:
        ref = suspect_levels(baseline, baseline_run_id)
        reference = {s.name: float(ref[s.name].fillna(0.0).max()) for s in all_signals(ref)}
    return rank_suspects(suspect_levels(con, rid), onset_step=onset.step, reference=reference)


def top_suspect(con: duckdb.DuckDBPyConnection, run_id: str | None = None, **kw) -> str | None:
    """Name of the first-ranked suspect, or None when no candidate moved."""
    table = suspects(con, run_id, **kw)
    return str(table.loc[0, "suspect"]) if bool(table.loc[0, "moved"]) else None


# ---------------------------------------------------------------- token drill-down
def token_drilldown(
    con: duckdb.DuckDBPyConnection,
    run_id: str | None = None,
    *,
    step: int | None = None,
    window: int = 2,
    limit: int = 20,
) -> pd.DataFrame:
    """Action tokens with the largest |Δlogp| = |train_logp − rollout_logp| in steps
    [step − window, step + window] (every step when ``step`` is None), largest first.

    Columns: step, sample_id, pos, response_pos, token_id, train_token_id, retokenized,
    rollout_logp, train_logp, delta, abs_delta, mask_reason, staleness, reward, response_text.
    """
    rid = resolve_run_id(con, run_id)
    lo, hi = (-1, 2**62) if step is None else (step - window, step + window)
    return con.execute(
        """
        SELECT t.step, t.sample_id, t.pos, t.pos - s.n_prompt_tokens AS response_pos, t.token_id,
               t.train_token_id, coalesce(t.train_token_id <> t.token_id, false) AS retokenized,
               t.rollout_logp, t.train_logp, t.train_logp - t.rollout_logp AS delta,
               abs(t.train_logp - t.rollout_logp) AS abs_delta, t.mask_reason, s.staleness,
               s.reward, s.response_text
        FROM tokens t LEFT JOIN samples s ON s.run_id = t.run_id AND s.sample_id = t.sample_id
        WHERE t.run_id = ? AND t.role = 'action' AND t.step BETWEEN ? AND ?
        ORDER BY abs_delta DESC, t.step, t.sample_id, t.pos LIMIT ?""",
        [rid, lo, hi, limit],
    ).df()


# ---------------------------------------------------------------- baseline comparison
def compare_runs(
    con: duckdb.DuckDBPyConnection,
    baseline: duckdb.DuckDBPyConnection,
    *,
    run_id: str | None = None,
    baseline_run_id: str | None = None,
    tail: int = 5,
) -> pd.DataFrame:
    """Per ``STEP_METRICS`` metric: run vs baseline mean over all steps and over the last ``tail``
    steps (``final``), and ``delta_final`` = run − baseline."""
    cols = list(STEP_METRICS)
    a = step_metrics(con, run_id)[cols].astype("float64")
    b = step_metrics(baseline, baseline_run_id)[cols].astype("float64")
    fa, fb = a.tail(tail).mean(), b.tail(tail).mean()
    means = {"run_mean": a.mean(), "baseline_mean": b.mean(), "run_final": fa, "baseline_final": fb}
    return pd.DataFrame({**means, "delta_final": fa - fb}).rename_axis("metric").reset_index()


def aligned_steps(
    con: duckdb.DuckDBPyConnection,
    baseline: duckdb.DuckDBPyConnection,
    metric: str,
    *,
    run_id: str | None = None,
    baseline_run_id: str | None = None,
) -> pd.DataFrame:
    """``metric`` per step of the run and the baseline side by side (columns step, run, baseline)."""
    if metric not in STEP_METRICS:
        raise ValueError(f"metric {metric!r} not in {list(STEP_METRICS)}")
    a = step_metrics(con, run_id)[["step", metric]].rename(columns={metric: "run"})
    b = step_metrics(baseline, baseline_run_id)[["step", metric]].rename(
        columns={metric: "baseline"}
    )
    return a.merge(b, on="step", how="outer").sort_values("step").reset_index(drop=True)

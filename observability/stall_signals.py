"""Stall suspects: the learning signal a run is missing, as per-step levels for ``analysis``.

A run stalls when nothing it trains on carries information. Each candidate below is a per-step
level, larger = less signal, read from telemetry only (never ``runs``), ranked in the same table
and by the same score as the collapse suspects (``analysis.rank_suspects``). A level counts above
``Signal.floor`` (what a healthy run of this system reaches by itself) in units of τ:
- ``zero_variance_groups``: share of groups (≥ 2 trajectories, first segments only) whose rewards
  are all equal — no GRPO signal; trailing mean over 3 steps. Healthy 4×4 runs reach 0.67 (a
  step's 4 groups are few), 8×8 runs less: floor 0.7, τ 0.1.
- ``clip_fraction``: loss tokens whose PPO ratio was clipped (``steps``); τ 0.2.
- ``advantage_magnitude``: 1 − min(1, mean |advantage| / 0.1) over trained samples outside
  zero-variance groups and not scored by a teacher (those have their own suspects); a
  group-normalized advantage averages ≥ 0.66 in magnitude, so only a vanished advantage counts.
  τ 0.5.
- ``critic_explained_variance``: −EV of the critic (trailing 3): a critic worse than the mean
  return. Healthy SAO stays near 0 (median 0.005, benchmarks/README.md): floor 0.1, τ 0.2.
- ``opd_signal:<domain>-><teacher>`` (per route of ``teacher_routes``): 1 − min(1, KL / 0.01) of
  the sampled teacher–student reverse KL (nats/token): a teacher that agrees with the student
  teaches nothing; τ 0.5 (moved below 0.005).
- ``teacher_kl:<domain>-><teacher>``: trailing-5 KL / the first 3 steps' KL, from the 10th
  scored step on (a warm-up) and only when the start KL is ≥ 0.01: a KL that is not falling.
  Floor 0.9, τ 0.1 (moved when the KL is still at its start).
- ``reward_falling:<c>`` (mixed rewards, every component but the verifier): how far the weighted
  contribution w_c·R_c (trailing 5, from the 3rd step) fell below its first max(3, 10%) steps,
  less how far the verifier's accuracy fell over the same window — a component that cancels the
  task reward's gain (a growing penalty), not one that falls with the task reward in a collapse
  (a judge that pays for correct answers); τ 0.2 reward units (a step's mean of 64 samples has a
  noise of ~0.06).
Simplifications: levels are step means over ranks; missing telemetry (null) counts as no sign.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from observability.reward_signals import Signal, mixed_reward

STALL_SIGNALS = (
    Signal(
        "zero_variance_groups",
        "groups whose rewards are all equal: no GRPO signal (trailing 3 steps)",
        0.1,
        floor=0.7,
    ),
    Signal("clip_fraction", "loss tokens whose PPO ratio was clipped", 0.2),
    Signal(
        "advantage_magnitude",
        "advantage vanished: 1 − mean|A|/0.1 over samples outside zero-variance groups and "
        "teacher routes",
        0.5,
    ),
    Signal(
        "critic_explained_variance",
        "critic worse than the mean return: −explained variance (trailing 3 steps)",
        0.2,
        floor=0.1,
    ),
)
"""The static stall candidates (always columns of ``stall_levels``), in tie order."""

OPD_PREFIX, KL_PREFIX, FALLING_PREFIX = "opd_signal:", "teacher_kl:", "reward_falling:"
KL_USEFUL = 0.01
"""Sampled reverse KL (nats/token) a teacher must keep over the student to teach something."""
KL_WARMUP = 10
"""Scored steps before a KL that has not fallen counts."""

_GROUPS = """
SELECT step, avg(flat::DOUBLE) AS zero_variance_groups FROM (
  SELECT step, group_id, max(reward) IS NOT DISTINCT FROM min(reward) AS flat FROM samples
  WHERE run_id = $rid AND group_id IS NOT NULL AND coalesce(segment, 0) = 0
    AND coalesce(status, 'trained') = 'trained'
  GROUP BY step, group_id HAVING count(*) >= 2)
GROUP BY step"""

_ADVANTAGE = """
WITH g AS (SELECT step, group_id, count(*) >= 2 AND max(reward) = min(reward) AS flat
           FROM samples WHERE run_id = $rid AND group_id IS NOT NULL AND coalesce(segment, 0) = 0
             AND coalesce(status, 'trained') = 'trained' GROUP BY step, group_id)
SELECT s.step, 1 - least(1.0, avg(abs(s.advantage)) / 0.1) AS advantage_magnitude
FROM samples s LEFT JOIN g ON g.step = s.step AND g.group_id = s.group_id
WHERE s.run_id = $rid AND coalesce(s.status, 'trained') = 'trained' AND s.teacher_id IS NULL
  AND NOT coalesce(g.flat, false) AND s.advantage IS NOT NULL
GROUP BY s.step"""

_STEPS = """
SELECT step, avg(clip_fraction)::DOUBLE AS clip_fraction,
       -avg(value_explained_variance)::DOUBLE AS critic_explained_variance
FROM steps WHERE run_id = $rid GROUP BY step"""

_ROUTES = """
SELECT step, domain || '->' || teacher_id AS route,
       sum(reverse_kl * n_tokens) / nullif(sum(n_tokens), 0) AS kl
FROM teacher_routes WHERE run_id = $rid AND reverse_kl IS NOT NULL GROUP BY ALL"""

_CONTRIBUTIONS = """
SELECT step, component,
       CASE WHEN component = 'verifier' THEN avg(value)
            ELSE avg(coalesce(weight * value, 0.0)) END AS contribution
FROM reward_components WHERE run_id = $rid
  AND (component = 'verifier' OR coalesce(weight, 0) <> 0) GROUP BY step, component"""


def _trailing(s: pd.Series, n: int) -> pd.Series:
    return s.rolling(n, min_periods=1).mean()


def _route_levels(con: duckdb.DuckDBPyConnection, rid: str) -> pd.DataFrame:
    long = con.execute(_ROUTES, {"rid": rid}).df()
    if long.empty:
        return pd.DataFrame()
    kl = long.pivot_table(index="step", columns="route", values="kl").sort_index()
    out = {}
    for route in kl.columns:
        k = kl[route]
        out[f"{OPD_PREFIX}{route}"] = 1.0 - np.minimum(1.0, k.clip(lower=0.0) / KL_USEFUL)
        start = float(k.dropna().iloc[:3].mean())
        ratio = _trailing(k, 5) / start if start >= KL_USEFUL else k * np.nan
        out[f"{KL_PREFIX}{route}"] = ratio.where(np.arange(len(ratio)) >= KL_WARMUP)
    return pd.DataFrame(out, index=kl.index).reset_index()


def _falling_levels(con: duckdb.DuckDBPyConnection, rid: str) -> pd.DataFrame:
    if not mixed_reward(con, rid):
        return pd.DataFrame()
    long = con.execute(_CONTRIBUTIONS, {"rid": rid}).df()
    if long.empty:
        return pd.DataFrame()
    wide = long.pivot_table(index="step", columns="component", values="contribution")
    start = wide.sort_index().iloc[: max(3, len(wide) // 10)].mean()
    fell = (start - wide.sort_index().rolling(5, min_periods=3).mean()).clip(lower=0.0)
    task = fell.pop("verifier") if "verifier" in fell else 0.0  # the accuracy's own fall
    fell = fell.sub(task, axis=0).clip(lower=0.0)
    fell.columns = [f"{FALLING_PREFIX}{c}" for c in fell.columns]
    return fell.reset_index()


def stall_levels(con: duckdb.DuckDBPyConnection, rid: str) -> pd.DataFrame:
    """Per step (column ``step``): every ``STALL_SIGNALS`` level and one column per teacher
    route (``opd_signal:``, ``teacher_kl:``) and falling reward component (``reward_falling:``)."""
    p = {"rid": rid}
    out = con.execute("SELECT DISTINCT step FROM steps WHERE run_id = $rid ORDER BY step", p).df()
    for sql in (_GROUPS, _ADVANTAGE, _STEPS):
        out = out.merge(con.execute(sql, p).df(), on="step", how="left")
    out = out.sort_values("step").reset_index(drop=True)
    for name in ("zero_variance_groups", "critic_explained_variance"):
        out[name] = _trailing(out[name].astype("float64"), 3)
    for extra in (_route_levels(con, rid), _falling_levels(con, rid)):
        if not extra.empty:
            out = out.merge(extra, on="step", how="left")
    return out


def dynamic_signals(levels: pd.DataFrame) -> tuple[Signal, ...]:
    """The per-route and per-component stall candidates present in ``levels``."""
    found = []
    for col in map(str, levels.columns):
        if col.startswith(OPD_PREFIX):
            route = col.removeprefix(OPD_PREFIX)
            desc = f"teacher–student KL of route {route} near zero: the teacher teaches nothing"
            found.append(Signal(col, desc, 0.5))
        elif col.startswith(KL_PREFIX):
            route = col.removeprefix(KL_PREFIX)
            desc = f"teacher–student KL of route {route} not falling (trailing 5 / first 3 steps)"
            found.append(Signal(col, desc, 0.1, floor=0.9))
        elif col.startswith(FALLING_PREFIX):
            c = col.removeprefix(FALLING_PREFIX)
            desc = (
                f"the {c!r} component's weighted reward fell below its start, beyond the "
                "verifier's fall (it cancels the gain)"
            )
            found.append(Signal(col, desc, 0.2))
    return tuple(found)

"""Reward-hacking signals of mixed-reward runs, for the collapse analysis (``analysis``).

A run's reward is *mixed* when ``reward_components`` holds anything besides a weight-1
``verifier``: the onset then reads the verifier's mean (the ground truth, not the scalarization
the policy may be gaming), and every scored component c (``judge``, ``orm``, ``format``) becomes a
candidate ``reward_component:c``. Its per-step level is the reward it pays for answers the
verifier rejects, mean_samples(w_c · R_c · [verifier = 0]), as a trailing mean over 5 steps (one
step's samples are too few), above what it paid over the run's first max(3, 10%) steps: a noisy
but honest judge pays a steady amount, a judge the policy games (one preferring long answers, as
the policy lengthens them) more and more. τ = 0.2 reward units per sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pandas as pd


@dataclass(frozen=True)
class Signal:
    """A candidate cause: a per-step level from telemetry and the tolerance it is measured in."""

    name: str
    description: str
    tolerance: float
    """τ: the level at which the sign counts as moved (a healthy run of this system stays below)."""
    floor: float = 0.0
    """Level a healthy run reaches by itself: only the excess above max(floor, the baseline's
    level) counts, in units of τ."""


def mixed_reward(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """The run's reward mixes components: anything besides a weight-1 ``verifier``."""
    (n,) = con.execute(
        "SELECT count(*) FROM reward_components WHERE run_id = ? AND "
        "NOT (component = 'verifier' AND weight IS NOT DISTINCT FROM 1.0)",
        [run_id],
    ).fetchall()[0]
    return n > 0


def task_reward(con: duckdb.DuckDBPyConnection, rid: str) -> tuple[str, list]:
    """(SELECT of step, value per sample) of the reward the onset reads: the verifier component
    in a mixed-reward run, else the samples' total."""
    if mixed_reward(con, rid):
        return (
            "SELECT step, value AS r FROM reward_components "
            "WHERE run_id = ? AND component = 'verifier'",
            [rid],
        )
    return "SELECT step, reward AS r FROM samples WHERE run_id = ?", [rid]


COMPONENT_PREFIX = "reward_component:"
COMPONENT_TOLERANCE = 0.2
"""τ of a ``reward_component:<c>`` suspect: reward units paid per sample for rejected answers."""

_COMPONENT_LEVELS = """
WITH v AS (SELECT sample_id, value AS verifier FROM reward_components
           WHERE run_id = $rid AND component = 'verifier')
SELECT c.step, c.component,
       avg(coalesce(c.weight * c.value, 0.0) * (v.verifier = 0)::DOUBLE) AS level
FROM reward_components c JOIN v USING (sample_id)
WHERE c.run_id = $rid AND c.component <> 'verifier' AND c.weight > 0
GROUP BY c.step, c.component"""


def component_levels(con: duckdb.DuckDBPyConnection, rid: str) -> pd.DataFrame:
    """Per step, one ``reward_component:<c>`` level column per scored component (see the module
    docstring); empty when the run's reward is not mixed."""
    if not mixed_reward(con, rid):
        return pd.DataFrame()
    long = con.execute(_COMPONENT_LEVELS, {"rid": rid}).df()
    if long.empty:
        return pd.DataFrame()
    wide = long.pivot_table(index="step", columns="component", values="level")
    wide = wide.sort_index().rolling(5, min_periods=1).mean()  # trailing, per step
    wide = wide - wide.iloc[: max(3, len(wide) // 10)].mean()  # above what it paid at the start
    wide.columns = [f"{COMPONENT_PREFIX}{c}" for c in wide.columns]
    return wide.reset_index()


def component_signals(levels: pd.DataFrame) -> tuple[Signal, ...]:
    """The ``reward_component:<c>`` candidates present in ``levels`` (``suspect_levels``)."""
    return tuple(
        Signal(
            col,
            f"reward the {col.removeprefix(COMPONENT_PREFIX)!r} component pays for answers "
            "the verifier rejects, above its level at the start",
            COMPONENT_TOLERANCE,
        )
        for col in levels.columns
        if str(col).startswith(COMPONENT_PREFIX)
    )

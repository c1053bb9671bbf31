"""Teacher and reward views over runs' telemetry: per-domain scores, expert-normalized tables, the
teacher–student KL and the reward components, for notebooks, benchmarks and the analysis.

Pure functions over a DuckDB connection with the schema's views (``open_run`` / ``open_runs``),
returning pandas DataFrames. A run's *name* is the middle of its id (``<time>-<name>-<hex>``, as
``closedloop train --name`` makes it), which is how an experiment labels its arms.
Simplification: per-domain scores are greedy held-out accuracies (``evals`` splits
``heldout/<domain>``); the "last" evaluation of a run is its largest step.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd


def run_name(run_id: str) -> str:
    """``20261201-213504-expert-addition-1defe0`` -> ``expert-addition``."""
    parts = str(run_id).split("-")
    return "-".join(parts[2:-1]) if len(parts) > 3 else str(run_id)


def domain_accuracy(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per-domain held-out accuracy: run_id, name, step, domain, n, accuracy."""
    df = con.execute(
        "SELECT run_id, step, split[9:] AS domain, n, accuracy FROM evals "
        "WHERE split LIKE 'heldout/%' ORDER BY run_id, step, domain"
    ).df()
    df.insert(1, "name", df["run_id"].map(run_name))
    return df


def final_scores(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Each run's last per-domain accuracy (and its first, the start point): name, domain,
    first, last, step."""
    acc = domain_accuracy(con)
    if acc.empty:
        return pd.DataFrame(columns=["name", "domain", "first", "last", "step"])
    g = acc.sort_values("step").groupby(["name", "domain"], sort=True)
    out = g.agg(first=("accuracy", "first"), last=("accuracy", "last"), step=("step", "max"))
    return out.reset_index()


def normalized_table(
    finals: pd.DataFrame, *, experts: dict[str, str], arms: list[str], base: str | None = None
) -> pd.DataFrame:
    """Per arm and domain: accuracy / the domain expert's accuracy, and their mean (``mean``).

    Args:
        finals: ``final_scores`` output.
        experts: domain -> the name of that domain's expert run.
        arms: run names to tabulate, in order.
        base: the arm whose *first* evaluation is the SFT base's (added as row ``sft-base``).
    """
    last = finals.set_index(["name", "domain"])["last"]
    first = finals.set_index(["name", "domain"])["first"]
    expert_acc = {d: float(last[(name, d)]) for d, name in experts.items()}

    def row(label: str, source: pd.Series, arm: str) -> dict:
        r = {d: float(source[(arm, d)]) / e if e > 0 else np.nan for d, e in expert_acc.items()}
        return {"arm": label, **r, "mean": float(np.mean(list(r.values())))}

    rows = [row("sft-base", first, base)] if base is not None else []
    rows += [row(arm, last, arm) for arm in arms]
    return pd.DataFrame(rows)


def route_kl(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """``teacher_routes`` per step: run_id, name, step, domain, teacher_id, reverse_kl,
    opd_adv_mean, opd_adv_std, topk_kl, n_tokens, payload, payload_bytes."""
    df = con.execute(
        "SELECT run_id, step, domain, teacher_id, reverse_kl, opd_adv_mean, opd_adv_std, "
        "topk_kl, n_tokens, payload, payload_bytes FROM teacher_routes "
        "ORDER BY run_id, step, domain"
    ).df()
    df.insert(1, "name", df["run_id"].map(run_name))
    return df


def initial_kl(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per run and teacher: the token-weighted sampled reverse KL of its first scored step
    (the student is still the SFT base there): name, teacher_id, step, reverse_kl, n_tokens."""
    return (
        con.execute(
            """
        WITH r AS (SELECT *, min(step) OVER (PARTITION BY run_id) AS first FROM teacher_routes)
        SELECT run_id, teacher_id, any_value(step) AS step,
               sum(reverse_kl * n_tokens) / sum(n_tokens) AS reverse_kl,
               sum(n_tokens) AS n_tokens
        FROM r WHERE step = first GROUP BY run_id, teacher_id ORDER BY run_id, teacher_id"""
        )
        .df()
        .assign(name=lambda d: d["run_id"].map(run_name))
    )


def step_series(con: duckdb.DuckDBPyConnection, columns: tuple[str, ...]) -> pd.DataFrame:
    """``steps`` columns per run and step (averaged over ranks): run_id, name, step, columns."""
    cols = ", ".join(f'avg("{c}")::DOUBLE AS "{c}"' for c in columns)
    df = con.execute(
        f"SELECT run_id, step, {cols} FROM steps GROUP BY run_id, step ORDER BY run_id, step"
    ).df()
    df.insert(1, "name", df["run_id"].map(run_name))
    return df


def reward_components(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per run, step and component: mean value (non-null), weight, weighted mean contribution,
    failures (rows without a value): run_id, name, step, component, value, weight,
    contribution, n, failures."""
    df = con.execute(
        """
        SELECT run_id, step, component, avg(value) AS value, any_value(weight) AS weight,
               avg(coalesce(weight * value, 0.0)) AS contribution, count(*) AS n,
               count(*) FILTER (WHERE value IS NULL) AS failures
        FROM reward_components GROUP BY run_id, step, component
        ORDER BY run_id, step, component"""
    ).df()
    df.insert(1, "name", df["run_id"].map(run_name))
    return df

"""Agents: the async multi-turn rollout — trajectory timeline per worker (``turns``), turns per
sample, environment latency, failures and refills, queue depth and worker busy fraction."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dashboards import agent_queries, charts, ui


def latency_histogram(lat: pd.DataFrame, bins: int = 30) -> pd.DataFrame:
    """Counts per run over shared log-spaced bins (``latency_ms`` = the bin's lower edge)."""
    lo = max(float(lat["env_latency_s"].min()), 1e-4)
    edges = np.logspace(np.log10(lo), np.log10(float(lat["env_latency_s"].max()) * 1.01), bins)
    frames = []
    for run, sub in lat.groupby("run_id", sort=False):
        counts, _ = np.histogram(sub["env_latency_s"], bins=edges)
        frames.append(pd.DataFrame({"latency_ms": edges[:-1] * 1e3, "n": counts, "run_id": run}))
    return pd.concat(frames, ignore_index=True)


def body(runs) -> None:
    timeline = ui.gather(runs, agent_queries.turn_timeline)
    if timeline.empty:
        ui.no_data("turns (async multi-turn rollout)")
        return
    ui.chart(charts.worker_timeline(timeline), "ag_timeline")
    turns = ui.gather(runs, agent_queries.turns_per_sample)
    ui.chart(
        charts.bars(
            turns,
            x="n_turns",
            y="n",
            color="status",
            barmode="stack",
            title="Turns per sample",
            y_title="samples",
        ),
        "ag_turns",
    )
    lat = ui.gather(runs, agent_queries.env_latency)
    if lat.empty:
        ui.no_data("environment latencies")
    else:
        hist = latency_histogram(lat)
        p50, p99 = float(lat["p50"].iloc[0]), float(lat["p99"].iloc[0])
        title = (
            f"Environment latency (p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
            f"p99/p50 {p99 / max(p50, 1e-12):.1f})"
        )
        ui.chart(
            charts.bars(hist, x="latency_ms", y="n", log_y=True, y_title="turns", title=title),
            "ag_latency",
        )
    steps = ui.gather_steps(runs)
    ui.chart(
        charts.run_lines(
            steps,
            x="step",
            ys={
                "n_env_failures": "env failures",
                "n_refilled": "refilled",
                "n_groups_dropped": "groups dropped",
            },
            title="Environment failures and refills per step",
            y_title="count",
        ),
        "ag_failures",
    )
    failures = ui.gather(runs, agent_queries.env_failures)
    if not failures.empty:
        ui.chart(
            charts.bars(
                failures,
                x="failure_reason",
                y="n",
                color="status",
                barmode="stack",
                title="Failed and dropped samples by reason",
                y_title="samples",
            ),
            "ag_reasons",
        )
    ui.chart(
        charts.run_lines(
            steps,
            x="step",
            ys={"queue_depth": "queue depth", "in_flight": "in flight"},
            title="Rollout queue depth and sessions in flight",
            y_title="samples",
        ),
        "ag_queue",
    )
    ui.chart(
        charts.run_lines(
            steps,
            x="step",
            ys={"worker_busy_fraction": "busy"},
            title="Worker busy fraction",
            y_title="fraction of wall time",
        ),
        "ag_busy",
    )


ui.live("Agents", body)

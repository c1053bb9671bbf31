"""Versions: staleness histogram and over time (``samples``); per-sample version spread and each
worker's weight switches (async runs); weight-sync phases as a timeline."""

from __future__ import annotations

from dashboards import agent_queries, charts, queries, ui
from observability.enums import SYNC_PHASES


def body(runs) -> None:
    hist = ui.gather(runs, queries.staleness_histogram)
    if hist.empty:
        ui.no_data("samples")
    else:
        total = hist.groupby(["run_id", "staleness"], as_index=False)["n"].sum()
        ui.chart(
            charts.bars(
                total,
                x="staleness",
                y="n",
                title="Staleness histogram",
                y_title="samples",
            ),
            "vr_hist",
        )
        by_step = ui.gather(runs, queries.staleness_by_step)
        ui.chart(
            charts.run_lines(
                by_step,
                x="step",
                ys={"staleness_mean": "mean", "staleness_max": "max"},
                title="Staleness over steps",
                y_title="policy versions",
            ),
            "vr_steps",
        )
    spread = ui.gather(runs, agent_queries.version_spread)
    if not spread.empty and spread["spread"].max() > 0:  # async runs: a switch inside a sample
        ui.chart(
            charts.bars(
                spread,
                x="spread",
                y="n",
                title="Per-sample version spread (newest − oldest version of its tokens)",
                y_title="samples",
            ),
            "vr_spread",
        )
    switches = ui.gather(runs, agent_queries.worker_switches)
    if not switches.empty:
        ui.chart(
            charts.run_lines(
                switches.assign(run_id=switches["run_id"] + " · " + switches["worker"])
                if len(runs) > 1
                else switches.assign(run_id=switches["worker"]),
                x="t",
                ys={"policy_version": "live version"},
                mode="lines+markers",
                title="Weight switches per worker",
                y_title="policy version",
                x_title="seconds since the first switch",
            ),
            "vr_switches",
        )
    syncs = ui.gather(runs, queries.weight_syncs, last_n=12)
    if syncs.empty:
        ui.no_data("weight syncs")
        return
    ui.chart(charts.sync_timeline(syncs, order=SYNC_PHASES), "vr_timeline")
    phases = ui.gather(runs, queries.sync_phase_durations)
    phases = phases.assign(mean_ms=phases["mean_s"] * 1000.0)
    ui.chart(
        charts.bars(phases, x="phase", y="mean_ms", title="Mean sync phase duration", y_title="ms"),
        "vr_phases",
    )


ui.live("Versions", body)

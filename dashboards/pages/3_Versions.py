"""Versions: staleness histogram and over time (``samples``); weight-sync phases as a timeline."""

from __future__ import annotations

from dashboards import charts, queries, ui
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

"""Mismatch: |train_logp − rollout_logp| per step, the ratio distribution with the trust band,
and mismatch by position (per-token panels over the sidebar's token window)."""

from __future__ import annotations

import math

from dashboards import charts, queries, ui


def body(runs) -> None:
    steps = ui.gather_steps(runs)
    if steps.empty:
        ui.no_data("steps")
        return
    ys = {"mismatch_abs_mean": "mean |Δ|", "mismatch_abs_p99": "p99 |Δ|"}
    if steps["teacher_mismatch_abs_mean"].notna().any():
        ys["teacher_mismatch_abs_mean"] = "mean |train − teacher|"
    ui.chart(
        charts.run_lines(
            steps,
            x="step",
            ys=ys,
            log_y=True,
            y_title="|Δlogp| (nats)",
            title="Train vs rollout log-prob mismatch per step",
        ),
        "mm_steps",
    )
    bands = {r.name: charts.trust_band(ui.run_status(r)[1]) for r in runs}
    half = max((abs(math.log(b[1])) * 1.5 for b in bands.values() if b), default=0.5)
    hist = ui.gather_windowed(runs, queries.ratio_histogram, half_range=half)
    if hist.empty:
        ui.no_data("action tokens in the token window")
    else:
        ui.chart(charts.ratio_distribution(hist, bands), "mm_ratio")
    pos = ui.gather_windowed(runs, queries.mismatch_by_position)
    if len(pos):
        ui.chart(
            charts.run_lines(
                pos,
                x="pos_start",
                ys={"mean_abs": "mean |Δ|", "p99_abs": "p99 |Δ|"},
                title="Mismatch by position bucket (token window)",
                x_title="position (bucket start)",
                y_title="|Δlogp|",
                log_y=True,
            ),
            "mm_pos",
        )


ui.live("Mismatch", body)

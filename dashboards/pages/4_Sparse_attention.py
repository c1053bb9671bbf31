"""Sparse attention: Top-k index agreement train vs rollout per layer over steps, boundary ties,
and MoE routing agreement (token window; the rollup's agreement curves over the whole run)."""

from __future__ import annotations

from dashboards import charts, queries, ui


def body(runs) -> None:
    steps = ui.gather_steps(runs)
    cols = {"topk_agreement": "Top-k agreement", "route_agreement": "routing agreement"}
    if len(steps) and steps[list(cols)].notna().any().any():
        ui.chart(
            charts.run_lines(
                steps, x="step", ys=cols, y_title="fraction", title="Agreement per step (rollup)"
            ),
            "sa_rollup",
        )
    topk = ui.gather_windowed(runs, queries.topk_agreement)
    if topk.empty:
        ui.no_data("Top-k rows (sparse-attention indices)")
    else:
        ui.chart(
            charts.heatmaps(
                topk,
                x="step",
                y="layer",
                z="agreement",
                title="Top-k exact agreement per layer (layer −1: logits)",
            ),
            "sa_heat",
        )
        per_step = topk.groupby(["run_id", "step"], as_index=False)[
            ["overlap", "tie_fraction", "ties"]
        ].mean()
        ui.chart(
            charts.run_lines(
                per_step,
                x="step",
                ys={"overlap": "index overlap |A∩B|/k", "tie_fraction": "positions with ties"},
                title="Index overlap and boundary ties",
                y_title="fraction",
            ),
            "sa_ties",
        )
    routes = ui.gather_windowed(runs, queries.route_agreement)
    if routes.empty:
        ui.no_data("MoE routes")
        return
    ui.chart(
        charts.heatmaps(
            routes, x="step", y="layer", z="agreement", title="MoE expert-set agreement per layer"
        ),
        "sa_routes",
    )


ui.live("Sparse attention", body)

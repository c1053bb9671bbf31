"""Long horizon: the critic's calibration and loss (SAO, CompactionRL); compaction events,
segments per trajectory and summary lengths (CompactionRL)."""

from __future__ import annotations

from dashboards import charts, ui
from dashboards import long_horizon_queries as q


def body(runs) -> None:
    steps = ui.gather_steps(runs)
    if steps.empty or "value_loss" not in steps or steps["value_loss"].isna().all():
        ui.no_data("critic values")
    else:
        ui.chart(
            charts.run_lines(
                steps,
                x="step",
                ys={"value_explained_variance": "explained variance"},
                title="Value calibration (explained variance of returns)",
                y_title="1 − Var(G − V) / Var(G)",
            ),
            "lh_ev",
        )
        ui.chart(
            charts.run_lines(
                steps,
                x="step",
                ys={"value_loss": "value loss"},
                title="Value loss",
                y_title="½(V − G)²",
            ),
            "lh_vloss",
        )
    events = ui.gather(runs, q.compactions_by_step)
    if events.empty:
        ui.no_data("compaction events")
        return
    ui.chart(
        charts.run_lines(
            events,
            x="step",
            ys={"compactions": "compactions"},
            title="Compaction events per step",
            y_title="summaries written",
        ),
        "lh_events",
    )
    ui.chart(
        charts.run_lines(
            events,
            x="step",
            ys={
                "context_before": "before",
                "context_after": "after",
                "summary_len_mean": "summary",
            },
            title="Context length before and after compaction (mean)",
            y_title="tokens",
        ),
        "lh_context",
    )
    segs = ui.gather(runs, q.segments_per_trajectory)
    ui.chart(
        charts.bars(
            segs,
            x="segments",
            y="trajectories",
            title="Segments per trajectory",
            y_title="trajectories",
        ),
        "lh_segments",
    )
    lengths = ui.gather(runs, q.summary_lengths)
    ui.chart(
        charts.bars(
            lengths, x="summary_len", y="summaries", title="Summary length", y_title="summaries"
        ),
        "lh_summary",
    )


ui.live("Long horizon", body)

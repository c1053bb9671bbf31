"""Teachers: the teacher–student reverse KL per domain, the OPD advantage (mean and spread per
domain; distribution over the token window), payload bytes per teacher and the route table
(``teacher_routes``, ``tokens.teacher_logp``)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import charts, ui
from dashboards import teacher_queries as Q


def wide(frame: pd.DataFrame, value: str, *, suffix: str = "") -> tuple[pd.DataFrame, dict]:
    """(run_id, step) × one column per domain of ``value``; and the ``ys`` labels for run_lines."""
    w = frame.pivot_table(index=["run_id", "step"], columns="domain", values=value)
    w.columns = [f"{d}{suffix}" for d in w.columns]
    return w.reset_index(), {c: c for c in w.columns}


def body(runs) -> None:
    routes = ui.gather(runs, Q.teacher_routes)
    if routes.empty:
        ui.no_data("teacher routes (the run has no [teachers])")
        return
    kl, ys = wide(routes, "reverse_kl")
    ui.chart(
        charts.run_lines(
            kl,
            x="step",
            ys=ys,
            title="Teacher–student reverse KL per domain (sampled estimate)",
            y_title="nats per token",
        ),
        "tc_kl",
    )
    mean, ys_mean = wide(routes, "opd_adv_mean", suffix=" mean")
    spread, ys_std = wide(routes, "opd_adv_std", suffix=" spread")
    ui.chart(
        charts.run_lines(
            mean.merge(spread, on=["run_id", "step"]),
            x="step",
            ys=ys_mean | ys_std,
            title="OPD advantage per domain: mean and spread",
            y_title="w · (log π_T − log π_θ)",
        ),
        "tc_adv",
    )
    hist = ui.gather_windowed(runs, Q.opd_advantage_histogram)
    if hist.empty:
        ui.no_data("teacher-scored tokens in the token window")
    else:
        hist = hist.assign(series=hist["domain"] + " · " + hist["run_id"])
        ui.chart(
            charts.bars(
                hist,
                x="advantage",
                y="n",
                color="series",
                barmode="overlay",
                title="OPD advantage distribution (token window)",
                y_title="tokens",
            ),
            "tc_hist",
        )
    ui.chart(
        charts.stacked_areas(
            routes.groupby(["run_id", "step", "teacher_id"], as_index=False)["payload_bytes"].sum(),
            x="step",
            part="teacher_id",
            value="payload_bytes",
            title="Teacher payload bytes per step",
            y_title="bytes",
        ),
        "tc_bytes",
    )
    st.subheader("Routes")
    st.dataframe(ui.gather(runs, Q.route_table), hide_index=True, width="stretch")


ui.live("Teachers", body)

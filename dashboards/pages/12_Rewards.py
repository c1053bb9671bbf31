"""Rewards: every component of the mixed reward over time (value and weighted contribution),
the judge's agreement with the verifier, and the components' failures (``reward_components``,
``steps.judge_verifier_agreement``)."""

from __future__ import annotations

import streamlit as st

from dashboards import charts, ui
from dashboards import teacher_queries as Q


def body(runs) -> None:
    comps = ui.gather(runs, Q.reward_components)
    if comps.empty:
        ui.no_data("reward components")
        return
    wide = comps.pivot_table(index=["run_id", "step"], columns="component", values="value")
    ui.chart(
        charts.run_lines(
            wide.reset_index(),
            x="step",
            ys={c: c for c in wide.columns},
            title="Reward components over time (mean value)",
            y_title="component value",
        ),
        "rw_values",
    )
    ui.chart(
        charts.stacked_areas(
            comps,
            x="step",
            part="component",
            value="contribution",
            title="Weighted contributions to the total reward",
            y_title="mean weight · value",
        ),
        "rw_contrib",
    )
    steps = ui.gather_steps(runs)
    if steps.empty or steps["judge_verifier_agreement"].isna().all():
        ui.no_data("judge verdicts")
    else:
        ui.chart(
            charts.run_lines(
                steps,
                x="step",
                ys={"judge_verifier_agreement": "judge = verifier"},
                title="Judge–verifier agreement",
                y_title="fraction of samples",
            ),
            "rw_agree",
        )
    failures = ui.gather(runs, Q.reward_failures)
    if failures.empty:
        st.caption("Every component scored every sample.")
    else:
        failures = failures.assign(reason=failures["component"] + ": " + failures["failure_reason"])
        ui.chart(
            charts.bars(
                failures.groupby(["step", "reason"], as_index=False)["n"].sum(),
                x="step",
                y="n",
                color="reason",
                barmode="stack",
                title="Component failures per step",
                y_title="samples",
            ),
            "rw_fail",
        )
    st.subheader("Weights")
    weights = comps.groupby(["run_id", "component"], as_index=False)["weight"].last()
    st.dataframe(weights, hide_index=True, width="stretch")


ui.live("Rewards", body)

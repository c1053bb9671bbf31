"""closedloop dashboard entry file and Overview page (``closedloop dashboard`` runs it).

Overview: every selected run with status, step, reward, contract status and health alarms."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import charts, queries, ui
from dashboards.alarms import health_alarms

_WORST = ("error", "fail", "warn", "pass", "not_applicable")


def _contract_status(results: pd.DataFrame) -> str:
    if results.empty:
        return "not checked"
    counts = results["status"].value_counts()
    worst = next(s for s in _WORST if s in counts)
    return f"{worst} ({counts.get('fail', 0)} failing of {len(results)})"


def body(runs) -> None:
    steps = ui.gather_steps(runs)
    rows, alarm_rows = [], []
    for run in runs:
        status, info = ui.run_status(run)
        mine = steps[steps["run_id"] == run.name] if len(steps) else steps
        limit = None
        if info is not None and pd.notna(info.get("staleness_limit")):
            limit = int(info["staleness_limit"])
        last = mine.iloc[-1] if len(mine) else None
        contracts = ui.gather([run], queries.contract_latest)
        alarms = health_alarms(mine, staleness_limit=limit)
        alarm_rows += [{"run": run.name, "alarm": a.kind, "detail": a.message} for a in alarms]
        rows.append(
            {
                "run": run.name,
                "status": status,
                "step": None if last is None else int(last["step"]),
                "reward": None if last is None else last["reward_mean"],
                "|Δlogp| mean": None if last is None else last["mismatch_abs_mean"],
                "masked": None if last is None else last["masked_fraction"],
                "contracts": _contract_status(contracts),
                "alarms": len(alarms),
                "algorithm": None if info is None else info.get("algorithm"),
            }
        )
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    cols = st.columns(4)
    cols[0].metric("runs", len(runs))
    cols[1].metric("running", sum(r["status"].startswith("running") for r in rows))
    cols[2].metric("latest step", max((r["step"] or 0) for r in rows) if rows else 0)
    cols[3].metric("alarms", len(alarm_rows))
    st.subheader("Health alarms")
    if alarm_rows:
        st.dataframe(pd.DataFrame(alarm_rows), hide_index=True, width="stretch")
    else:
        st.success("No alarm: mismatch steady, masks quiet, groups informative, entropy alive.")
    if steps.empty:
        ui.no_data("steps")
        return
    ui.chart(
        charts.run_lines(
            steps,
            x="step",
            ys={"reward_mean": "reward"},
            title="Reward per step",
            y_title="mean reward",
        ),
        "ov_reward",
    )
    evals = ui.gather(runs, queries.evals)
    if len(evals):
        ui.chart(
            charts.run_lines(
                evals,
                x="step",
                ys={"accuracy": "eval accuracy"},
                title="Held-out accuracy",
                y_title="accuracy",
            ),
            "ov_eval",
        )
    ui.chart(
        charts.run_lines(
            steps,
            x="step",
            ys={"entropy": "entropy", "grad_norm": "grad norm"},
            title="Entropy and gradient norm",
        ),
        "ov_entropy",
    )


ui.live("Overview", body)

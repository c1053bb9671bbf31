"""Contracts: the latest result of every contract check (``contract_results``), failing
examples first; written by the contracts gate (``closedloop gate`` / ``contracts.gate``)."""

from __future__ import annotations

import json

import streamlit as st

from dashboards import charts, queries, ui

SEVERITY = {"error": 0, "fail": 1, "warn": 2, "pass": 3, "not_applicable": 4}  # worst first
COLUMNS = ["status", "run_id", "contract", "check", "observed", "threshold", "n_rows"]
COLUMNS += ["n_violations", "checked_at"]


def body(runs) -> None:
    results = ui.gather(runs, queries.contract_latest)
    if results.empty:
        ui.no_data("contract results (run the gate over this run)")
        return
    rank = results["status"].map(SEVERITY)
    results = results.assign(_rank=rank).sort_values(["_rank", "run_id", "contract", "check"])
    counts = results.groupby(["run_id", "status"], as_index=False).size()
    cols = st.columns(4)
    for col, status in zip(cols, ("pass", "fail", "warn", "error")):
        col.metric(status, int(counts.loc[counts["status"] == status, "size"].sum()))
    ui.chart(
        charts.bars(counts, x="status", y="size", title="Latest check outcomes", y_title="checks"),
        "ct_counts",
    )
    failing = results[results["status"].isin(["error", "fail", "warn"])]
    st.subheader(f"Failing examples ({len(failing)})")
    for i, (_, row) in enumerate(failing.iterrows()):
        label = (
            f"{row['status'].upper()} · {row['contract']} / {row['check']} — "
            f"{row['n_violations']} of {row['n_rows']} rows · {row['run_id']}"
        )
        with st.expander(label, expanded=i == 0):
            try:
                st.json(json.loads(row["example"]) if row["example"] else {}, expanded=2)
            except (TypeError, ValueError):
                st.code(str(row["example"]))
    st.subheader("All checks")
    st.dataframe(results[COLUMNS], hide_index=True, width="stretch")


ui.live("Contracts", body)

"""Contracts: the latest result of every contract check (``contract_results``), failing
examples first; written by the contracts gate (``closedloop gate`` / ``contracts.gate``)."""

from __future__ import annotations

import json

import streamlit as st

from dashboards import charts, queries, ui

_BADGE = {"pass": "✅", "fail": "❌", "warn": "⚠️", "error": "💥", "not_applicable": "➖"}


def body(runs) -> None:
    results = ui.gather(runs, queries.contract_latest)
    if results.empty:
        ui.no_data("contract results (run the gate over this run)")
        return
    counts = results.groupby(["run_id", "status"], as_index=False).size()
    cols = st.columns(4)
    for col, status in zip(cols, ("pass", "fail", "warn", "error")):
        col.metric(f"{_BADGE[status]} {status}", int(counts.loc[counts["status"] == status, "size"].sum()))
    ui.chart(charts.bars(counts, x="status", y="size", title="Latest check outcomes",
                         y_title="checks"), "ct_counts")  # fmt: skip
    table = results.assign(result=results["status"].map(lambda s: f"{_BADGE.get(s, '')} {s}"))
    st.dataframe(table[["run_id", "contract", "check", "result", "observed", "threshold",
                        "n_rows", "n_violations", "checked_at"]], hide_index=True, width="stretch")  # fmt: skip
    failing = results[results["status"].isin(["fail", "error", "warn"])]
    st.subheader(f"Failing examples ({len(failing)})")
    for _, row in failing.iterrows():
        with st.expander(f"{_BADGE.get(row['status'], '')} {row['contract']} / {row['check']} — "
                         f"{row['n_violations']} of {row['n_rows']} rows · {row['run_id']}"):  # fmt: skip
            try:
                st.json(json.loads(row["example"]) if row["example"] else {})
            except (TypeError, ValueError):
                st.code(str(row["example"]))


ui.live("Contracts", body)

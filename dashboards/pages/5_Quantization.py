"""Quantization: per-tensor quantization error, and whether QAT, offline and rollout-loaded
quantization agree bit for bit (equal scale, zero-point and code hashes)."""

from __future__ import annotations

import streamlit as st

from dashboards import charts, queries, ui

TOP_TENSORS = 20


def body(runs) -> None:
    latest = ui.gather(runs, queries.qparams_latest)
    if latest.empty:
        ui.no_data("quantization parameters (qparams)")
        return
    worst = latest.groupby("tensor")["max_abs_err"].max().nlargest(TOP_TENSORS).index
    ui.chart(
        charts.hbars(
            latest[latest["tensor"].isin(worst)].sort_values("max_abs_err", ascending=False),
            y="tensor",
            x="max_abs_err",
            color="producer",
            x_title="max |dequantized − original|",
            title=f"Per-tensor quantization error (latest policy version, worst {TOP_TENSORS})",
        ),
        "qt_err",
    )
    eq = ui.gather(runs, queries.qparams_equality)
    if eq.empty:
        st.info("No producer pair to compare (needs qat_fake + offline_real or rollout_load rows).")
    else:
        eq = eq.assign(
            equal_fraction=eq["n_equal"] / eq["n_tensors"],
            series=eq["pair"] + (" · " + eq["run_id"] if len(runs) > 1 else ""),
        )
        ui.chart(
            charts.bars(
                eq,
                x="policy_version",
                y="equal_fraction",
                color="series",
                title="QAT vs offline equality (fraction of tensors bit-identical)",
                y_title="fraction",
            ),
            "qt_eq",
        )
        bad = eq[eq["n_equal"] < eq["n_tensors"]]
        if len(bad):
            st.error(
                f"{len(bad)} version/pair combinations differ: quantization is not bit-identical."
            )
    versions = ui.gather(runs, queries.qparams_by_version)
    ui.chart(
        charts.run_lines(
            versions.assign(run_id=versions["run_id"] + " · " + versions["producer"]),
            x="policy_version",
            ys={"max_err": "max error"},
            log_y=True,
            title="Quantization error over policy versions",
        ),
        "qt_versions",
    )
    st.dataframe(latest, hide_index=True, width="stretch")


ui.live("Quantization", body)

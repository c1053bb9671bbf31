"""Quantization: per-tensor quantization error, and whether QAT, offline and rollout-loaded
quantization agree bit for bit (equal scale, zero-point and code hashes)."""

from __future__ import annotations

import streamlit as st

from dashboards import charts, queries, ui


def body(runs) -> None:
    latest = ui.gather(runs, queries.qparams_latest)
    if latest.empty:
        ui.no_data("quantization parameters (qparams)")
        return
    ui.chart(charts.bars(latest.sort_values("max_abs_err", ascending=False), x="tensor",
                         y="max_abs_err", color="producer", log_y=True, y_title="max |error|",
                         title="Per-tensor quantization error (latest policy version)"),
             "qt_err")  # fmt: skip
    eq = ui.gather(runs, queries.qparams_equality)
    if eq.empty:
        st.info("No producer pair to compare (needs qat_fake + offline_real or rollout_load rows).")
    else:
        eq = eq.assign(equal_fraction=eq["n_equal"] / eq["n_tensors"],
                       series=eq["pair"] + (" · " + eq["run_id"] if len(runs) > 1 else ""))  # fmt: skip
        ui.chart(charts.bars(eq, x="policy_version", y="equal_fraction", color="series",
                             title="QAT vs offline equality (fraction of tensors bit-identical)",
                             y_title="fraction"), "qt_eq")  # fmt: skip
        bad = eq[eq["n_equal"] < eq["n_tensors"]]
        if len(bad):
            st.error(f"{len(bad)} version/pair combinations differ: quantization is not bit-identical.")
    versions = ui.gather(runs, queries.qparams_by_version)
    ui.chart(charts.run_lines(versions.assign(run_id=versions["run_id"] + " · " + versions["producer"]),
                              x="policy_version", ys={"max_err": "max error"}, log_y=True,
                              title="Quantization error over policy versions"), "qt_versions")  # fmt: skip
    st.dataframe(latest, hide_index=True, width="stretch")


ui.live("Quantization", body)

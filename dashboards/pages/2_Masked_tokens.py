"""Masked tokens: masked fraction over steps stacked by reason (``steps`` rollup), the trusted
and effective-sample fractions, and the per-reason token counts of the token window."""

from __future__ import annotations

import pandas as pd

from dashboards import charts, queries, ui
from observability.enums import MASK_REASONS

# Rollup column of each mask reason (``stale`` counts samples, the others loss tokens). Comments,
# not attribute docstrings: Streamlit's "magic" would render a bare string on the page.
REASON_COLUMNS = {
    "icepop": "icepop_masked_fraction",
    "dis_low": "dis_low_fraction",
    "dis_high": "dis_high_fraction",
    "stale": "stale_fraction",
}


def by_reason(steps: pd.DataFrame) -> pd.DataFrame:
    """Long frame (run_id, step, reason, fraction); ``other`` = total − the named reasons."""
    wide = steps[["run_id", "step"]].copy()
    for reason, col in REASON_COLUMNS.items():
        wide[reason] = steps[col].fillna(0.0)
    named = wide[list(REASON_COLUMNS)].drop(columns="stale").sum(axis=1)
    wide["other"] = (steps["masked_fraction"].fillna(0.0) - named).clip(lower=0.0)
    return wide.melt(id_vars=["run_id", "step"], var_name="reason", value_name="fraction")


def body(runs) -> None:
    steps = ui.gather_steps(runs)
    if steps.empty:
        ui.no_data("steps")
        return
    ui.chart(
        charts.stacked_areas(
            by_reason(steps),
            x="step",
            part="reason",
            value="fraction",
            order=[*REASON_COLUMNS, "other"],
            y_title="fraction",
            title="Masked fraction by reason",
        ),
        "mk_reasons",
    )
    steps = steps.assign(trusted_fraction=steps["n_trusted_tokens"] / steps["n_loss_tokens"])
    ui.chart(
        charts.run_lines(
            steps,
            x="step",
            ys={
                "masked_fraction": "masked (all reasons)",
                "trusted_fraction": "trusted / loss tokens",
                "clip_fraction": "clipped",
            },
            title="Masked, trusted and clipped fractions",
            y_title="fraction",
        ),
        "mk_fractions",
    )
    ess = ui.gather_windowed(runs, queries.effective_sample_fraction)
    if len(ess):
        ui.chart(
            charts.run_lines(
                ess,
                x="step",
                ys={"ess_fraction": "ESS / n"},
                title="Effective-sample fraction of the importance weights (token window)",
                y_title="fraction",
            ),
            "mk_ess",
        )
    counts = ui.gather_windowed(runs, queries.mask_reasons)
    masked = counts[counts["reason"] != "kept"] if len(counts) else counts
    if masked.empty:
        ui.no_data("masked action tokens in the token window")
        return
    order = [r for r in MASK_REASONS if r != "kept"]
    ui.chart(
        charts.stacked_areas(
            masked,
            x="step",
            part="reason",
            value="n",
            order=order,
            y_title="tokens",
            title="Masked action tokens by reason (token window)",
        ),
        "mk_tokens",
    )


ui.live("Masked tokens", body)

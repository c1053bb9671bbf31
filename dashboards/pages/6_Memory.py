"""Memory: per-rank step time and peak bytes of multi-rank runs (``steps``), per-step peak bytes
stacked by the seven ledger categories and by owner (``memory_peaks``), and live ledger bytes over
time (``memory_events``)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import charts, memory_queries, ui
from observability.enums import MEMORY_CATEGORIES

GIB = float(1 << 30)


def live_grid(live: pd.DataFrame) -> pd.DataFrame:
    """Long (run_id, s, category, gib) on one grid per run and device, s = seconds since its first
    event; each category's last value is carried forward."""
    frames = []
    for (run, device), sub in live.groupby(["run_id", "device"], sort=False):
        wide = sub.pivot_table(index="bucket", columns="category", values="live", aggfunc="last")
        wide = wide.sort_index().ffill().fillna(0.0)
        t = sub.groupby("bucket")["ts"].max().reindex(wide.index)
        seconds = (t - t.min()).dt.total_seconds().to_numpy()  # runs start at different times
        long = wide.assign(s=seconds).melt(id_vars="s", var_name="category", value_name="b")
        frames.append(long.assign(run_id=f"{run} · {device}", gib=long["b"] / GIB))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def per_rank(runs) -> None:
    """Step time and peak memory of every rank, one line per (run, rank); multi-rank runs only."""
    frame = ui.gather(runs, memory_queries.rank_steps)
    if frame.empty or frame["rank"].nunique() < 2:
        return
    frame = frame.assign(
        run_id=frame["run_id"] + " · rank " + frame["rank"].astype(str),
        gib=frame["peak_memory_bytes"].astype(float) / GIB,
    )
    ui.chart(
        charts.run_lines(
            frame,
            x="step",
            ys={"step_time_s": "step time"},
            title="Step time per rank",
            y_title="s",
        ),
        "mem_rank_time",
    )
    ui.chart(
        charts.run_lines(
            frame, x="step", ys={"gib": "peak"}, title="Peak memory per rank", y_title="GiB"
        ),
        "mem_rank_peak",
    )


def body(runs) -> None:
    per_rank(runs)
    ranks = sorted(
        {r for run in runs for r in ui.handle(str(run.path)).query(memory_queries.memory_ranks)}
    )
    if not ranks:
        ui.no_data("memory ledger rows (memory_peaks, memory_events)")
        return
    rank = st.selectbox("rank", ranks, key="mem_rank") if len(ranks) > 1 else ranks[0]
    margin = st.toggle(
        "include the runtime margin (process memory the ledger does not track)",
        value=True,
        key="mem_margin",
    )
    for by, key in (("category", "mem_cat"), ("owner", "mem_owner")):
        peaks = ui.gather(runs, memory_queries.memory_peaks, rank=rank, by=by)
        if peaks.empty:
            ui.no_data("memory peaks")
            break
        if not margin:
            untracked = "runtime_margin" if by == "category" else "untracked"
            peaks = peaks[peaks["part"] != untracked]
        peaks = peaks.assign(gib=peaks["bytes"].astype(float) / GIB)
        order = MEMORY_CATEGORIES if by == "category" else ()
        ui.chart(
            charts.stacked_areas(
                peaks,
                x="step",
                part="part",
                value="gib",
                order=order,
                y_title="GiB",
                title=f"Peak memory by {by}",
            ),
            key,
        )
    live = ui.gather(runs, memory_queries.live_bytes, rank=rank)
    if live.empty:
        ui.no_data("memory events")
        return
    grid = live_grid(live)
    ui.chart(
        charts.stacked_areas(
            grid,
            x="s",
            x_title="seconds since the first ledger event",
            part="category",
            value="gib",
            order=MEMORY_CATEGORIES,
            y_title="GiB",
            title="Live ledger bytes over time",
        ),
        "mem_live",
    )


ui.live("Memory", body)

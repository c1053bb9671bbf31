"""Plotly figure builders: DataFrames from ``dashboards.queries`` in, ``go.Figure`` out.

Run comparison is built in: every builder takes frames carrying a ``run_id`` column; curves get
one colour per run (and one dash style per metric), distributions overlay runs, stacked and
heat-map views get one subplot row per run. Pure functions (no Streamlit), tested directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

PALETTE = qualitative.Plotly
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
HEIGHT = 330


def run_colors(runs: Sequence[str]) -> dict[str, str]:
    return {r: PALETTE[i % len(PALETTE)] for i, r in enumerate(runs)}


def _runs(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["run_id"])) if "run_id" in frame else [""]


def _layout(
    fig: go.Figure, title: str, *, x: str | None = None, y: str | None = None, height: int = HEIGHT
) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        template="plotly_white",
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        legend={"orientation": "h", "y": -0.3 if height <= HEIGHT else -0.12},
    )
    if x:
        fig.update_xaxes(title_text=x)
    if y:
        fig.update_yaxes(title_text=y)
    return fig


def run_lines(
    frame: pd.DataFrame,
    *,
    x: str,
    ys: Mapping[str, str],
    title: str,
    y_title: str | None = None,
    log_y: bool = False,
    mode: str = "lines+markers",
    x_title: str | None = None,
) -> go.Figure:
    """One line per (run, metric): colour = run, dash = metric. ``ys``: column -> label."""
    fig = go.Figure()
    runs = _runs(frame)
    colors = run_colors(runs)
    for run in runs:
        part = frame[frame["run_id"] == run] if run else frame
        for j, (col, label) in enumerate(ys.items()):
            if col not in part or part[col].isna().all():
                continue
            name = label if len(runs) == 1 else f"{label} · {run}"
            fig.add_trace(
                go.Scatter(
                    x=part[x],
                    y=part[col],
                    name=name,
                    mode=mode,
                    line={"color": colors[run], "dash": DASHES[j % len(DASHES)]},
                )
            )
    fig.update_layout(showlegend=True)
    if log_y:
        fig.update_yaxes(type="log", exponentformat="e")
    return _layout(fig, title, x=x_title or x, y=y_title)


def stacked_areas(
    frame: pd.DataFrame,
    *,
    x: str,
    part: str,
    value: str,
    title: str,
    y_title: str | None = None,
    order: Sequence[str] = (),
    x_title: str | None = None,
) -> go.Figure:
    """Stacked areas of ``value`` by ``part`` over ``x``; one subplot row per run."""
    runs = _runs(frame)
    parts = [p for p in order if p in set(frame[part])] + sorted(set(frame[part]) - set(order))
    colors = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(parts)}
    fig = make_subplots(
        rows=len(runs),
        cols=1,
        shared_xaxes=True,
        subplot_titles=runs,
        vertical_spacing=0.12 if len(runs) > 1 else 0.02,
    )
    for i, run in enumerate(runs, start=1):
        sub = frame[frame["run_id"] == run] if run else frame
        wide = sub.pivot_table(index=x, columns=part, values=value, aggfunc="sum").sort_index()
        for p in parts:
            if p not in wide:
                continue
            fig.add_trace(
                go.Scatter(
                    x=wide.index,
                    y=wide[p].fillna(0.0),
                    name=str(p),
                    stackgroup=f"s{i}",
                    mode="lines",
                    line={"width": 0.5, "color": colors[p]},
                    legendgroup=str(p),
                    showlegend=i == 1,
                ),
                row=i,
                col=1,
            )
    return _layout(fig, title, x=x_title or x, y=y_title, height=HEIGHT + 180 * (len(runs) - 1))


def bars(
    frame: pd.DataFrame,
    *,
    x: str,
    y: str,
    title: str,
    y_title: str | None = None,
    color: str = "run_id",
    barmode: str = "group",
    log_y: bool = False,
) -> go.Figure:
    """Bars of ``y`` over ``x``, one trace per value of ``color`` (runs by default)."""
    fig = go.Figure()
    groups = list(dict.fromkeys(frame[color])) if color in frame else [None]
    for i, g in enumerate(groups):
        sub = frame[frame[color] == g] if g is not None else frame
        fig.add_trace(
            go.Bar(x=sub[x], y=sub[y], name=str(g), marker_color=PALETTE[i % len(PALETTE)])
        )
    fig.update_layout(barmode=barmode, showlegend=True)
    if log_y:
        fig.update_yaxes(type="log")
    return _layout(fig, title, x=x, y=y_title)


def trust_band(info: pd.Series | None) -> tuple[float, float] | None:
    """A run's declared keep-band of the ratio: IcePop [1/β, β], DIS (1 − ε_low, 1 + ε_high)."""
    if info is None:
        return None
    beta = info.get("icepop_beta")
    if pd.notna(beta) and beta > 0:
        return (1.0 / float(beta), float(beta))
    lo, hi = info.get("dis_eps_low"), info.get("dis_eps_high")
    if pd.notna(lo) and pd.notna(hi):
        return (1.0 - float(lo), 1.0 + float(hi))
    return None


def ratio_distribution(
    hist: pd.DataFrame,
    bands: Mapping[str, tuple[float, float] | None],
    title: str = "Ratio exp(Δlogp) over action tokens",
) -> go.Figure:
    """Fraction of tokens per Δ = log-ratio bin (runs overlaid), ticks labelled as ratios, with
    each run's trust band shaded."""
    fig = go.Figure()
    runs = _runs(hist)
    colors = run_colors(runs)
    for run in runs:
        sub = hist[hist["run_id"] == run] if run else hist
        fig.add_trace(
            go.Bar(
                x=sub["delta"],
                y=sub["fraction"],
                width=sub["width"],
                name=run or "tokens",
                marker_color=colors[run],
                opacity=0.65 if len(runs) > 1 else 1.0,
                customdata=sub[["ratio", "n"]].to_numpy(),
                hovertemplate="ratio %{customdata[0]:.4g}: %{y:.3%} (%{customdata[1]} tokens)",
            )
        )
    for band in {b for b in bands.values() if b is not None}:
        lo, hi = (math.log(v) for v in band)
        fig.add_vrect(x0=lo, x1=hi, fillcolor="green", opacity=0.07, line_width=0)
        for v in (lo, hi):
            fig.add_vline(x=v, line={"color": "green", "dash": "dot", "width": 1})
        fig.add_annotation(
            x=hi,
            y=1,
            yref="paper",
            showarrow=False,
            xanchor="right",
            text=f"trust band [{band[0]:.3g}, {band[1]:.3g}]",
        )
    ticks = [0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0]
    fig.update_xaxes(tickvals=[math.log(t) for t in ticks], ticktext=[f"{t:g}" for t in ticks])
    fig.update_layout(barmode="overlay", bargap=0)
    return _layout(fig, title, x="ratio exp(train − rollout) (log scale)", y="fraction of tokens")


def heatmaps(
    frame: pd.DataFrame,
    *,
    x: str,
    y: str,
    z: str,
    title: str,
    zmin: float = 0.0,
    zmax: float = 1.0,
    colorscale: str = "RdYlGn",
) -> go.Figure:
    """A heat map of ``z`` over (``x``, ``y``); one subplot row per run."""
    runs = _runs(frame)
    fig = make_subplots(rows=len(runs), cols=1, subplot_titles=runs, shared_xaxes=True)
    for i, run in enumerate(runs, start=1):
        sub = frame[frame["run_id"] == run] if run else frame
        wide = sub.pivot_table(index=y, columns=x, values=z, aggfunc="mean").sort_index()
        fig.add_trace(
            go.Heatmap(
                z=wide.to_numpy(),
                x=list(wide.columns),
                y=[str(v) for v in wide.index],
                zmin=zmin,
                zmax=zmax,
                colorscale=colorscale,
                showscale=i == 1,
            ),
            row=i,
            col=1,
        )
    return _layout(fig, title, x=x, y=y, height=HEIGHT + 180 * (len(runs) - 1))


def sync_timeline(frame: pd.DataFrame, order: Sequence[str] = ()) -> go.Figure:
    """Weight-sync phases as horizontal bars, one row per sync, in ms since the sync's first
    phase began (so syncs and runs line up)."""
    fig = go.Figure()
    label = frame["sync_id"].map(lambda s: f"sync {s}")
    if len(_runs(frame)) > 1:
        label = frame["run_id"].str.slice(-10) + " · " + label
    t0 = frame.groupby(label)["start"].transform("min")
    frame = frame.assign(
        label=label,
        begin_ms=(frame["start"] - t0).dt.total_seconds() * 1000.0,
        ms=(frame["ts"] - frame["start"]).dt.total_seconds() * 1000.0,
    )
    phases = [p for p in order if p in set(frame["phase"])]
    phases += sorted(set(frame["phase"]) - set(phases))
    for i, phase in enumerate(phases):
        sub = frame[frame["phase"] == phase]
        fig.add_trace(
            go.Bar(
                y=sub["label"],
                x=sub["ms"],
                base=sub["begin_ms"],
                orientation="h",
                name=phase,
                marker_color=PALETTE[i % len(PALETTE)],
                hovertemplate="%{y} " + phase + ": %{x:.1f} ms<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(barmode="overlay")
    height = HEIGHT + 14 * max(0, frame["label"].nunique() - 8)
    return _layout(fig, "Weight-sync phases", x="ms since the sync began", height=height)


def hbars(
    frame: pd.DataFrame,
    *,
    y: str,
    x: str,
    title: str,
    color: str,
    x_title: str = "",
    log_x: bool = False,
) -> go.Figure:
    """Horizontal grouped bars (long category names on the y axis), one trace per ``color``."""
    fig = go.Figure()
    for i, g in enumerate(dict.fromkeys(frame[color])):
        sub = frame[frame[color] == g]
        fig.add_trace(
            go.Bar(
                y=sub[y],
                x=sub[x],
                name=str(g),
                orientation="h",
                marker_color=PALETTE[i % len(PALETTE)],
            )
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed", automargin=True)
    if log_x:
        fig.update_xaxes(type="log")
    height = HEIGHT + 18 * max(0, frame[y].nunique() - 8)
    return _layout(fig, title, x=x_title, height=height)


STRIPS = (
    ("delta_logp", "Δlogp (train − rollout)", "RdBu", 0.05),
    ("trust", "trust mask (1 kept, 0 masked)", "RdYlGn", 1.0),
    ("advantage", "advantage", "RdBu", 1.0),
    ("teacher_gap", "teacher gap (train − teacher)", "PuOr", 0.05),
)
"""(column, label, colour scale, smallest colour bound): values within ± the bound stay pale, so
fp32 noise (|Δ| ~ 1e-7) does not look like a mismatch."""


def token_strips(tokens: pd.DataFrame, texts: Sequence[str]) -> go.Figure:
    """Per-token strips of Δlogp, trust mask, advantage and teacher gap for one sample.

    ``tokens``: one sample's rows from ``queries.sample_tokens``; ``texts``: decoded tokens.
    Prompt and observation tokens carry no values (blank cells).
    """
    act = tokens["role"].eq("action").to_numpy()
    trust = tokens["trust_mask"].astype("float").where(act)
    values = {
        "delta_logp": tokens["delta_logp"],
        "trust": trust,
        "advantage": tokens["advantage"],
        "teacher_gap": tokens["teacher_gap"],
    }
    fig = make_subplots(
        rows=len(STRIPS),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[label for _, label, _, _ in STRIPS],
    )
    hover = [f"pos {p} · {t!r} · {r}" for p, t, r in zip(tokens["pos"], texts, tokens["role"])]
    for i, (key, _, scale, floor) in enumerate(STRIPS, start=1):
        z = pd.to_numeric(values[key], errors="coerce").to_numpy(dtype=float)
        peak = float(pd.Series(abs(z)).max()) if key != "trust" else 1.0
        bound = max(peak, floor) if math.isfinite(peak) else floor
        zmin = 0.0 if key == "trust" else -bound
        fig.add_trace(
            go.Heatmap(
                z=[z],
                x=tokens["pos"],
                y=[""],
                text=[hover],
                hovertemplate="%{text}: %{z}<extra></extra>",
                colorscale=scale,
                zmin=zmin,
                zmax=bound,
                showscale=False,
            ),
            row=i,
            col=1,
        )
    fig.update_xaxes(title_text="position", row=len(STRIPS), col=1)
    return _layout(fig, "Per-token strips", height=120 * len(STRIPS) + 60)


def worker_timeline(frame: pd.DataFrame) -> go.Figure:
    """Per worker (rows), each turn's generation span and the environment span that followed,
    as horizontal bars in seconds."""
    fig = go.Figure()
    label = "worker " + frame["worker"].astype(str)
    if len(_runs(frame)) > 1:
        label = frame["run_id"].str.slice(-10) + " · " + label
    spans = (
        ("generation", frame["gen_start"], frame["gen_end"] - frame["gen_start"]),
        ("environment", frame["gen_end"], (frame["env_end"] - frame["gen_end"]).fillna(0.0)),
    )
    for i, (name, base, width) in enumerate(spans):
        fig.add_trace(
            go.Bar(
                y=label,
                x=width,
                base=base,
                orientation="h",
                name=name,
                marker_color=PALETTE[i % len(PALETTE)],
                opacity=0.6,
                customdata=frame[["sample_id", "turn"]],
                hovertemplate="sample %{customdata[0]} turn %{customdata[1]}: %{x:.3f} s"
                f"<extra>{name}</extra>",
            )
        )
    fig.update_layout(barmode="overlay")
    return _layout(fig, "Trajectory timeline per worker", x="seconds", y=None)

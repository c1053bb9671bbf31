"""Streamlit glue shared by the pages: sidebar, run selection, live fragments, per-run queries.

Every page (the entry file ``Overview.py`` and ``pages/N_name.py``) calls ``live(title, body)``:
it draws the shared sidebar (runs, refresh interval, token window; values survive page switches
through shadow keys in ``st.session_state``) and runs ``body(runs)`` inside
``st.fragment(run_every=...)`` so only the panels rerun while a run trains. Queries go through
one cached ``RunHandle`` per run directory (``st.cache_resource``) and are concatenated over the
selected runs (each row keeps its ``run_id``), which is what makes every chart a comparison.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pandas as pd
import streamlit as st

from dashboards import paths, queries
from dashboards.store import QueryError, RunHandle

REFRESH_CHOICES = {"auto": None, "off": 0.0, "2 s": 2.0, "5 s": 5.0, "15 s": 15.0}
"""Sidebar refresh options -> seconds (``auto``: 5 s while a selected run is running)."""
AUTO_REFRESH_S = 5.0
QUIET_AFTER_S = 120.0
"""A ``running`` run without new telemetry for this long is shown as quiet."""


@st.cache_resource(show_spinner=False, max_entries=64)
def handle(path: str) -> RunHandle:
    """The live connection of the run directory ``path`` (shared by every session)."""
    return RunHandle(path)


def requested_runs() -> list[str]:
    """Run names asked for in the URL (``?run=``) or on the command line, validated against the
    runs root (refusals are shown as errors); the newest run when none is asked for."""
    root = paths.runs_root()
    available = paths.list_runs(root)
    chosen = []
    for name in st.query_params.get_all("run") or paths.preselected():
        try:
            chosen.append(paths.resolve_run(root, name).name)
        except paths.PathRefused as e:
            st.error(f"refused: {e}")
    return [n for n in chosen if n in available] or available[:1]


def _persist(key: str) -> None:
    st.session_state["_" + key] = st.session_state[key]


def _persistent(key: str, default) -> dict:
    """Restore widget ``key`` from its shadow copy (widgets forget values across pages)."""
    st.session_state[key] = st.session_state.get("_" + key, default)
    return {"key": key, "on_change": _persist, "args": (key,)}


def sidebar() -> None:
    """The shared sidebar: runs under the root, refresh interval, token window."""
    root = paths.runs_root()
    st.sidebar.markdown(f"**Runs root** `{root}`")
    available = paths.list_runs(root)
    if not available:
        st.sidebar.warning("No telemetry runs here yet; start one with `closedloop train`.")
    if "_cl_runs" not in st.session_state:
        st.session_state["_cl_runs"] = requested_runs()
    st.session_state["_cl_runs"] = [n for n in st.session_state["_cl_runs"] if n in available]
    st.sidebar.multiselect(
        "Runs (two or more overlay their curves)", available, **_persistent("cl_runs", [])
    )
    st.sidebar.selectbox("Refresh", list(REFRESH_CHOICES), **_persistent("cl_refresh", "auto"))
    st.sidebar.slider(
        "Token window (latest steps)",
        1,
        200,
        help="per-token panels read only these steps (and on big runs every s-th sample of them)",
        **_persistent("cl_window", 10),
    )


def selected_runs() -> list[paths.RunRef]:
    """The runs picked in the sidebar (validated against the runs root)."""
    root = paths.runs_root()
    return [paths.resolve_run(root, n) for n in st.session_state.get("cl_runs", [])]


def window_steps() -> int:
    return int(st.session_state.get("cl_window", 10))


def gather(runs: list[paths.RunRef], fn: Callable[..., pd.DataFrame], **params) -> pd.DataFrame:
    """``fn`` over every run, concatenated, with a ``run_id`` column; failures become warnings."""
    frames = []
    for run in runs:
        try:
            frame = handle(str(run.path)).query(fn, **params)
        except QueryError as e:
            st.warning(f"{run.name}: {e} (will retry on the next refresh)")
            continue
        frames.append(frame.assign(run_id=run.name))
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def gather_steps(runs: list[paths.RunRef]) -> pd.DataFrame:
    """The incremental ``steps`` rollups of every run, concatenated."""
    frames = []
    for run in runs:
        try:
            frame = handle(str(run.path)).steps()
        except QueryError as e:
            st.warning(f"{run.name}: {e}")
            continue
        if len(frame):
            frames.append(frame.assign(run_id=run.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def windows(runs: list[paths.RunRef]) -> dict[str, tuple[int, int]]:
    """Per run, the (lo, hi) steps of the token window (runs without steps are left out)."""
    out = {}
    for run in runs:
        w = handle(str(run.path)).query(queries.step_window, n_steps=window_steps())
        if w is not None:
            out[run.name] = w
    return out


def gather_windowed(runs: list[paths.RunRef], fn: Callable[..., pd.DataFrame], **params):
    """``fn(lo=, hi=)`` over each run's own token window, concatenated."""
    spans = windows(runs)
    frames = [
        gather([r], fn, lo=spans[r.name][0], hi=spans[r.name][1], **params)
        for r in runs
        if r.name in spans
    ]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run_status(run: paths.RunRef) -> tuple[str, pd.Series | None]:
    """(status shown to the user, the ``runs`` row or None)."""
    info = handle(str(run.path)).query(queries.run_info)
    if info.empty:
        return "unknown", None
    row = info.iloc[0]
    status = str(row["status"])
    if status == "running":
        age = time.time() - pd.Timestamp(row["updated_at"]).timestamp()
        written = written_age_s(run)
        if (written is None or written > QUIET_AFTER_S) and age > QUIET_AFTER_S:
            status = "running (quiet)"
    return status, row


def written_age_s(run: paths.RunRef) -> float | None:
    """Seconds since the run's telemetry last changed (a part committed into a table folder, the
    manifest rewritten), or None without telemetry. While a run trains this is how far the
    charts lag it: the writer writes at the first step end ``telemetry.flush_seconds`` after its
    previous write (or after that long on its own timer)."""
    try:
        newest = max((p.stat().st_mtime for p in (run.path / "telemetry").iterdir()), default=None)
    except OSError:
        return None
    return None if newest is None else max(0.0, time.time() - newest)


def refresh_seconds(runs: list[paths.RunRef]) -> float | None:
    choice = REFRESH_CHOICES.get(st.session_state.get("cl_refresh", "auto"))
    if choice is None:
        running = any(run_status(r)[0].startswith("running") for r in runs)
        return AUTO_REFRESH_S if running else None
    return choice or None


_COLORS = {"running": "green", "finished": "gray", "failed": "red"}


def status_line(runs: list[paths.RunRef]) -> None:
    """One line per run: name, status (coloured), latest step and, while it runs, how long ago
    its telemetry was last written."""
    parts = []
    for run in runs:
        status, _ = run_status(run)
        last = handle(str(run.path)).query(queries.last_step)
        step = "no steps yet" if last is None else f"step {last}"
        if status == "running" and (written := written_age_s(run)) is not None:
            step += f" · written {written:.0f} s ago"
        color = _COLORS.get(status.split()[0], "orange")
        parts.append(f"**{run.name}** :{color}[{status}] · {step}")
    st.caption("  \n".join(parts))


def live(title: str, body: Callable[[list[paths.RunRef]], None]) -> None:
    """Page frame: sidebar, title, then ``body(runs)`` in a fragment refreshed while runs live."""
    st.set_page_config(page_title=f"closedloop · {title}", page_icon="🔁", layout="wide")
    sidebar()
    st.title(title)
    runs = selected_runs()
    if not runs:
        st.info(f"No run selected. Pick runs in the sidebar (runs root: {paths.runs_root()}).")
        return

    def panel() -> None:
        status_line(runs)
        body(runs)

    st.fragment(panel, run_every=refresh_seconds(runs))()


def chart(fig, key: str) -> None:
    st.plotly_chart(fig, key=key, width="stretch")


def no_data(what: str) -> None:
    st.info(f"No {what} in this run (the table is empty).")

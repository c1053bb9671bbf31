"""Helpers of the dashboard tests: ``AppTest`` runs, chart extraction, appending rows."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from dashboards import PAGES as DASHBOARD_PAGES
from dashboards import paths
from observability import DuckDBTelemetry, TelemetryConfig

ENTRY = Path(paths.__file__).resolve().parent / "Overview.py"
PAGES = dict(DASHBOARD_PAGES)


def run_page(monkeypatch, root: Path, runs: list[str], page: str) -> AppTest:
    """Run the entry file, then switch to ``page`` (AppTest reruns fragments on ``run``)."""
    monkeypatch.setenv(paths.ROOT_ENV, str(root))
    monkeypatch.setenv(paths.RUNS_ENV, os.pathsep.join(runs))
    at = AppTest.from_file(str(ENTRY), default_timeout=60).run()
    if PAGES[page] is not None:
        at.switch_page(PAGES[page]).run()
    return at


def _length(values) -> int:
    """Points in a Plotly 7 array: a list, or base64 ``{"dtype", "bdata"}`` (typed array)."""
    if values is None:
        return 0
    if isinstance(values, dict) and "bdata" in values:
        return len(np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]))
    return len(values)


def figures(at: AppTest) -> dict[str, dict]:
    """Every Plotly chart on the page by title: {"traces": n, "points": total points, "names"}."""
    out = {}
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        title = spec["layout"].get("title", {}).get("text", "")
        data = spec["data"]
        points = sum(max(_length(t.get("y")), _length(t.get("z"))) for t in data)
        out[title] = {"traces": len(data), "points": points, "names": [t.get("name") for t in data]}
    return out


def notes(at: AppTest) -> list[str]:
    return [el.value for el in at.info]


def append_steps(run_dir: Path, steps: list[int]) -> None:
    """New ``steps`` rows from a second writer (rank 1: no ``runs`` row, the status is kept)."""
    cfg = TelemetryConfig(compact_on_close=False)
    sink = DuckDBTelemetry(run_dir, rank=1, world_size=2, config=cfg)
    sink.emit(
        "steps",
        {
            "step": steps,
            "policy_version": [s + 1 for s in steps],
            "mismatch_abs_mean": [0.5] * len(steps),
        },
    )
    sink.close()

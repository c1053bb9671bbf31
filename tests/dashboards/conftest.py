"""Fixtures of the dashboard tests: a runs root holding copies of the real tiny runs.

``dash_root`` / ``tiny`` (as the core wrote it: Top-k, MoE, qparams and contract tables empty) /
``agentic`` (a tiny async multi-turn run: turns, worker switches, environment failures) /
``bf16`` (the bf16 run plus Top-k, route, qparams and contract rows added by a second writer).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dashboards import synthetic
from tests.conftest import TINY


def _tiny_shape() -> tuple[int, int]:
    """(steps, samples per step) of the conftest tiny runs."""
    values = dict(item.split("=", 1) for item in TINY)
    per_step = int(values["algorithm.prompts_per_step"]) * int(values["algorithm.group_size"])
    return int(values["train.steps"]), per_step


@pytest.fixture(scope="session")
def dash_root(tmp_path_factory, tiny_run: Path, tiny_run_bf16: Path, agentic_run: Path) -> Path:
    root = tmp_path_factory.mktemp("dash_runs")
    shutil.copytree(tiny_run, root / tiny_run.name)
    shutil.copytree(agentic_run, root / agentic_run.name)
    shutil.copytree(tiny_run_bf16, root / tiny_run_bf16.name)
    steps, per_step = _tiny_shape()
    synthetic.add_extras(root / tiny_run_bf16.name, steps=steps, samples_per_step=per_step)
    return root


@pytest.fixture(scope="session")
def tiny(dash_root: Path, tiny_run: Path) -> Path:
    return dash_root / tiny_run.name


@pytest.fixture(scope="session")
def agentic(dash_root: Path, agentic_run: Path) -> Path:
    return dash_root / agentic_run.name


@pytest.fixture(scope="session")
def bf16(dash_root: Path, tiny_run_bf16: Path) -> Path:
    return dash_root / tiny_run_bf16.name

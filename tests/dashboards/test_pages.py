"""AppTest of every dashboard page over runs of the real training core, with and without the
optional tables, and the two-run comparison."""

from __future__ import annotations

import shutil

import pytest

from observability import DuckDBTelemetry, TelemetryConfig
from tests.dashboards.apptest import PAGES, append_steps, figures, notes, run_page

# Charts each page must draw (with data) over the bf16 run + Top-k/route/qparams/contract rows.
EXPECTED = {
    "Overview": ["Reward per step", "Entropy and gradient norm"],
    "Mismatch": [
        "Train vs rollout log-prob mismatch per step",
        "Ratio exp(Δlogp) over action tokens",
        "Mismatch by position bucket (token window)",
    ],
    "Masked tokens": [
        "Masked fraction by reason",
        "Masked, trusted and clipped fractions",
        "Effective-sample fraction of the importance weights (token window)",
    ],
    "Versions": [
        "Staleness histogram",
        "Staleness over steps",
        "Weight-sync phases",
        "Mean sync phase duration",
    ],
    "Sparse attention": [
        "Top-k exact agreement per layer (layer −1: logits)",
        "Index overlap and boundary ties",
        "MoE expert-set agreement per layer",
    ],
    "Quantization": [
        "Per-tensor quantization error (latest policy version, worst 20)",
        "QAT vs offline equality (fraction of tensors bit-identical)",
        "Quantization error over policy versions",
    ],
    "Memory": ["Peak memory by category", "Peak memory by owner", "Live ledger bytes over time"],
    "Contracts": ["Latest check outcomes"],
    "Token view": ["Per-token strips"],
}
# Charts the async multi-turn run adds (the Agents page has data only there).
AGENTIC_EXPECTED = {
    "Agents": [
        "Trajectory timeline per worker",
        "Turns per sample",
        "Environment failures and refills per step",
        "Failed and dropped samples by reason",
        "Rollout queue depth and sessions in flight",
        "Worker busy fraction",
    ],
    "Versions": ["Staleness histogram", "Weight switches per worker", "Weight-sync phases"],
}

# Notes each page shows over the tiny run as the core wrote it (those tables are empty).
EMPTY_NOTES = {
    "Sparse attention": ["Top-k rows", "MoE routes"],
    "Quantization": ["quantization parameters"],
    "Contracts": ["contract results"],
    "Agents": ["turns"],
    "Teachers": ["teacher routes"],
    "Rewards": ["judge verdicts"],
}
TEACHER_PAGES = ("Teachers", "Rewards")
"""Drawn over a run with teachers and mixed rewards (tests/dashboards/test_teacher_pages.py)."""


@pytest.mark.parametrize("page", list(AGENTIC_EXPECTED))
def test_agentic_pages(page, monkeypatch, dash_root, agentic):
    at = run_page(monkeypatch, dash_root, [agentic.name], page)
    assert not at.exception, [e.value for e in at.exception]
    figs = figures(at)
    for title in AGENTIC_EXPECTED[page]:
        assert title in figs, f"{page}: missing chart {title!r}; has {list(figs)}"
        assert figs[title]["traces"] > 0 and figs[title]["points"] > 0, (title, figs[title])
    if page == "Agents":
        assert any(t.startswith("Environment latency (p50") for t in figs), list(figs)


OWN_RUN_PAGES = ("Agents", "Long horizon", *TEACHER_PAGES)
"""Pages whose data only runs of another algorithm have (tested with those runs)."""


@pytest.mark.parametrize("page", [p for p in PAGES if p not in OWN_RUN_PAGES])
def test_page_with_data(page, monkeypatch, dash_root, bf16):
    at = run_page(monkeypatch, dash_root, [bf16.name], page)
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == page
    figs = figures(at)
    for title in EXPECTED[page]:
        assert title in figs, f"{page}: missing chart {title!r}; has {list(figs)}"
        assert figs[title]["traces"] > 0 and figs[title]["points"] > 0, (title, figs[title])
    assert bf16.name in at.caption[0].value and "finished" in at.caption[0].value


@pytest.mark.parametrize("page", list(EMPTY_NOTES))
def test_page_with_empty_tables(page, monkeypatch, dash_root, tiny):
    at = run_page(monkeypatch, dash_root, [tiny.name], page)
    assert not at.exception, [e.value for e in at.exception]
    shown = " | ".join(notes(at))
    for what in EMPTY_NOTES[page]:
        assert f"No {what}" in shown and "in this run" in shown, shown


def test_overview_lists_runs_and_alarms(monkeypatch, dash_root, tiny, bf16):
    at = run_page(monkeypatch, dash_root, [tiny.name, bf16.name], "Overview")
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["run"]) == [tiny.name, bf16.name]
    assert set(table["status"]) == {"finished"}
    assert (table["step"] == 2).all()  # 3 steps: 0, 1, 2
    assert table.set_index("run").loc[bf16.name, "contracts"].startswith("fail (1 failing of 4)")
    assert table.set_index("run").loc[tiny.name, "contracts"] == "not checked"
    assert at.metric[0].value == "2"


@pytest.mark.parametrize("page", ["Mismatch", "Masked tokens", "Memory"])
def test_two_runs_overlay(page, monkeypatch, dash_root, tiny, bf16):
    at = run_page(monkeypatch, dash_root, [tiny.name, bf16.name], page)
    assert not at.exception, [e.value for e in at.exception]
    figs = figures(at)
    first = figs[EXPECTED[page][0]]
    names = " ".join(str(n) for n in first["names"])
    if page == "Mismatch":  # one curve per (run, metric), each named after its run
        assert first["traces"] == 4 and tiny.name in names and bf16.name in names
    else:  # stacked views: one subplot row per run, same parts in each
        assert first["traces"] % 2 == 0 and first["traces"] >= 2


def test_refused_run_in_url(monkeypatch, dash_root, tiny):
    at = run_page(monkeypatch, dash_root, ["../../etc", tiny.name], "Overview")
    assert any("refused" in e.value and "outside the runs root" in e.value for e in at.error)
    assert list(at.dataframe[0].value["run"]) == [tiny.name]


def test_live_rerun_picks_up_new_steps(monkeypatch, tmp_path, tiny):
    """A rerun (what ``run_every`` triggers) shows steps written since the last one."""
    root = tmp_path / "runs"
    shutil.copytree(tiny, root / tiny.name)
    at = run_page(monkeypatch, root, [tiny.name], "Mismatch")
    title = EXPECTED["Mismatch"][0]
    before = figures(at)[title]["points"]
    append_steps(root / tiny.name, [3, 4])
    at.run()
    assert not at.exception
    # both curves (mean, p99) gain steps 3 and 4 (the p99 as gaps: those rows carry none)
    assert figures(at)[title]["points"] == before + 4
    assert "step 4" in at.caption[0].value


def test_running_run_shows_how_long_ago_it_was_written(monkeypatch, tmp_path):
    """While a run trains, its status line says how old the newest telemetry is (the live lag)."""
    root = tmp_path / "runs"
    sink = DuckDBTelemetry(root / "live", config=TelemetryConfig(compact_on_close=False))
    try:
        sink.emit("steps", {"step": [0, 1], "policy_version": [1, 2], "loss": [0.5, 0.4]})
        sink.flush()
        at = run_page(monkeypatch, root, ["live"], "Overview")
        assert not at.exception
        caption = at.caption[0].value
        assert "[running]" in caption and "step 1" in caption
        assert "· written " in caption and " s ago" in caption
    finally:
        sink.close()
    at.run()
    assert "finished" in at.caption[0].value and "written" not in at.caption[0].value

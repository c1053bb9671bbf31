"""AppTest of the Long horizon page over a real CompactionRL run (critic and compaction charts)
and over a GRPO run (no critic, no compactions: the page says so)."""

from __future__ import annotations

import shutil

import pytest

from tests.dashboards.apptest import figures, notes, run_page

EXPECTED = [
    "Value calibration (explained variance of returns)",
    "Value loss",
    "Compaction events per step",
    "Context length before and after compaction (mean)",
    "Segments per trajectory",
    "Summary length",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory, compaction_run, tiny_run):
    root = tmp_path_factory.mktemp("lh_runs")
    shutil.copytree(compaction_run, root / compaction_run.name)
    shutil.copytree(tiny_run, root / tiny_run.name)
    return root


def test_page_with_a_compaction_run(monkeypatch, root, compaction_run):
    at = run_page(monkeypatch, root, [compaction_run.name], "Long horizon")
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Long horizon"
    figs = figures(at)
    for title in EXPECTED:
        assert title in figs, f"missing chart {title!r}; has {list(figs)}"
        assert figs[title]["traces"] > 0 and figs[title]["points"] > 0, (title, figs[title])


def test_page_without_critic_or_compactions(monkeypatch, root, tiny_run):
    at = run_page(monkeypatch, root, [tiny_run.name], "Long horizon")
    assert not at.exception, [e.value for e in at.exception]
    shown = " | ".join(notes(at))
    assert "No critic values" in shown and "No compaction events" in shown, shown
    assert not figures(at)


def test_two_runs_overlay(monkeypatch, root, compaction_run, tiny_run):
    at = run_page(monkeypatch, root, [compaction_run.name, tiny_run.name], "Long horizon")
    assert not at.exception, [e.value for e in at.exception]
    assert "Value loss" in figures(at)

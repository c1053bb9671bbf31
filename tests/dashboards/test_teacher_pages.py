"""AppTest of the Teachers and Rewards pages over the real teacher run (two routed teachers,
Top-k payload, mixed rewards with a judge), alone and next to a plain GRPO run."""

from __future__ import annotations

import shutil

import pytest

from tests.dashboards.apptest import figures, notes, run_page

pytestmark = pytest.mark.slow

EXPECTED = {
    "Teachers": [
        "Teacher–student reverse KL per domain (sampled estimate)",
        "OPD advantage per domain: mean and spread",
        "OPD advantage distribution (token window)",
        "Teacher payload bytes per step",
    ],
    "Rewards": [
        "Reward components over time (mean value)",
        "Weighted contributions to the total reward",
        "Judge–verifier agreement",
        "Component failures per step",
    ],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory, teacher_run, tiny_run):
    root = tmp_path_factory.mktemp("dash_teacher")
    shutil.copytree(teacher_run, root / teacher_run.name)
    shutil.copytree(tiny_run, root / tiny_run.name)
    return root


@pytest.mark.parametrize("page", list(EXPECTED))
def test_page_draws_every_chart(page, monkeypatch, root, teacher_run):
    at = run_page(monkeypatch, root, [teacher_run.name], page)
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == page
    figs = figures(at)
    for title in EXPECTED[page]:
        assert title in figs, f"{page}: missing chart {title!r}; has {list(figs)}"
        assert figs[title]["traces"] > 0 and figs[title]["points"] > 0, (title, figs[title])


def test_teachers_page_route_table_and_domains(monkeypatch, root, teacher_run):
    at = run_page(monkeypatch, root, [teacher_run.name], "Teachers")
    table = at.dataframe[0].value
    assert list(table["domain"]) == ["addition", "subtraction"]
    assert table["teacher_id"].nunique() == 2 and set(table["payload"]) == {"topk"}
    assert (table["samples"] > 0).all() and (table["payload_bytes"] == table["tokens"] * 36).all()
    # provenance: both teachers forked from the SFT base (a copy, a perturbed fork) over both
    # domains, declared same-source by default
    assert list(table["trained_on"]) == ["addition, subtraction"] * 2
    assert list(table["source"]) == list(table["declared_source"]) == ["same", "same"]
    assert table["provenance_ok"].all() and table["config_sha"].str.len().eq(8).all()
    kl = figures(at)[EXPECTED["Teachers"][0]]
    assert set(kl["names"]) == {"addition", "subtraction"}  # one curve per domain


def test_rewards_page_lists_every_component_and_weight(monkeypatch, root, teacher_run):
    at = run_page(monkeypatch, root, [teacher_run.name], "Rewards")
    weights = at.dataframe[0].value.set_index("component")["weight"].to_dict()
    assert weights == {"format": 0.1, "judge": 0.3, "length": -0.05, "orm": 0.2, "verifier": 1.0}
    assert set(figures(at)[EXPECTED["Rewards"][0]]["names"]) == set(weights)


def test_plain_grpo_run_next_to_the_teacher_run(monkeypatch, root, teacher_run, tiny_run):
    at = run_page(monkeypatch, root, [tiny_run.name, teacher_run.name], "Rewards")
    assert not at.exception, [e.value for e in at.exception]
    names = " ".join(str(n) for n in figures(at)[EXPECTED["Rewards"][0]]["names"])
    assert tiny_run.name in names and teacher_run.name in names
    at = run_page(monkeypatch, root, [tiny_run.name], "Teachers")
    assert any("No teacher routes" in n for n in notes(at))


def test_overview_names_the_advantage_each_run_used(monkeypatch, root, teacher_run, tiny_run):
    at = run_page(monkeypatch, root, [tiny_run.name, teacher_run.name], "Overview")
    algorithm = at.dataframe[0].value.set_index("run")["algorithm"]
    # GRPO + the OPD term over two routed teachers, next to plain GRPO
    assert algorithm[teacher_run.name] == "grpo+mopd" and algorithm[tiny_run.name] == "grpo"

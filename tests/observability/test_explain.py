"""``closedloop explain`` on real runs: the stall scenario against its control, every short
scenario, the importers' runs, and an unreadable run.

Scenario runs are the shared short runs (``tests/notebooks/scenario_runs.py``); the stall's control
(``rewards.weights`` = the verifier alone, the default reward) is the shared ``healthy`` run.
"""

from __future__ import annotations

import json

import pytest

from closedloop.cli import main
from core.scenario import list_scenarios, load_scenario
from observability import open_run
from observability.explain import VERDICTS, explain
from observability.importers import import_dump
from tests.notebooks.scenario_runs import SHORT_STEPS, scenario_run
from tests.observability.importers.episodes import VOCAB, make_steps

SHORT_SCENARIOS = [n for n in list_scenarios() if not load_scenario(n).needs]


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    """The ``saturated-reward`` scenario's control restores the default reward weights (the
    verifier alone): the shared ``healthy`` run is that control (same config, same run)."""
    assert load_scenario("saturated-reward").control == ("rewards.weights={}",)
    return scenario_run("healthy", tmp_path_factory)


def _json(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_stall_scenario_names_its_cause_and_its_control_stays_quiet(
    control, tmp_path_factory, capsys
):
    stalled = scenario_run("saturated-reward", tmp_path_factory)
    out = _json(capsys, ["explain", str(stalled), "--json"])
    # the policy never moves: held-out greedy accuracy identical at both evaluations
    assert out["verdict"] == "stall" and out["onset"]["step"] is None
    assert out["stall"]["progress"]["metric"] == "heldout_accuracy"
    assert out["stall"]["progress"]["gain"] == 0.0
    top = out["suspects"][0]
    assert top["suspect"] == "zero_variance_groups" and len(out["suspects"]) == 1
    assert top["first_step"] == 0 and top["level_mean"] == 1.0  # every group, every step
    assert top["reference"] == 0.7 and top["reference_kind"] == "healthy floor"
    assert top["score"] == pytest.approx(2.0)  # excess (1 − 0.7)/0.1 = 3 from step 0: log2(4)
    rows = open_run(stalled).sql(top["query"]).df()  # the drill-down runs as printed
    assert len(rows) == 4 * SHORT_STEPS and (rows["min_reward"] == rows["max_reward"]).all()
    # the control: nothing moved, against a floor or against the stalled run as its baseline
    quiet = _json(capsys, ["explain", str(control), "--json"])
    assert quiet["suspects"] == [] and not any(r["moved"] for r in quiet["table"])
    vs = _json(capsys, ["explain", str(stalled), "--baseline", str(control), "--json"])
    assert vs["baseline_run_id"] == control.name and vs["suspects"][0]["suspect"] == top["suspect"]
    # the text report says the same
    assert main(["explain", str(stalled)]) == 0
    text = capsys.readouterr().out
    assert "verdict: stall" in text and "1. zero_variance_groups" in text and "SQL: SELECT" in text


@pytest.mark.parametrize("name", SHORT_SCENARIOS)
def test_explain_every_short_scenario(name, tmp_path_factory, capsys):
    run = scenario_run(name, tmp_path_factory)
    out = _json(capsys, ["explain", str(run), "--json"])
    assert out["verdict"] in VERDICTS
    expected = load_scenario(name).expect_suspect
    if expected:
        assert out["suspects"][0]["suspect"] == expected
    else:
        assert out["suspects"] == []
    for e in out["suspects"]:  # every drill-down query is valid SQL over the run's views
        open_run(run).sql(e["query"]).fetchall()


@pytest.mark.parametrize("framework", ["slime", "nemo-rl", "prime-rl"])
def test_explain_imported_runs(framework, tmp_path, capsys):
    from tests.observability.importers import nemo_writer, prime_writer, slime_writer

    steps = make_steps(n_steps=4)
    writers = {
        "slime": lambda p: slime_writer.write_dump(p, steps),
        "nemo-rl": lambda p: nemo_writer.write_log(p, steps),
        "prime-rl": lambda p: prime_writer.write_export(p, steps),
    }
    src = writers[framework](tmp_path / "src")
    run = import_dump(framework, src, tmp_path / "runs", run_id="imp", vocab_size=VOCAB).run_dir
    out = _json(capsys, ["explain", str(run), "--json"])
    assert out["run_id"] == "imp" and out["verdict"] in VERDICTS
    assert explain(run).text().startswith("run imp")


def test_unreadable_run_exits_2(tmp_path, capsys):
    assert main(["explain", str(tmp_path)]) == 2
    assert "closedloop explain:" in capsys.readouterr().err

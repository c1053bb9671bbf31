"""The analysis on real scenario runs: the injected cause is the top suspect, from telemetry alone.

Each scenario is trained short through the real core (``tests/notebooks/scenario_runs.py``); the
blind test copies every telemetry table except ``runs`` into a fresh in-memory database with the
run id replaced and the sampling JSON blanked, so neither config, run name nor run directory is
reachable, and checks the suspects table comes out identical.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from core.config import ConfigError, load_config
from core.scenario import list_scenarios, load_scenario, scenario_config
from observability import analysis as A
from observability import open_run
from observability.schema import TABLES
from tests.notebooks.scenario_runs import scenario_run

FAULTS = [n for n in list_scenarios() if load_scenario(n).expect_suspect]
SHORT_FAULTS = [n for n in FAULTS if not load_scenario(n).needs]
"""Faults that show in a few steps without trained artifacts (the teacher and judge scenarios
have their own tests: tests/core/test_teacher_scenarios.py)."""


def test_scenario_files_layer_on_the_default_config(tmp_path):
    assert list_scenarios()[0] == "healthy" and len(FAULTS) >= 5
    assert scenario_config("healthy") == load_config(None)
    lag = scenario_config("policy-lag", ["rollout.sync_every=2"], steps=3)
    assert lag.rollout.sync_every == 2 and lag.train.steps == 3
    assert lag.algorithm.staleness_limit == 1000  # from the scenario file
    assert lag.algorithm.group_size == load_config(None).algorithm.group_size  # from the default
    for name in FAULTS:  # every control run is a valid config too
        scenario_config(name, load_scenario(name).control)
    with pytest.raises(ConfigError, match="unknown scenario 'nope'.*healthy"):
        load_scenario("nope")
    (tmp_path / "bad.toml").write_text('[scenario]\nexpected = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown \[scenario\] keys \['expected'\]"):
        load_scenario("bad", tmp_path)
    (tmp_path / "typo.toml").write_text("[rollout]\ntemprature = 2.0\n")
    with pytest.raises(ConfigError, match="rollout.temprature"):
        scenario_config("typo", directory=tmp_path)


def test_cli_lists_scenarios_and_rejects_unknown(capsys):
    from core.cli import main

    assert main(["scenario", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in list_scenarios())
    assert main(["scenario", "nope"]) == 2


@pytest.mark.parametrize("name", SHORT_FAULTS)
def test_top_suspect_is_the_injected_cause(name, tmp_path_factory):
    con = open_run(scenario_run(name, tmp_path_factory))
    table = A.suspects(con)
    assert table.loc[0, "suspect"] == load_scenario(name).expect_suspect, table.to_string()
    assert table.loc[0, "moved"] and table.loc[0, "score"] > 1.0
    # the runner-up is clearly behind: the diagnosis is not a coin flip
    assert table.loc[0, "score"] > 1.2 * table.loc[1, "score"]


def test_healthy_run_has_no_suspect_and_no_onset(tmp_path_factory):
    con = open_run(scenario_run("healthy", tmp_path_factory))
    assert A.top_suspect(con) is None
    assert not A.collapse_onset(con)
    levels = A.suspect_levels(con)
    assert len(levels) == 6 and levels["train_rollout_mismatch"].max() < 1e-5


def _blind_copy(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Every table but ``runs``, run id replaced, sampling JSON blanked, in a new database."""
    out = duckdb.connect()
    for name in TABLES:
        if name == "runs":
            continue
        blank = ", NULL::VARCHAR AS sampling" if name == "samples" else ""
        data = con.sql(f"SELECT * REPLACE ('anon' AS run_id{blank}) FROM {name}").to_arrow_table()
        out.register("_data", data)
        out.execute(f"CREATE TABLE {name} AS SELECT * FROM _data")
        out.unregister("_data")
    return out


@pytest.mark.parametrize("name", SHORT_FAULTS)
def test_analysis_never_reads_config_or_run_name(name, tmp_path_factory):
    con = open_run(scenario_run(name, tmp_path_factory))
    blind = _blind_copy(con)
    with pytest.raises(duckdb.CatalogException):  # the config is not even there to read
        blind.execute("SELECT config FROM runs")
    original, anonymous = A.suspects(con), A.suspects(blind)
    assert anonymous.loc[0, "suspect"] == load_scenario(name).expect_suspect
    np.testing.assert_allclose(anonymous["score"], original["score"], rtol=1e-12)
    assert list(anonymous["suspect"]) == list(original["suspect"])
    assert A.collapse_onset(blind) == A.collapse_onset(con)


def test_drilldown_surfaces_retokenized_tokens(tmp_path_factory):
    con = open_run(scenario_run("retokenize-bug", tmp_path_factory))
    d = A.token_drilldown(con, limit=10)
    assert len(d) == 10
    assert (np.diff(d["abs_delta"].to_numpy()) <= 0).all()  # largest |Δlogp| first
    ((largest,),) = con.execute(
        "SELECT max(abs(train_logp - rollout_logp)) FROM tokens WHERE role = 'action'"
    ).fetchall()
    assert d.loc[0, "abs_delta"] == pytest.approx(largest)
    assert d.loc[0, "retokenized"] and d.loc[0, "train_token_id"] != d.loc[0, "token_id"]
    assert (d["response_pos"] >= 0).all()
    # a window around a step keeps only those steps
    w = A.token_drilldown(con, step=2, window=1, limit=1000)
    assert set(w["step"]) <= {1, 2, 3} and len(w) > 0


def test_baseline_comparison(tmp_path_factory):
    base = open_run(scenario_run("healthy", tmp_path_factory))
    bug = open_run(scenario_run("logprob-mode-bug", tmp_path_factory))
    diff = A.compare_runs(bug, base).set_index("metric")
    assert diff.loc["mismatch_abs_mean", "delta_final"] > 0.01
    assert diff.loc["staleness_max", "delta_final"] == 0
    same = A.compare_runs(base, base)
    assert (same["delta_final"].abs() < 1e-12).all()
    aligned = A.aligned_steps(bug, base, "mismatch_abs_mean")
    assert list(aligned.columns) == ["step", "run", "baseline"] and len(aligned) == 6
    # against itself as the baseline nothing moved; against healthy the mismatch still did
    assert A.suspects(bug, baseline=bug)["moved"].sum() == 0
    assert A.suspects(bug, baseline=base).loc[0, "suspect"] == "train_rollout_mismatch"


@pytest.mark.parametrize(
    ("name", "signal"),
    [
        ("kv-kept-across-switch", "kv_version_mismatch"),
        ("retokenized-history", "history_retokenized"),
    ],
)
def test_agentic_controls_remove_the_cause(name, signal, tmp_path_factory):
    from core.scenario import run_scenario
    from tests.notebooks.scenario_runs import SHORT

    control = list(load_scenario(name).control)
    root = tmp_path_factory.mktemp("controls")
    run, _ = run_scenario(name, runs_root=root, steps=4, overrides=[*SHORT, *control])
    fault = A.suspect_levels(open_run(scenario_run(name, tmp_path_factory)))
    levels = A.suspect_levels(open_run(run))
    assert fault[signal].max() > 0 and levels[signal].fillna(0.0).max() == 0.0


def test_stale_async_trains_stale_samples_uncorrected_and_its_control_does_not(tmp_path_factory):
    """``stale-async-no-dis`` short: samples far older than any τ are trained, each with IS weight
    1 (π_old = the trainer's own log-probs although the rollout policy differs); the control (its
    one setting: weights synced every step) trains the same uncorrected update on samples at most
    a few versions old."""
    from core.scenario import run_scenario
    from tests.notebooks.scenario_runs import SHORT, SHORT_STEPS

    name = "stale-async-no-dis"
    control = list(load_scenario(name).control)
    assert control == ["rollout.sync_every=1"]
    root = tmp_path_factory.mktemp("controls")
    run, _ = run_scenario(name, runs_root=root, steps=SHORT_STEPS, overrides=[*SHORT, *control])
    stale = "SELECT max(staleness) FROM samples WHERE status = 'trained'"
    # |π_old − train| and |π_old − rollout| over the action tokens of trained samples
    gaps = """SELECT max(abs(t.old_logp - t.train_logp)), max(abs(t.old_logp - t.rollout_logp))
              FROM tokens t JOIN samples s USING (run_id, sample_id)
              WHERE s.status = 'trained' AND t.role = 'action'"""
    fault_con, control_con = open_run(scenario_run(name, tmp_path_factory)), open_run(run)
    assert fault_con.execute(stale).fetchone()[0] == SHORT_STEPS - 1  # rollout kept version 0
    assert control_con.execute(stale).fetchone()[0] <= 4
    to_train, to_rollout = fault_con.execute(gaps).fetchone()
    assert to_train == 0.0 and to_rollout > 0.01  # ρ ≡ 1 although the rollout policy differs
    to_train, _ = control_con.execute(gaps).fetchone()
    assert to_train == 0.0  # the control's update is the same uncorrected one
    assert A.suspect_levels(fault_con)["staleness"].mean() > 0.1  # its tolerance

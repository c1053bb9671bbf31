"""The teacher_provenance contract: on hand-written route rows (each problem named with its
route), and on a real short MOPD run whose subtraction route goes to a teacher trained on
addition only — the gate fails and names that route."""

from __future__ import annotations

import pytest

from contracts import run_gate
from contracts.checks.teacher_provenance import routes_match_provenance
from contracts.context import CheckContext
from contracts.policy import Policy
from observability import DuckDBTelemetry, TelemetryConfig, open_run
from tests.teacher_artifacts import teacher_checkpoint

CHECK = "teacher_provenance.routes_match_provenance"
GOOD = {
    "teacher_domains": [["addition"]],
    "teacher_source_sha256": "sft",
    "student_source_sha256": "sft",
    "teacher_config_sha256": "cfg",
    "declared_source": "same",
}


def _check(tmp_path, **edits):
    """The check over one step routing addition to teacher 't' (``GOOD`` with ``edits``)."""
    tel = DuckDBTelemetry(tmp_path / "r", config=TelemetryConfig(compact_on_close=False))
    tel.emit("steps", {"step": 0, "policy_version": 0})
    row = {"step": 0, "domain": "addition", "teacher_id": "t", "payload": "sampled"}
    tel.emit("teacher_routes", row | GOOD | edits)
    tel.close()
    ctx = CheckContext(open_run(tmp_path / "r"), run_dir=tmp_path / "r", policy=Policy())
    return routes_match_provenance(ctx)


@pytest.mark.parametrize(
    "edits, problem",
    [
        ({}, None),
        ({"teacher_domains": [["subtraction"]]}, "trained on subtraction, not addition"),
        ({"teacher_source_sha256": "other"}, "declared same-source, the teacher is off-source"),
        ({"teacher_source_sha256": "other", "declared_source": "off"}, None),  # on purpose
        ({"declared_source": "off"}, "declared off-source, the teacher is same-source"),
        ({"teacher_domains": None}, "records no trained domains"),
        ({"student_source_sha256": None}, "records no source"),
    ],
)
def test_each_problem_is_named_with_its_route(tmp_path, edits, problem):
    result = _check(tmp_path, **edits)
    if problem is None:
        assert result.status == "pass", result.message
    else:
        assert result.status == "fail" and result.n_violations == 1
        assert problem in result.message and "addition -> t" in result.message


@pytest.mark.slow
def test_wrong_route_fails_the_gate_naming_it(tmp_path):
    from core.config import load_config
    from core.driver import run_training

    task = {"min_digits": 2, "max_digits": 2, "ops": ["+"]}  # an addition-only teacher
    same = teacher_checkpoint(tmp_path / "sft")  # the SFT base itself: both domains
    addition = teacher_checkpoint(
        tmp_path / "addition", base_model="core/assets/base_model", task=task
    )
    routes = f'{{addition = "{same}", subtraction = "{addition}"}}'
    cfg = load_config(
        "configs/mopd_tiny.toml",
        [f"teachers.routes={routes}", "train.steps=1", "algorithm.prompts_per_step=8",
         "train.eval_size=8", "train.eval_every=0"],
    )  # fmt: skip
    run, _ = run_training(
        cfg, runs_root=tmp_path / "runs", telemetry="duckdb", name="mopd", progress=False
    )
    gate = run_gate(run, record=False)
    result = gate.result(CHECK)
    assert gate.exit_code == 1 and result.status == "fail" and result.n_violations == 1
    assert "subtraction -> addition" in result.message
    assert "trained on addition, not subtraction" in result.message
    assert [r.id for r in gate.failed()] == [CHECK]  # nothing else is wrong with the run
    (ex,) = result.examples
    assert ex["domain"] == "subtraction" and ex["observed_source"] == "same"

"""The teacher and reward contracts on a copy of the real teacher run: it passes, and each injected
violation fails exactly its check with the injected row as the example."""

import polars as pl
import pytest

from contracts import run_gate
from tests.contracts.store_edit import copy_run, edit_rows, query
from tests.contracts.test_injections import gate_failing_only

pytestmark = pytest.mark.slow


@pytest.fixture
def run(teacher_run, tmp_path):
    return copy_run(teacher_run, tmp_path)


def _scored_token(run, index=0):
    rows = query(
        run,
        "SELECT sample_id, pos FROM tokens WHERE teacher_logp IS NOT NULL ORDER BY sample_id, pos",
    )
    return rows[index]["sample_id"], rows[index]["pos"]


def test_teacher_prefix_that_differs_fails_same_ids(run):
    s, p = _scored_token(run, 2)
    at = (pl.col("sample_id") == s) & (pl.col("pos") == p)
    assert edit_rows(run, "tokens", at, {"teacher_prefix_hash": 12345}) == 1
    gate = gate_failing_only(run, {"teacher_quant.teacher_same_ids"})
    (ex,) = gate.result("teacher_quant.teacher_same_ids").examples
    assert (ex["sample_id"], ex["pos"], ex["teacher_prefix_hash"]) == (s, p, 12345)


def test_student_on_other_ids_fails_same_ids(run):
    s, p = _scored_token(run, 0)
    at = (pl.col("sample_id") == s) & (pl.col("pos") == p - 1)  # an earlier slot of the prefix
    edit_rows(run, "tokens", at, {"train_token_id": 7})
    gate = gate_failing_only(run, {"teacher_quant.teacher_same_ids", "action.tito_exact_ids"})
    (ex,) = gate.result("teacher_quant.teacher_same_ids").examples
    assert (ex["sample_id"], ex["pos"], ex["student_prefix_same"]) == (s, p, False)


def test_unrouted_sample_of_a_routed_domain_fails_routes_traceable(run):
    (row,) = query(run, "SELECT sample_id, step, domain FROM samples ORDER BY sample_id LIMIT 1")
    edit_rows(run, "samples", pl.col("sample_id") == row["sample_id"], {"teacher_id": None})
    gate = gate_failing_only(
        run, {"teacher_quant.teacher_routes_traceable", "teacher_quant.teacher_logps_present"}
    )
    examples = gate.result("teacher_quant.teacher_routes_traceable").examples
    bad = [e for e in examples if e["teacher_id"] is None]
    assert (bad[0]["step"], bad[0]["domain"], bad[0]["n_samples"]) == (
        row["step"],
        row["domain"],
        1,
    )


def test_a_second_teacher_for_one_domain_fails_routes_traceable(run):
    (row,) = query(
        run, "SELECT sample_id FROM samples WHERE domain = 'addition' ORDER BY 1 LIMIT 1"
    )
    edit_rows(run, "samples", pl.col("sample_id") == row["sample_id"], {"teacher_id": "rogue@0"})
    gate = gate_failing_only(run, {"teacher_quant.teacher_routes_traceable"})
    assert all(
        e["n_teachers"] == 2 for e in gate.result("teacher_quant.teacher_routes_traceable").examples
    )


def test_total_reward_that_does_not_recompute_fails(run):
    (row,) = query(run, "SELECT sample_id, reward FROM samples ORDER BY sample_id LIMIT 1 OFFSET 3")
    edit_rows(
        run, "samples", pl.col("sample_id") == row["sample_id"], {"reward": row["reward"] + 0.01}
    )
    gate = gate_failing_only(run, {"reward.total_recomputes"})
    (ex,) = gate.result("reward.total_recomputes").examples
    assert ex["sample_id"] == row["sample_id"]
    assert ex["reward"] - ex["recomputed"] == pytest.approx(0.01, abs=1e-6)


def test_component_without_value_or_reason_fails(run):
    (row,) = query(
        run,
        "SELECT sample_id FROM reward_components WHERE component = 'orm' ORDER BY 1 LIMIT 1",
    )
    at = (pl.col("sample_id") == row["sample_id"]) & (pl.col("component") == "orm")
    edit_rows(run, "reward_components", at, {"value": None})
    gate = run_gate(run)
    failed = {r.id for r in gate.results if r.failed}
    # the total no longer recomputes either (the ORM's weighted value is gone from the sum)
    assert "reward.failed_components_have_reasons" in failed
    (ex,) = gate.result("reward.failed_components_have_reasons").examples
    assert (ex["sample_id"], ex["component"], ex["failure_reason"]) == (
        row["sample_id"],
        "orm",
        None,
    )

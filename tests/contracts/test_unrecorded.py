"""``runs.unrecorded``: a declared table or column turns the checks that need it
``not_applicable`` (never pass); without the declaration the same nulls still fail the gate
(fail closed); ``schema.unrecorded_null`` fails a declaration that names something unknown or
holding values; check registration validates ``needs``."""

from __future__ import annotations

import pytest

from contracts import run_gate
from contracts.spec import CheckSpec, register
from observability import DuckDBTelemetry, Trajectory, emit_step, step_columns, unrecorded_in
from observability.unrecorded import covers, unrecorded_names


def _trajs() -> list[Trajectory]:
    return [
        Trajectory(
            sample_id=i,
            token_ids=[1, 2, 3, 4],
            n_prompt=2,
            rollout_logp=[0.0, 0.0, -0.5, -1.0],
            train_logp=[0.0, 0.0, -0.501, -1.0],
            reward=float(i),
        )
        for i in range(2)
    ]


def _run(path, unrecorded: list[str]):
    sink = DuckDBTelemetry(path, run_info={"vocab_size": 10, "unrecorded": unrecorded})
    emit_step(sink, 0, _trajs(), policy_version=1)
    sink.close()
    return run_gate(path, record=False)


def test_declared_columns_make_their_checks_not_applicable(tmp_path):
    declared = unrecorded_in(step_columns(0, _trajs(), policy_version=1))
    gate = _run(tmp_path / "declared", declared)
    assert gate.passed, [(r.id, r.message) for r in gate.failed()]
    masked = gate.result("action.masked_fraction")
    assert masked.status == "not_applicable"
    assert "steps.masked_fraction" in masked.message
    assert gate.result("action.mismatch_abs_mean").status == "pass"
    assert gate.result("schema.unrecorded_null").status == "pass"


def test_the_same_nulls_undeclared_fail_closed(tmp_path):
    gate = _run(tmp_path / "silent", [])
    failed = {r.id for r in gate.failed()}
    # null masked fraction, no trust mask rule, no tokenizer revisions, no policy versions
    assert {"action.masked_fraction", "action.trust_mask_recomputed"} <= failed
    assert {"action.run_metadata_consistent", "sparse_version.staleness_within_limit"} <= failed
    assert gate.result("schema.unrecorded_null").status == "not_applicable"


def test_a_declaration_holding_values_fails_the_gate(tmp_path):
    gate = _run(tmp_path / "lying", ["tokens.rollout_logp", "steps.masked_fraction"])
    result = gate.result("schema.unrecorded_null")
    assert result.status == "fail" and result.n_violations == 1
    assert result.examples[0]["name"] == "tokens.rollout_logp"
    assert gate.result("action.logp_finite").status == "not_applicable"  # as declared, but:
    assert not gate.passed


def test_names_are_validated():
    assert unrecorded_names(["topk", "tokens.entropy", "topk"]) == ["tokens.entropy", "topk"]
    for bad, match in [
        (["tokenz"], "unknown table 'tokenz'"),
        (["tokens.entropyy"], "has no column 'entropyy'"),
        (["tokens.token_id"], "is required"),
        (["runs"], "written by the sink"),
    ]:
        with pytest.raises(ValueError, match=match):
            unrecorded_names(bad)
    with pytest.raises(ValueError, match="a list of names"):
        unrecorded_names("tokens.entropy")
    with pytest.raises(ValueError, match="unknown table"):
        DuckDBTelemetry("/nonexistent/never", run_info={"unrecorded": ["nope"]})
    assert covers(["topk"], "topk.indices") and not covers(["topk.k"], "topk")
    with pytest.raises(ValueError, match="has no column"):
        register(CheckSpec("action", "bad_needs", "x", lambda ctx: None, needs=("steps.nope",)))

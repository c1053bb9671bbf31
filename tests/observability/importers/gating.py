"""Shared by the importer tests: import a fixture dump, gate it, and look at the results."""

from __future__ import annotations

from pathlib import Path

from contracts import run_gate
from contracts.gate_result import GateResult
from observability.importers import import_dump
from tests.observability.importers.episodes import VOCAB

# Checks an imported dump can never feed (no syncs, memory ledger, quantizer, Top-k, teacher):
# the gate must call them not_applicable, never pass them.
NEVER_APPLICABLE = {
    "sparse_version.topk_index_sets_equal",
    "sparse_version.trainer_forward_repeatable",
    "sparse_version.staleness_within_limit",
    "sparse_version.sync_complete",
    "teacher_quant.teacher_logps_present",
    "teacher_quant.quant_bit_identical",
    "memory.create_has_free",
    "memory.no_double_free",
    "memory.attribution_complete",
    "memory.peak_breakdown_sums",
    "action.run_metadata_consistent",
    "action.trust_mask_recomputed",
}


def import_and_gate(framework: str, src: Path, runs: Path, run_id: str) -> GateResult:
    result = import_dump(framework, src, runs, run_id=run_id, vocab_size=VOCAB)
    assert result.run_dir == runs / run_id and result.run_dir.is_dir()
    return run_gate(result.run_dir, record=False)


def statuses(gate: GateResult) -> dict[str, str]:
    return {r.id: r.status for r in gate.results}


def assert_clean(gate: GateResult, *, applicable: set[str], not_applicable: set[str]) -> None:
    """The gate passed, ran ``applicable`` (pass) and declared the rest not applicable."""
    got = statuses(gate)
    assert gate.passed, [(r.id, r.status, r.message) for r in gate.failed()]
    assert {c for c in applicable if got[c] != "pass"} == set()
    assert {c for c in NEVER_APPLICABLE | not_applicable if got[c] != "not_applicable"} == set()
    assert got["schema.unrecorded_null"] == "pass"
    assert all(got[c] == "pass" for c in got if c.startswith("schema."))

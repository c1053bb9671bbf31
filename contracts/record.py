"""Append a gate's results to the run's ``contract_results`` table as one new atomic part.

Uses the store's own record builder (``observability.records.build_table``: typing and the
column rules) and part writer (tmp file, fsync, rename). Simplification: not ``DuckDBTelemetry`` itself,
whose start and close write ``runs`` status rows that would overwrite the gated run's status.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from contracts.gate_result import GateResult
from observability.parts import PartWriter
from observability.records import build_table
from observability.schema import table_spec


def result_columns(gate: GateResult) -> dict:
    """``contract_results`` columns (run_id is filled in by ``build_table``)."""
    rs = gate.results
    examples = [
        json.dumps(
            {"message": r.message, "check_version": r.version, "rows": r.examples},
            sort_keys=True,
            allow_nan=False,
        )
        for r in rs
    ]
    return {
        "checked_at": gate.checked_at.timestamp(),
        "contract": [r.contract for r in rs],
        "check": [r.check for r in rs],
        "status": [r.status for r in rs],
        "observed": pa.array([_float(r.observed) for r in rs], type=pa.float64()),
        "threshold": pa.array([_float(r.threshold) for r in rs], type=pa.float64()),
        "n_rows": pa.array([r.n_rows for r in rs], type=pa.int64()),
        "n_violations": pa.array([r.n_violations for r in rs], type=pa.int64()),
        "example": examples,
    }


def _float(value: object) -> float | None:
    return None if value is None else float(value)


def append_results(gate: GateResult) -> Path | None:
    """Write ``gate.results`` as a new part of ``contract_results``; returns its path."""
    if not gate.results:
        return None
    table = build_table("contract_results", result_columns(gate), run_id=gate.run_id, rank=0)
    return PartWriter(gate.run_dir, rank=0).write(table, table_spec("contract_results"))[0]

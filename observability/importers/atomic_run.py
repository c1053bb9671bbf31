"""Writing an imported dump as a closedloop run: the whole run directory, or nothing.

The run is written through the public sink (``DuckDBTelemetry``: ``emit``, ``step_end``,
``flush`` after every step so that a batch the sink rejects is reported with its step,
``close``) into ``RUNS/.import-<run_id>-<random>/<run_id>`` and renamed to ``RUNS/<run_id>``
once closed and compacted; any error (bad input, a rejected batch, an interrupt) removes the
temporary directory, so ``RUNS`` never holds a half-imported run (the dashboard lists only
directories with a ``telemetry/`` folder directly under ``RUNS``). What the run does not record
is declared from the first step (``emit_step.unrecorded_in``, plus the ``runs`` columns the
dump cannot tell, such as ``vocab_size`` or the trust rule); a later step holding values in a
declared column has them dropped, and each such column is reported once in
``ImportResult.warnings``. Simplification: ``runs.run_dir`` holds the temporary path the sink
wrote from.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observability.emit_step import step_columns, unrecorded_in
from observability.importers.dump import DumpError, DumpStep
from observability.writer import RUN_INFO_KEYS, DuckDBTelemetry


@dataclass
class ImportResult:
    """What an import wrote."""

    run_dir: Path
    steps: int = 0
    samples: int = 0
    tokens: int = 0
    unrecorded: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _runs_unknown(run_info: Mapping[str, Any]) -> list[str]:
    """The ``runs`` columns a caller could declare (``RUN_INFO_KEYS``) that ``run_info`` lacks."""
    return [
        f"runs.{k}"
        for k in RUN_INFO_KEYS
        if k not in ("config", "unrecorded") and run_info.get(k) is None
    ]


def _drop_unrecorded(
    columns: dict[str, dict[str, Any]], unrecorded: set[str], step: DumpStep, result: ImportResult
) -> None:
    """Null the columns declared unrecorded that this step fills (reported once per column)."""
    for name in sorted(unrecorded - set(unrecorded_in(columns))):
        table, _, column = name.partition(".")
        if column and column in columns.get(table, {}):
            columns[table][column] = None
            note = f"{name}: values from step {step.step} on dropped (absent in the first step)"
            if not any(w.startswith(f"{name}:") for w in result.warnings):
                result.warnings.append(note)


def write_run(
    steps: Iterable[DumpStep],
    *,
    runs_root: str | Path,
    run_id: str,
    run_info: Mapping[str, Any],
) -> ImportResult:
    """Write ``steps`` as run ``RUNS/<run_id>`` (all or nothing); returns what was written.

    Raises DumpError for bad input (the run directory is then absent) and FileExistsError when
    ``RUNS/<run_id>`` exists.
    """
    root = Path(runs_root)
    final = root / run_id
    if final.exists():
        raise FileExistsError(f"run directory {final} already exists")
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".import-{run_id}-{uuid.uuid4().hex[:8]}"
    result = ImportResult(run_dir=final)
    sink = None
    try:
        unrecorded: set[str] = set()
        for step in steps:
            try:
                columns = step_columns(
                    step.step, step.trajectories, policy_version=step.policy_version, **step.values
                )
            except ValueError as e:
                raise DumpError(f"{step.source}: step {step.step}: {e}") from e
            if sink is None:  # the first step declares what the run does not record
                result.unrecorded = _runs_unknown(run_info) + unrecorded_in(columns)
                unrecorded = set(result.unrecorded)
                info = {**run_info, "unrecorded": result.unrecorded}
                sink = DuckDBTelemetry(staging / run_id, run_id=run_id, run_info=info)
            else:
                _drop_unrecorded(columns, unrecorded, step, result)
            try:  # flushed per step: a batch the sink rejects is reported with its step
                for table, cols in columns.items():
                    sink.emit(table, cols)
                sink.step_end(step.step)
                sink.flush()
            except ValueError as e:  # RejectedBatch included
                raise DumpError(f"{step.source}: step {step.step}: {e}") from e
            result.steps += 1
            result.samples += len(step.trajectories)
            result.tokens += sum(tr.n_tokens for tr in step.trajectories)
        if sink is None:
            raise DumpError("the dump holds no training step")
        sink.close("finished")
        if final.exists():
            raise FileExistsError(f"run directory {final} appeared during the import")
        (staging / run_id).rename(final)
        staging.rmdir()
    except BaseException:
        if sink is not None:
            try:
                sink.close("failed")
            except Exception:  # the staging directory goes anyway
                pass
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result

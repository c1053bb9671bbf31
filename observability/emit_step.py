"""``emit_step``: one call records a training step of any trainer — samples, tokens, the step row.

The documented emit API for third-party loops (``docs/emit_api.md``) and the write path of the
importers: ``step_columns`` builds the three tables' columns from ``Trajectory`` objects (plus
the step values the caller knows: loss, lr, ...), ``emit_step`` hands them to a sink
(``DuckDBTelemetry`` or anything with ``emit``/``step_end``). ``unrecorded_in`` names what a
producer writing such columns leaves null, for ``run_info["unrecorded"]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from observability.rollup import step_rollup
from observability.schema import TABLES
from observability.trajectory import Trajectory, sample_columns, token_columns
from observability.unrecorded import SINK_TABLES

SINK_FILLED = {"run_id", "rank", "tokens_sampled"}
"""Columns the sink fills in itself (never unrecorded)."""


def step_columns(
    step: int, trajectories: Sequence[Trajectory], *, policy_version: int, **step_values: Any
) -> dict[str, dict[str, Any]]:
    """``{"samples": ..., "tokens": ..., "steps": ...}`` columns of one step.

    The ``steps`` row holds the rollups of ``observability.rollup`` and ``step_values`` (any
    ``steps`` column: ``loss``, ``lr``, ``grad_norm``, ``step_time_s``, ...; they take
    precedence over a rollup of the same name). ``policy_version``: the weights version after
    the step.
    """
    ids = [tr.sample_id for tr in trajectories]
    if len(set(ids)) != len(ids):
        raise ValueError(f"step {step}: sample_ids repeat within the step")
    row = {**step_rollup(trajectories), **step_values}
    row.update(step=step, policy_version=policy_version)
    return {
        "samples": sample_columns(step, trajectories),
        "tokens": token_columns(step, trajectories),
        "steps": row,
    }


def emit_step(
    sink: Any,
    step: int,
    trajectories: Sequence[Trajectory],
    *,
    policy_version: int,
    **step_values: Any,
) -> None:
    """Emit ``step_columns(...)`` to ``sink`` and mark the step's end (``sink.step_end``)."""
    columns = step_columns(step, trajectories, policy_version=policy_version, **step_values)
    for table, cols in columns.items():
        if table != "tokens" or len(cols["pos"]):
            sink.emit(table, cols)
    sink.step_end(step)


def _all_null(values: Any) -> bool:
    if values is None:
        return True
    if isinstance(values, np.ma.MaskedArray):
        return bool(np.ma.getmaskarray(values).all())
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values.null_count == len(values)
    if isinstance(values, list):
        return all(v is None for v in values)
    return False


def unrecorded_in(
    tables: Mapping[str, Mapping[str, Any]], *, writes: Iterable[str] = ()
) -> list[str]:
    """Names a producer that writes only ``tables`` (table -> columns, as emitted) leaves null:
    every other table the producer could write, and every nullable column absent or null in
    its columns; ``writes`` names tables it fills elsewhere (e.g. ``"evals"``). Meant for
    ``run_info["unrecorded"]`` of a run whose columns do not change from step to step
    (``observability.unrecorded``)."""
    out = []
    for name, spec in TABLES.items():
        if name in SINK_TABLES or name in writes:
            continue
        cols = tables.get(name)
        if cols is None:
            out.append(name)
            continue
        out.extend(
            f"{name}.{c.name}"
            for c in spec.columns
            if c.nullable and c.name not in SINK_FILLED and _all_null(cols.get(c.name))
        )
    return out

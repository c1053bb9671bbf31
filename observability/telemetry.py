"""The one interface through which the training core emits telemetry records.

The loop hands over *columnar* batches — a mapping column name -> equal-length array-like
(numpy arrays, CPU torch tensors, Python lists; list-valued columns as lists of lists) —
for one table of the schema in ``observability.schema``. ``run_id`` is filled in by the sink.
The sink must not force device syncs: the loop moves tensors to the CPU once, at points where it
synchronizes anyway (end of rollout, end of step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Telemetry(Protocol):
    """A sink for telemetry records (``none`` or ``duckdb``)."""

    run_id: str
    run_dir: str | None

    def emit(self, table: str, columns: Mapping[str, Any]) -> None:
        """Queue one columnar batch of rows for ``table`` (validated by the sink)."""

    def step_end(self, step: int) -> None:
        """Mark the end of an optimizer step (a flush point)."""

    def close(self, status: str = "finished") -> None:
        """Flush everything and mark the run ``finished`` or ``failed``."""


class NullTelemetry:
    """``--telemetry none``: accepts every record and keeps nothing."""

    def __init__(self, run_id: str = "none", run_dir: str | None = None) -> None:
        self.run_id = run_id
        self.run_dir = run_dir

    def emit(self, table: str, columns: Mapping[str, Any]) -> None:
        return None

    def step_end(self, step: int) -> None:
        return None

    def close(self, status: str = "finished") -> None:
        return None

"""``TelemetryConfig``: the four knobs of the DuckDB/Parquet telemetry sink.

Simplification: one config for every table and rank; the writer's queue bound and the live
merge's fan-in are constants of ``observability.writer`` and ``observability.parts``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TelemetryConfig:
    """Sampling and flushing of the telemetry sink."""

    token_sample_rate: float = 1.0
    """Fraction of samples whose per-token rows (tokens, topk, moe_routes) are kept, in [0, 1];
    chosen deterministically by ``sample_id`` hash. ``steps``/``samples`` stay exact."""
    flush_seconds: float = 2.0
    """How far a live reader may lag (> 0): pending rows are written at the first step end at
    least this long after the previous write, and by the writer's timer once the oldest pending
    row is this old (a stalled loop)."""
    flush_rows: int = 1_000_000
    """Pending rows that are written at once, without waiting for a step end (>= 1); also the
    size up to which the live merge joins a table's small parts."""
    compact_on_close: bool = True
    """Rank 0 folds the parts into ``RUN_DIR/telemetry.duckdb`` on a ``finished`` close."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.token_sample_rate <= 1.0:
            raise ValueError(
                f"telemetry.token_sample_rate must be in [0, 1], got {self.token_sample_rate}"
            )
        if not self.flush_seconds > 0:
            raise ValueError(f"telemetry.flush_seconds must be > 0, got {self.flush_seconds!r}")
        if not (isinstance(self.flush_rows, int) and self.flush_rows >= 1):
            raise ValueError(f"telemetry.flush_rows must be an int >= 1, got {self.flush_rows!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TelemetryConfig:
        """Build from a mapping; unknown keys raise ValueError listing the valid ones."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(f"unknown telemetry config keys {unknown}; valid: {sorted(fields)}")
        return cls(**values)

"""Telemetry store: schema, the DuckDB/Parquet writer, readers, compaction and verification.

For a third-party training loop (``docs/emit_api.md``): ``DuckDBTelemetry`` is the sink,
``Trajectory`` describes one sample, ``emit_step`` records a step's samples, tokens and rollups.
"""

from observability.config import TelemetryConfig
from observability.emit_step import emit_step, step_columns, unrecorded_in
from observability.reader import open_run, open_runs, refresh
from observability.sampling import keep_tokens_for
from observability.trajectory import Trajectory
from observability.writer import DuckDBTelemetry, RejectedBatch

__all__ = [
    "DuckDBTelemetry",
    "RejectedBatch",
    "TelemetryConfig",
    "Trajectory",
    "emit_step",
    "keep_tokens_for",
    "open_run",
    "open_runs",
    "refresh",
    "step_columns",
    "unrecorded_in",
]

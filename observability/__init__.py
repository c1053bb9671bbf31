"""Telemetry store: schema, the DuckDB/Parquet writer, readers, compaction and verification."""

from observability.config import TelemetryConfig
from observability.reader import open_run, open_runs, refresh
from observability.sampling import keep_tokens_for
from observability.writer import DuckDBTelemetry

__all__ = [
    "DuckDBTelemetry",
    "TelemetryConfig",
    "keep_tokens_for",
    "open_run",
    "open_runs",
    "refresh",
]

"""``TelemetryConfig``: the knobs of the DuckDB/Parquet telemetry sink.

Simplification: one config for every table and rank; flush thresholds apply per table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WRITER_PRIORITIES = ("idle", "normal")


@dataclass(frozen=True)
class TelemetryConfig:
    """Sampling, flushing and queueing of the telemetry writer."""

    token_sample_rate: float = 1.0
    """Fraction of samples whose per-token rows (tokens, topk, moe_routes) are kept, in [0, 1];
    chosen deterministically by ``sample_id`` hash. ``steps``/``samples`` stay exact."""
    flush_rows: int = 1_000_000
    """A table's pending rows are written as a part once they reach this many (>= 1)."""
    flush_seconds: float = 2.0
    """Pending rows are written once the oldest is this old (> 0): checked by every ``emit`` and
    by the writer's own timer every ``flush_seconds / 4``, so a stalled loop's rows are at most
    this interval (as stretched by ``writer_cpu_budget``) plus a quarter of it late."""
    step_flush_min_seconds: float = 2.0
    """``step_end`` flushes only if the previous step-end flush is at least this old (>= 0; 0:
    flush at every step end). Short steps then share parts instead of writing tiny ones."""
    writer_cpu_budget: float = 0.01
    """Share of wall time the background writer may spend on CPU, in [0, 1] (0: no pacing). While
    flushes cost the writer more, both time thresholds above are stretched (up to
    ``max_flush_seconds``) so that each flush carries more rows for the same per-flush cost
    (``pacing.FlushPacer``). On the 2-core CPU machine a flush costs ~40-100 ms of CPU whatever
    its size (its code and data are cold again after a second of training; a back-to-back flush
    costs ~20 ms): unpaced, the writer took 2.6-4.3% of each step; paced, flushes come every
    ~7-10 s and it takes 1.2-1.4% (``benchmarks/README.md``). A run whose steps are longer than
    the stretched interval flushes at each step end as before."""
    max_flush_seconds: float = 10.0
    """The longest the pacer may stretch ``flush_seconds`` to (> 0; at or below ``flush_seconds``
    there is no stretching): the bound on a live reader's lag behind a running loop."""
    queue_max_batches: int = 256
    """Batches waiting in the hand-off buffer for the background writer (>= 1); when full,
    ``emit`` wakes the writer and blocks until it has drained them (backpressure, no drops)."""
    defer_rows: int = 65_536
    """Batches of at most this many rows (>= 0) leave ``emit`` unconverted: ``emit`` runs only the
    structural checks (table, columns, lengths) and snapshots them, and the background writer
    converts and validates a flush's batches of a table in one call; a rejected batch raises
    ``RejectedBatch`` at the next ``emit``/``step_end``/``flush``/``close``. A small batch costs
    ~0.1 ms on the training thread instead of ~1 ms converted in the loop (``benchmarks/README.md``).
    Larger batches amortise conversion on their own and are converted and validated inside
    ``emit``, overlapping the writer's Parquet encoding of the previous one. 0: every batch is
    converted inside ``emit``, so every error raises at its call site (debugging, tests)."""
    writer_priority: str = "idle"
    """CPU priority of the background writer thread: ``idle`` (Linux ``SCHED_IDLE``: it uses only
    CPU time the training process leaves free; in interleaved runs on the 2-core CPU machine the
    step-time overhead was 1.010x against 1.032x for ``normal``, ``benchmarks/README.md``) or
    ``normal`` (the OS default: a live reader's lag stays ~``flush_seconds`` even when other
    processes saturate the CPUs)."""
    compact_on_close: bool = True
    """Rank 0 folds the parts into ``RUN_DIR/telemetry.duckdb`` on a ``finished`` close."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.token_sample_rate <= 1.0:
            raise ValueError(
                f"telemetry.token_sample_rate must be in [0, 1], got {self.token_sample_rate}"
            )
        if not (isinstance(self.flush_rows, int) and self.flush_rows >= 1):
            raise ValueError(f"telemetry.flush_rows must be an int >= 1, got {self.flush_rows!r}")
        if not self.flush_seconds > 0:
            raise ValueError(f"telemetry.flush_seconds must be > 0, got {self.flush_seconds!r}")
        if not self.step_flush_min_seconds >= 0:
            raise ValueError(
                "telemetry.step_flush_min_seconds must be >= 0, "
                f"got {self.step_flush_min_seconds!r}"
            )
        if not 0.0 <= self.writer_cpu_budget <= 1.0:
            raise ValueError(
                f"telemetry.writer_cpu_budget must be in [0, 1], got {self.writer_cpu_budget!r}"
            )
        if not self.max_flush_seconds > 0:
            raise ValueError(
                f"telemetry.max_flush_seconds must be > 0, got {self.max_flush_seconds!r}"
            )
        if self.writer_priority not in WRITER_PRIORITIES:
            raise ValueError(
                f"telemetry.writer_priority must be one of {list(WRITER_PRIORITIES)}, "
                f"got {self.writer_priority!r}"
            )
        if not (isinstance(self.defer_rows, int) and self.defer_rows >= 0):
            raise ValueError(f"telemetry.defer_rows must be an int >= 0, got {self.defer_rows!r}")
        if not (isinstance(self.queue_max_batches, int) and self.queue_max_batches >= 1):
            raise ValueError(
                f"telemetry.queue_max_batches must be an int >= 1, got {self.queue_max_batches!r}"
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TelemetryConfig:
        """Build from a mapping; unknown keys raise ValueError listing the valid ones."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise ValueError(f"unknown telemetry config keys {unknown}; valid: {sorted(fields)}")
        return cls(**values)

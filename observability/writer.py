"""``DuckDBTelemetry``: the ``--telemetry duckdb`` sink — validated batches, background Parquet writes.

The training thread checks a batch's structure (table, columns, lengths: ``records.check_batch``)
and hands it to a background writer, which converts and validates each table's pending batches in
one call at flush time and writes atomic parts (``batcher.PendingTables``, ``parts``). A batch that
fails is rejected alone and raises ``RejectedBatch`` at the training thread's next telemetry call.
Batches above ``config.defer_rows`` rows (0: all) are instead converted and validated inside
``emit``, and their errors raise at the call site.

The writer (``writer_thread.WriterThread``) writes a table's part when it reaches ``flush_rows``,
when the oldest pending batch is ``flush_seconds`` old, at ``step_end`` / ``flush`` and at
``close``, and blocks ``emit`` when it cannot keep up (backpressure: nothing is dropped). The two
time thresholds are paced (``pacing.FlushPacer``): stretched, up to ``max_flush_seconds``, while
flushes cost the writer more CPU than ``writer_cpu_budget`` of wall time.
``close`` is safe inside a signal handler.
Simplification: only rank 0 writes ``runs`` rows (``running`` at start, the final status at close),
from the training process.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import json
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from observability.config import TelemetryConfig
from observability.merge import snapshot
from observability.parts import PartWriter
from observability.records import build_table, check_batch
from observability.schema import SCHEMA_VERSION, table_spec
from observability.unrecorded import unrecorded_names
from observability.writer_thread import WriterThread

RUN_INFO_KEYS = (
    "config",
    "git_sha",
    "device",
    "algorithm",
    "tokenizer_rev",
    "chat_template_rev",
    "vocab_size",
    "icepop_beta",
    "dis_eps_low",
    "dis_eps_high",
    "staleness_limit",
    "unrecorded",
)
"""Keys ``run_info`` may hold (the ``runs`` columns the caller knows; the rest are the sink's)."""

_CLOSE_TIMEOUT_S = 120.0


class RejectedBatch(ValueError):
    """A batch the background writer refused (its message names table, column and sample),
    raised on the training thread by the first telemetry call after the writer saw it."""


def _config_json(config: Any) -> str | None:
    if config is None or isinstance(config, str):
        return config
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    return json.dumps(config, sort_keys=True, default=str)


class DuckDBTelemetry:
    """Telemetry sink writing ``RUN_DIR/telemetry/<table>/part-*.parquet`` for one rank.

    Args:
        run_dir: the run's directory (created if missing).
        run_id: defaults to the run directory's name.
        rank, world_size: this process's data-parallel rank and the number of ranks.
        run_info: ``runs`` columns known to the caller, keys from ``RUN_INFO_KEYS``; ``config``
            may be a dict, a dataclass or a JSON string; ``vocab_size`` enables token-id checks;
            ``unrecorded`` lists the tables / ``table.column`` names the caller never records
            (``observability.unrecorded``).
        config: sampling / flushing / queueing knobs.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        run_id: str | None = None,
        rank: int = 0,
        world_size: int = 1,
        run_info: Mapping[str, Any] | None = None,
        config: TelemetryConfig | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"telemetry rank must be in [0, world_size={world_size}), got {rank}")
        info = dict(run_info or {})
        unknown = sorted(set(info) - set(RUN_INFO_KEYS))
        if unknown:
            raise ValueError(f"unknown run_info keys {unknown}; valid: {list(RUN_INFO_KEYS)}")
        info["config"] = _config_json(info.get("config"))
        info["unrecorded"] = [unrecorded_names(info.get("unrecorded"))]  # one list-valued row
        self.run_dir = str(Path(run_dir))
        self.run_id = run_id or Path(run_dir).resolve().name
        self.rank, self.world_size = rank, world_size
        self.config = config or TelemetryConfig()
        self.vocab_size = info.get("vocab_size")
        self._info = info
        self._parts = PartWriter(run_dir, rank=rank)
        self._started_at = time.time()
        self._last_step_flush = float("-inf")
        self.step_flushes = 0
        """How many ``step_end`` calls asked the writer to flush (the others were within
        ``step_flush_min_seconds`` of the previous one)."""
        self._error: BaseException | None = None  # a failed part write: the sink is broken
        self._rejected: collections.deque = collections.deque()  # batches the writer refused
        self._closed = False
        self._write_run_row("running")
        self._writer = WriterThread(
            self.run_dir,
            run_id=self.run_id,
            rank=rank,
            vocab_size=self.vocab_size,
            config=self.config,
        )
        atexit.register(self._at_exit)

    # -- training-thread API ------------------------------------------------------------------

    def emit(self, table: str, columns: Mapping[str, Any]) -> None:
        """Queue one columnar batch for ``table``; blocks while the queue is full.

        Structural errors (unknown table or column, missing required column, unequal lengths)
        raise here. Values of a batch above ``config.defer_rows`` rows are converted and validated
        here too; smaller batches by the writer, and a rejected one raises at the next call
        (``RejectedBatch``).
        """
        self._check_open()
        if table == "runs":
            raise ValueError("telemetry table 'runs' is written by the sink (use run_info)")
        n = check_batch(table, columns)[1]
        if n > self.config.defer_rows:
            batch: pa.Table | dict = self._writer.tables.build(table, columns)
            n = batch.num_rows
        else:
            batch = snapshot(table, columns)
        if n:
            self._writer.batch(table, batch, n)

    def step_end(self, step: int) -> None:
        """End of optimizer step ``step``: write every pending row (asynchronously).

        Steps shorter than ``config.step_flush_min_seconds`` are not flushed one by one (each
        flush is an fsync'd part per table); their rows go out with a later step end or the
        ``flush_seconds`` timer, so a live reader still lags by at most that interval. Both
        intervals are stretched by the writer's pacer while flushes cost more than
        ``config.writer_cpu_budget`` (``flush_interval_s``).
        """
        self._check_open()
        now = time.monotonic()
        min_seconds = self.config.step_flush_min_seconds * self._writer.pacer.stretch
        if now - self._last_step_flush < min_seconds:
            return
        self._last_step_flush = now
        self.step_flushes += 1
        self._writer.request_flush()

    @property
    def flush_interval_s(self) -> float:
        """The writer's current time threshold: ``config.flush_seconds`` stretched by its pacer
        (at most ``config.max_flush_seconds``), about how far a live reader lags."""
        return self._writer.pacer.interval

    def writer_cpu_seconds(self) -> float | None:
        """CPU seconds the background writer thread has used so far (None where unmeasurable or
        after ``close``): what the sink costs beyond the time ``emit`` and ``step_end`` take."""
        return self._writer.cpu_seconds()

    def flush(self, timeout: float = _CLOSE_TIMEOUT_S) -> None:
        """Block until every batch emitted so far is in a committed part file."""
        self._check_open()
        done = self._writer.flush(timeout)
        self._collect()
        if not done:
            raise RuntimeError(f"telemetry flush did not finish within {timeout} s")
        self._raise_if_failed()
        self._raise_rejected()

    def close(self, status: str = "finished") -> None:
        """Flush, stop the writer, record ``status`` (``finished``/``failed``); idempotent.

        On ``finished``, rank 0 compacts the run when ``config.compact_on_close``. Safe to call
        from a signal handler. Raises RuntimeError afterwards if a background write had failed,
        and ``RejectedBatch`` if the writer refused a batch no call has reported yet (the run is
        then recorded ``failed``: the program never saw that its rows were refused).
        """
        if status not in ("finished", "failed"):
            raise ValueError(
                f"telemetry close status must be 'finished' or 'failed', got {status!r}"
            )
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        stopped = self._writer.stop(_CLOSE_TIMEOUT_S)
        self._collect()
        if not stopped:
            warnings.warn(
                "telemetry writer did not stop in time; pending rows may be lost", stacklevel=2
            )
        if self._error is not None or self._rejected:
            status = "failed"
        self._write_run_row(status, ended_at=time.time())
        if status == "finished" and self.rank == 0 and self.config.compact_on_close:
            from observability.compact import compact

            try:
                compact(self.run_dir)
            except Exception as e:  # the parts are complete; compaction can be rerun by hand
                warnings.warn(f"telemetry compaction of {self.run_dir} failed: {e}", stacklevel=2)
        self._raise_if_failed()
        self._raise_rejected()

    # -- internals ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._closed:
            self._collect()
        self._raise_if_failed()
        if self._closed:
            raise RuntimeError(f"telemetry for run {self.run_id!r} is closed")
        self._raise_rejected()

    def _raise_rejected(self) -> None:
        """Raise (once) the first batch the writer rejected since the last call."""
        if not self._rejected:
            return
        errors = []
        while self._rejected:
            errors.append(self._rejected.popleft())
        more = f" ({len(errors) - 1} more batches rejected)" if len(errors) > 1 else ""
        raise RejectedBatch(
            f"{errors[0]}{more} [rejected by the background writer; the batch was emitted before "
            "this call, nothing else was lost]"
        ) from errors[0]

    def _collect(self) -> None:
        """Take over the writer's reports (rejected batches, a failed part write)."""
        answers = self._writer.answers
        while answers:
            kind, e = answers.pop(0)  # atomic: the writer thread may append meanwhile
            if kind == "rejected":
                self._rejected.append(e)
            elif self._error is None:
                self._error = e

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"telemetry writer failed: {self._error}") from self._error

    def _at_exit(self) -> None:
        try:
            self.close("failed")  # reached only when the program never closed the sink
        except Exception as e:
            warnings.warn(f"telemetry close at exit failed: {e}", stacklevel=2)

    def _write_run_row(self, status: str, ended_at: float | None = None) -> None:
        if self.rank != 0:
            return
        row = dict(self._info)
        row.update(
            schema_version=SCHEMA_VERSION,
            started_at=self._started_at,
            updated_at=time.time(),
            world_size=self.world_size,
            status=status,
            ended_at=ended_at,
            run_dir=self.run_dir,
        )
        batch = build_table("runs", row, run_id=self.run_id, rank=self.rank)
        self._parts.write(batch, table_spec("runs"))

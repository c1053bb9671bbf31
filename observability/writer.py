"""``DuckDBTelemetry``: the ``--telemetry duckdb`` sink — validated batches, background Parquet writes.

The training thread checks a batch's structure (table, columns, lengths: ``records.check_batch``),
snapshots it (``merge.snapshot``) and appends it to a hand-off buffer. One background thread moves
buffered batches into per-table pending lists and, at flush time, converts and validates each
table's batches in one call (``merge.merge_batches`` + ``records.build_table``; a batch that fails
is rejected alone and raises ``RejectedBatch`` at the training thread's next telemetry call), then
writes atomic parts (``parts``). Batches above ``config.defer_rows`` rows (0: all) are instead
converted and validated inside ``emit``, and their errors raise at the call site.
Flushes happen when a table reaches ``flush_rows``, when the oldest pending batch is
``flush_seconds`` old, at ``step_end``/``flush`` and at ``close``. The writer is *not* woken per
batch: it wakes on a control message (row threshold, time threshold seen by ``emit``, step-end
flush, full buffer, ``flush``, ``close``) or on its own timer (a quarter of ``flush_seconds``, for
when training stalls), so the training thread does not hand the GIL to it ~10 times a step.
Backpressure: at most ``queue_max_batches`` batches wait in the buffer; then ``emit`` wakes the
writer and blocks until it has drained (nothing is dropped). The hand-off uses
``collections.deque`` appends and ``queue.SimpleQueue`` only (reentrant C code), so ``close`` is
safe inside a signal handler.
Simplification: only rank 0 writes ``runs`` rows (``running`` at start, the final status at close).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import json
import os
import queue
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from observability.config import TelemetryConfig
from observability.merge import merge_batches, snapshot
from observability.parts import PartWriter
from observability.records import build_table, check_batch
from observability.schema import SCHEMA_VERSION, table_spec

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
)
"""Keys ``run_info`` may hold (the ``runs`` columns the caller knows; the rest are the sink's)."""

_STOP, _FLUSH, _ROWS, _TICK = "stop", "flush", "rows", "tick"
_CLOSE_TIMEOUT_S = 120.0


def _lower_this_threads_priority() -> None:
    """Put the calling thread in Linux's ``SCHED_IDLE`` class: it runs only on CPU time no other
    thread wants, so converting and writing never preempt the training thread or torch's
    intra-op workers (whose parallel regions wait for their slowest thread). Where training
    leaves no idle CPU, ``emit``'s backpressure blocks the training thread, which frees one.
    No-op where the OS has no ``SCHED_IDLE``."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread
        except OSError:
            pass


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
            may be a dict, a dataclass or a JSON string; ``vocab_size`` enables token-id checks.
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
        self.run_dir = str(Path(run_dir))
        self.run_id = run_id or Path(run_dir).resolve().name
        self.rank, self.world_size = rank, world_size
        self.config = config or TelemetryConfig()
        self.vocab_size = info.get("vocab_size")
        self._info = info
        self._parts = PartWriter(run_dir, rank=rank)
        self._started_at = time.time()
        self._last_step_flush = float("-inf")
        self._error: BaseException | None = None  # a failed part write: the sink is broken
        self._rejected: collections.deque = collections.deque()  # batches the writer refused
        self._closed = False
        self._data: queue.SimpleQueue = queue.SimpleQueue()  # control messages to the writer
        self._buffer: collections.deque = collections.deque()  # (monotonic time, table, batch)
        self._buffered_rows: dict[str, int] = {}  # per table, since the writer was last woken
        self._oldest: float | None = None  # emit time of the oldest batch not yet signalled
        self._appended = 0  # batches ever appended; messages carry it so the writer drains
        # exactly the batches emitted before the message (a row-threshold part holds those)
        self._slots: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(self.config.queue_max_batches):
            self._slots.put(None)
        self._write_run_row("running")
        self._thread = threading.Thread(
            target=self._loop, name=f"telemetry-writer-r{rank}", daemon=True
        )
        self._thread.start()
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
            batch: pa.Table | dict = self._build(table, columns)
            n = batch.num_rows
        else:
            batch = snapshot(table, columns)
        if n == 0:
            return
        try:
            self._slots.get_nowait()
        except queue.Empty:  # buffer full: wake the writer and wait for a slot (backpressure)
            self._data.put((_ROWS, self._appended, None))
            while True:
                try:
                    self._slots.get(timeout=0.5)
                    break
                except queue.Empty:
                    self._raise_if_failed()
                    if not self._thread.is_alive():
                        raise RuntimeError("telemetry writer thread is gone") from None
        now = time.monotonic()
        self._buffer.append((now, table, batch, n))
        self._appended += 1
        rows = self._buffered_rows.get(table, 0) + n
        self._buffered_rows[table] = rows
        if self._oldest is None:
            self._oldest = now
        if rows >= self.config.flush_rows:
            self._buffered_rows[table] = 0
            self._data.put((_ROWS, self._appended, None))
        elif now - self._oldest >= self.config.flush_seconds:
            self._signal_flush()

    def step_end(self, step: int) -> None:
        """End of optimizer step ``step``: write every pending row (asynchronously).

        Steps shorter than ``config.step_flush_min_seconds`` are not flushed one by one (each
        flush is an fsync'd part per table); their rows go out with a later step end or the
        ``flush_seconds`` timer, so a live reader still lags by at most that interval.
        """
        self._check_open()
        now = time.monotonic()
        if now - self._last_step_flush < self.config.step_flush_min_seconds:
            return
        self._last_step_flush = now
        self._signal_flush()

    def flush(self, timeout: float = _CLOSE_TIMEOUT_S) -> None:
        """Block until every batch emitted so far is in a committed part file."""
        self._check_open()
        done = threading.Event()
        self._oldest = None
        self._buffered_rows.clear()
        self._data.put((_FLUSH, self._appended, done))
        if not done.wait(timeout):
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
        self._data.put((_STOP, None, None))  # drains everything (close may interrupt an emit)
        self._thread.join(_CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
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

    def _signal_flush(self) -> None:
        """Ask the writer to write everything buffered so far (asynchronously)."""
        self._oldest = None
        self._buffered_rows.clear()
        self._data.put((_FLUSH, self._appended, None))

    def _check_open(self) -> None:
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

    def _build(self, table: str, columns: Mapping[str, Any]) -> pa.Table:
        return build_table(
            table,
            columns,
            run_id=self.run_id,
            rank=self.rank,
            vocab_size=self.vocab_size,
            token_sample_rate=self.config.token_sample_rate,
        )

    def _convert(self, table: str, batches: list) -> list[pa.Table]:
        """The writer's conversion of a table's pending batches (tables, or snapshots to convert:
        joined and converted in one call when possible, else one by one so that only a bad
        batch is rejected)."""
        raw = [b for b in batches if isinstance(b, dict)]
        out = [b for b in batches if not isinstance(b, dict)]
        if not raw:
            return out
        merged = merge_batches(table_spec(table), raw)
        if merged is not None:
            try:
                return out + [self._build(table, merged)]
            except Exception:  # noqa: BLE001 - find the offending batch below
                pass
        for columns in raw:
            try:
                out.append(self._build(table, columns))
            except Exception as e:  # noqa: BLE001 - surfaced to the training thread
                self._rejected.append(e)
        return out

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

    def _loop(self) -> None:
        if self.config.writer_priority == "idle":
            _lower_this_threads_priority()
        pending: dict[str, list[pa.Table]] = {}
        rows: dict[str, int] = {}
        oldest: float | None = None  # emit time of the oldest pending batch
        tick = self.config.flush_seconds / 4
        drained = 0

        def write(table: str) -> None:
            batches = self._convert(table, pending.pop(table, []))
            rows.pop(table, None)
            batches = [b for b in batches if b.num_rows]
            if batches:
                try:
                    self._parts.write(pa.concat_tables(batches), table_spec(table))
                except BaseException as e:  # surfaced to the training thread by the next call
                    if self._error is None:
                        self._error = e

        while True:
            try:
                kind, upto, payload = self._data.get(timeout=tick)
            except queue.Empty:
                kind, upto, payload = _TICK, None, None
            while self._buffer and (upto is None or drained < upto):  # popleft is atomic
                t, table, batch, n = self._buffer.popleft()
                drained += 1
                self._slots.put(None)
                pending.setdefault(table, []).append(batch)
                rows[table] = rows.get(table, 0) + n
                oldest = t if oldest is None else min(oldest, t)
            if kind == _ROWS:
                for name in [n for n, r in rows.items() if r >= self.config.flush_rows]:
                    write(name)
                continue
            if kind == _TICK and (
                oldest is None or time.monotonic() - oldest < self.config.flush_seconds
            ):
                continue
            for name in list(pending):
                write(name)
            oldest = None
            if payload is not None:
                payload.set()
            if kind == _STOP:
                return

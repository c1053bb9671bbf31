"""``DuckDBTelemetry``: the ``--telemetry duckdb`` sink — columns in, atomic Parquet parts out.

The training thread checks a batch's structure (table, columns, lengths), copies its arrays and
appends it to a queue; one background thread converts, validates (``records``, the column rules
of ``rules``) and writes a part per table (``parts``). It writes at the last ``step_end`` before
its previous write would be ``flush_seconds`` old (so a live reader lags by at most about that),
when the oldest queued row is ``flush_seconds`` old (its own timer: a stalled loop), once
``flush_rows`` rows are queued, at ``flush`` and at ``close``; then it merges its small parts
(``parts.Merger``). The queue is bounded
(``MAX_QUEUED_BYTES``): ``emit`` blocks while it is full (backpressure, nothing is dropped). A
batch that breaks a rule is rejected alone and raises ``RejectedBatch`` at the next telemetry
call. The hand-off is a ``collections.deque`` plus ``queue.SimpleQueue`` (reentrant C code), so
``close`` is safe inside a signal handler.
Simplification: only rank 0 writes ``runs`` rows (``running`` at start, the final status at close).
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import itertools
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

from observability import records
from observability.buffer_pool import BufferPool
from observability.config import TelemetryConfig
from observability.parts import Merger, PartWriter
from observability.schema import SCHEMA_VERSION, TableSpec, table_spec
from observability.unrecorded import unrecorded_names

RUN_INFO_KEYS = tuple(
    "config git_sha device algorithm tokenizer_rev chat_template_rev vocab_size icepop_beta "
    "dis_eps_low dis_eps_high staleness_limit unrecorded".split()
)
"""Keys ``run_info`` may hold (the ``runs`` columns the caller knows; the rest are the sink's)."""

MAX_QUEUED_BYTES = 1 << 30
"""Bytes of emitted batches not yet written beyond which ``emit`` blocks (backpressure)."""
_POOL = BufferPool(max_bytes=MAX_QUEUED_BYTES)
"""Memory for ``emit``'s copies, shared by the sinks of the process: at most what the queue may
hold waits there for reuse (``buffer_pool.BufferPool``)."""
JOIN_ROWS = 65_536
"""A flush joins a table's batches before converting them while they hold at most this many rows
(the per-batch cost dominates small batches; copying dominates large ones)."""
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


def _nbytes(columns: Mapping[str, Any], n: int) -> int:
    """About how much memory a snapshot holds (arrays exactly, lists 8 bytes a value)."""
    return sum(
        v.nbytes if hasattr(v, "nbytes") else 8 * n if isinstance(v, list) else 8
        for v in columns.values()
    )


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
        config: sampling and flushing.
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
        self._merger = Merger(self._parts, max_rows=self.config.flush_rows)
        self._started_at = time.time()
        # training thread -> writer: batches (table, columns, n, bytes, buffers) in a deque,
        # control messages in a SimpleQueue; the writer answers with a token per write
        self._batches: collections.deque = collections.deque()
        self._control, self._progress = queue.SimpleQueue(), queue.SimpleQueue()
        self._oldest: float | None = None  # emit time of the oldest batch since the last write
        self._last_write = self._last_step_end = time.monotonic()  # the writer's last start
        self._rows = self._put_bytes = 0  # since the last request / ever (training thread)
        self._done_bytes = 0  # written by the writer thread only
        self._rejected: collections.deque = collections.deque()  # from the writer thread
        self._error: BaseException | None = None  # a failed part write (the sink is broken)
        self._closed = False
        self._write_run_row("running")
        self._thread = threading.Thread(target=self._loop, name="telemetry-writer", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    # -- training-thread API ------------------------------------------------------------------

    def emit(self, table: str, columns: Mapping[str, Any]) -> None:
        """Queue one columnar batch for ``table`` (``records`` lists the accepted column values).

        Structural errors (unknown table or column, missing required column, unequal lengths)
        raise here; a value that breaks a rule raises ``RejectedBatch`` at the next call.
        Blocks while ``MAX_QUEUED_BYTES`` wait for the writer.
        """
        self._check_open()
        if table == "runs":
            raise ValueError("telemetry table 'runs' is written by the sink (use run_info)")
        n = records.check_batch(table, columns)[1]
        if n == 0:
            return
        self._wait_for_room()
        batch, buffers = records.snapshot(table, columns, _POOL)
        nbytes = _nbytes(batch, n)
        self._batches.append((table, batch, n, nbytes, buffers))
        self._put_bytes += nbytes
        if self._oldest is None:
            self._oldest = time.monotonic()
            self._control.put(("oldest", self._oldest))  # the writer's timer starts
        self._rows += n
        if self._rows >= self.config.flush_rows:
            self._request()

    def step_end(self, step: int) -> None:
        """End of optimizer step ``step``: write the pending rows (asynchronously) if waiting for
        the next step end (as long as this step took) would leave the previous write more than
        ``flush_seconds`` behind."""
        self._check_open()
        now = time.monotonic()
        step_s, self._last_step_end = now - self._last_step_end, now
        if (
            self._oldest is not None
            and now + step_s - self._last_write >= self.config.flush_seconds
        ):
            self._request()

    def flush(self, timeout: float = _CLOSE_TIMEOUT_S) -> None:
        """Block until every batch emitted so far is in a committed part file."""
        self._check_open()
        done = threading.Event()
        self._request(done)
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
        self._control.put(("stop", None))
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

    def writer_cpu_seconds(self) -> float | None:
        """CPU seconds the background writer thread has used so far (None where the OS has no
        per-thread clock, or after ``close``): the sink's cost beyond ``emit`` and ``step_end``."""
        if not self._thread.is_alive():
            return None
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))
        except (AttributeError, OSError):  # no per-thread CPU clock on this OS
            return None

    # -- training-thread internals ------------------------------------------------------------

    def _request(self, done: threading.Event | None = None) -> None:
        self._rows = 0
        self._control.put(("write", done))

    def _wait_for_room(self) -> None:
        """Backpressure: block while more than ``MAX_QUEUED_BYTES`` wait for the writer."""
        asked = False
        while self._put_bytes - self._done_bytes > MAX_QUEUED_BYTES:
            if not asked:
                self._request()
                asked = True
            try:
                self._progress.get(timeout=0.5)
            except queue.Empty:
                self._raise_if_failed()
                if not self._thread.is_alive():
                    raise RuntimeError("telemetry writer thread is gone") from None

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
        row = dict(self._info, schema_version=SCHEMA_VERSION, started_at=self._started_at,
                   updated_at=time.time(), world_size=self.world_size, status=status,
                   ended_at=ended_at, run_dir=self.run_dir)  # fmt: skip
        batch = records.build_table("runs", row, run_id=self.run_id, rank=self.rank)
        self._parts.write(batch, table_spec("runs"))

    # -- the writer thread --------------------------------------------------------------------

    def _loop(self) -> None:
        deadline = None  # when the oldest queued batch is flush_seconds old
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                kind, arg = self._control.get(timeout=timeout)
            except queue.Empty:
                kind, arg = "write", None
            if kind == "oldest":
                deadline = arg + self.config.flush_seconds if deadline is None else deadline
                continue
            deadline = None
            try:
                self._write_all()
            except BaseException as e:  # surfaced to the training thread by its next call
                self._error = self._error or e
            if arg is not None:
                arg.set()
            if kind == "stop":
                return

    def _write_all(self) -> None:
        """Convert, validate and write every queued batch: one part per table, then merge."""
        self._oldest = None  # before draining: a batch queued after this starts a new timer
        if self._batches:
            self._last_write = time.monotonic()
        by_table: dict[str, list[tuple[dict, int]]] = {}
        done, buffers = 0, []
        while self._batches:
            table, columns, n, nbytes, used = self._batches.popleft()
            done, buffers = done + nbytes, buffers + used
            by_table.setdefault(table, []).append((columns, n))
        for table in list(by_table):
            spec = table_spec(table)
            batches = self._converted(spec, by_table.pop(table))
            data = records.unify([b for b, _ in batches], spec) if batches else None
            if data is None or not data.num_rows:  # rejected, or outside the token sample
                continue
            check = tuple({name for _, names in batches for name in names})
            clean = records.violation(data, spec, check, self.vocab_size)
            # the rules run in polars' threads while the part is encoded; committed if clean
            written = self._parts.write(data, spec, ready=lambda clean=clean: clean() is None)
            if written is None:  # a batch broke a rule: reject it alone, write the others
                data = self._validated(spec, batches)
                written = self._parts.write(data, spec) if data is not None else None
            if written is not None:
                self._merger.add(table, *written, data.num_rows)
            del data  # the last reference to the snapshot's buffers
        _POOL.release(buffers)
        self._done_bytes += done
        self._progress.put(None)
        self._merger.prune()

    def _converted(self, spec: TableSpec, snapshots: list) -> list[tuple[pa.Table, tuple]]:
        """A table's snapshots as tables: joined and converted once when they line up
        (``records.join``), then cut back into one slice per batch (a batch that breaks a rule
        is rejected alone); else one by one, rejecting those that do not convert."""
        kw = dict(
            run_id=self.run_id, rank=self.rank, token_sample_rate=self.config.token_sample_rate
        )
        sampled = spec.per_token and self.config.token_sample_rate < 1  # rows dropped: no slices
        small = sum(n for _, n in snapshots) <= JOIN_ROWS  # large batches: copying costs more
        joined = records.join(snapshots) if small and not sampled and len(snapshots) > 1 else None
        if joined is not None:
            try:
                table, check = records.to_table(spec, *joined, **kw)
                starts = itertools.accumulate((n for _, n in snapshots), initial=0)
                return [(table.slice(o, n), check) for o, (_, n) in zip(starts, snapshots)]
            except Exception:  # noqa: BLE001 - converted one by one below
                pass
        out = []
        for columns, n in snapshots:
            try:
                out.append(records.to_table(spec, columns, n, **kw))
            except Exception as e:  # noqa: BLE001 - surfaced to the training thread
                self._rejected.append(e)
        return out

    def _validated(self, spec: TableSpec, batches: list) -> pa.Table | None:
        """The batches that pass every rule, joined; each failing batch is rejected alone."""
        while batches:
            data = records.unify([b for b, _ in batches], spec)
            check = tuple({name for _, names in batches for name in names})
            bad = records.violation(data, spec, check, self.vocab_size)()
            if bad is None:
                return data
            row, i = bad[1], 0
            while row >= batches[i][0].num_rows:
                row -= batches[i][0].num_rows
                i += 1
            own = records.violation(batches[i][0], spec, batches[i][1], self.vocab_size)()
            self._rejected.append(ValueError(own[0] if own else bad[0]))
            del batches[i]
        return None

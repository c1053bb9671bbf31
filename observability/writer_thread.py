"""``WriterThread``: ``DuckDBTelemetry``'s background writer, a thread of the training process.

The sink calls ``batch``, ``request_flush``, ``flush`` and ``stop``, and reads the writer's reports
(rejected batches, a failed part write) from ``answers``. ``batch`` appends to a
hand-off buffer; the thread is *not* woken per batch but on a control message (row threshold,
time threshold seen by ``batch``, a flush request, a full buffer, ``flush``, ``stop``) or on its own
timer (a quarter of ``flush_seconds``, for when training stalls), so the training thread does not
hand the GIL to it ~10 times a step. The time thresholds follow ``pacer``
(``pacing.FlushPacer``), which stretches them while flushes cost the writer more than its CPU
budget. Backpressure: at most ``queue_max_batches`` batches wait; then ``batch`` wakes the
writer and blocks until it has drained (nothing is dropped). The hand-off
uses ``collections.deque`` appends and ``queue.SimpleQueue`` only (reentrant C code), so ``stop``
is safe inside a signal handler.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time
from typing import Any

from observability.batcher import PendingTables
from observability.config import TelemetryConfig
from observability.pacing import FlushPacer
from observability.parts import PartWriter

_STOP, _FLUSH, _ROWS, _TICK = "stop", "flush", "rows", "tick"


def lower_priority() -> None:
    """Put the calling thread in Linux's ``SCHED_IDLE`` class: it runs only on CPU time no other
    thread wants, so converting and writing never preempt the training thread or torch's
    intra-op workers (whose parallel regions wait for their slowest thread). Where training
    leaves no idle CPU, ``batch``'s backpressure blocks the training thread, which frees one.
    No-op where the OS has no ``SCHED_IDLE``."""
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread
        except OSError:
            pass


class WriterThread:
    """Background writer thread of one sink (one rank of a run).

    Args:
        run_dir: the run's directory.
        run_id, rank, vocab_size: as the sink's (``build_table``'s arguments).
        config: the sink's config (thresholds, sampling, queue bound, priority).
    """

    def __init__(
        self,
        run_dir: str,
        *,
        run_id: str,
        rank: int,
        vocab_size: int | None,
        config: TelemetryConfig,
    ) -> None:
        self.flush_rows, self.flush_seconds = config.flush_rows, config.flush_seconds
        self.priority = config.writer_priority
        self.pacer = FlushPacer(
            config.flush_seconds,
            budget=config.writer_cpu_budget,
            ceiling=config.max_flush_seconds,
        )
        self.answers: list[tuple[str, BaseException]] = []  # ("rejected" | "error", exception)
        self.tables = PendingTables(
            PartWriter(run_dir, rank=rank),
            run_id=run_id,
            rank=rank,
            vocab_size=vocab_size,
            token_sample_rate=config.token_sample_rate,
            flush_rows=self.flush_rows,
            flush_seconds=self.flush_seconds,
            on_reject=lambda e: self.answers.append(("rejected", e)),
            on_error=lambda e: self.answers.append(("error", e)),
        )
        self._data: queue.SimpleQueue = queue.SimpleQueue()  # control messages to the writer
        self._buffer: collections.deque = collections.deque()  # (monotonic time, table, batch, n)
        self._buffered_rows: dict[str, int] = {}  # per table, since the writer was last woken
        self._oldest: float | None = None  # emit time of the oldest batch not yet signalled
        self._appended = 0  # batches ever appended; messages carry it so the writer drains
        # exactly the batches emitted before the message (a row-threshold part holds those)
        self._slots: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(config.queue_max_batches):
            self._slots.put(None)
        self._thread = threading.Thread(
            target=self._loop, name=f"telemetry-writer-r{rank}", daemon=True
        )
        self._thread.start()

    def batch(self, table: str, batch: Any, n: int) -> None:
        """Hand over a batch of ``n`` rows; blocks while ``queue_max_batches`` wait."""
        try:
            self._slots.get_nowait()
        except queue.Empty:  # buffer full: wake the writer and wait for a slot (backpressure)
            self._data.put((_ROWS, self._appended, None))
            while True:
                try:
                    self._slots.get(timeout=0.5)
                    break
                except queue.Empty:
                    for kind, e in self.answers:
                        if kind == "error":
                            raise RuntimeError(f"telemetry writer failed: {e}") from e
                    if not self._thread.is_alive():
                        raise RuntimeError("telemetry writer thread is gone") from None
        now = time.monotonic()
        self._buffer.append((now, table, batch, n))
        self._appended += 1
        rows = self._buffered_rows.get(table, 0) + n
        self._buffered_rows[table] = rows
        if self._oldest is None:
            self._oldest = now
        if rows >= self.flush_rows:
            self._buffered_rows[table] = 0
            self._data.put((_ROWS, self._appended, None))
        elif now - self._oldest >= self.pacer.interval:
            self.request_flush()

    def request_flush(self) -> None:
        """Ask the writer to write everything handed over so far (asynchronously)."""
        self._oldest = None
        self._buffered_rows.clear()
        self._data.put((_FLUSH, self._appended, None))

    def flush(self, timeout: float) -> bool:
        """Block until everything handed over is in committed parts; False on timeout."""
        done = threading.Event()
        self._oldest = None
        self._buffered_rows.clear()
        self._data.put((_FLUSH, self._appended, done))
        return done.wait(timeout)

    def stop(self, timeout: float) -> bool:
        """Write everything handed over and end the thread; False if it did not end in time."""
        self._data.put((_STOP, None, None))  # drains everything (stop may interrupt a batch)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def native_id(self) -> int | None:
        return self._thread.native_id

    def cpu_seconds(self) -> float | None:
        """CPU time the writer thread has used so far (user + system, its own clock), or None where
        the OS has no per-thread CPU clock or the thread has ended."""
        ident = self._thread.ident
        if (
            ident is None
            or not self._thread.is_alive()
            or not hasattr(time, "pthread_getcpuclockid")
        ):
            return None
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(ident))
        except OSError:
            return None

    def _loop(self) -> None:
        if self.priority == "idle":
            lower_priority()
        tables, tick, drained = self.tables, self.flush_seconds / 4, 0
        cpu_mark = time.thread_time()  # this thread's CPU at the end of the previous flush
        while True:
            try:
                kind, upto, payload = self._data.get(timeout=tick)
            except queue.Empty:
                kind, upto, payload = _TICK, None, None
            while self._buffer and (upto is None or drained < upto):  # popleft is atomic
                t, table, batch, n = self._buffer.popleft()
                drained += 1
                self._slots.put(None)
                tables.add(table, batch, n, t)
            if kind == _ROWS:
                for name in tables.full_tables():
                    tables.write(name)
                continue
            if kind == _TICK and not tables.due(seconds=self.pacer.interval):
                continue
            wrote = bool(tables.pending)
            tables.write_all()
            if payload is not None:
                payload.set()
            if kind == _STOP:
                return
            if wrote:  # an empty flush would drag the pacer's estimate down for nothing
                cpu = time.thread_time()
                self.pacer.record(cpu - cpu_mark)  # everything since the last one, parts included
                cpu_mark = cpu

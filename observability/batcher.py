"""``PendingTables``: the background writer's state — pending batches per table -> atomic parts.

Batches arrive as snapshots (dicts of columns, converted here) or as Arrow tables (converted by
``emit``). At flush time a table's snapshots are joined exactly (``merge.merge_batches``) and
converted and validated in one ``build_table`` call; if that fails they are converted one by one
so that only the offending batch is rejected (``on_reject``). A failed part write is reported
through ``on_error`` (the sink keeps the first).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from observability.merge import merge_batches
from observability.parts import PartWriter
from observability.records import build_table
from observability.schema import table_spec


class PendingTables:
    """Per-table pending batches of one rank, written as parts on the sink's thresholds.

    Args:
        parts: where parts go.
        run_id, rank, vocab_size, token_sample_rate: ``build_table``'s arguments.
        flush_rows: a table is written once its pending rows reach this many.
        flush_seconds: everything is written once the oldest pending batch is this old.
        on_reject: called with the exception of a batch that failed conversion or validation.
        on_error: called with the exception of a failed part write.
    """

    def __init__(
        self,
        parts: PartWriter,
        *,
        run_id: str,
        rank: int,
        vocab_size: int | None,
        token_sample_rate: float,
        flush_rows: int,
        flush_seconds: float,
        on_reject: Callable[[BaseException], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.parts = parts
        self.run_id, self.rank = run_id, rank
        self.vocab_size, self.token_sample_rate = vocab_size, token_sample_rate
        self.flush_rows, self.flush_seconds = flush_rows, flush_seconds
        self.on_reject, self.on_error = on_reject, on_error
        self.pending: dict[str, list[Any]] = {}
        self.rows: dict[str, int] = {}
        self.oldest: float | None = None  # arrival time of the oldest pending batch

    def add(self, table: str, batch: Any, n: int, t: float | None = None) -> None:
        """Queue a batch of ``n`` rows that arrived (or was emitted) at monotonic time ``t``."""
        t = time.monotonic() if t is None else t
        self.pending.setdefault(table, []).append(batch)
        self.rows[table] = self.rows.get(table, 0) + n
        self.oldest = t if self.oldest is None else min(self.oldest, t)

    def full_tables(self) -> list[str]:
        """Tables whose pending rows reached ``flush_rows``."""
        return [name for name, r in self.rows.items() if r >= self.flush_rows]

    def due(self, now: float | None = None, seconds: float | None = None) -> bool:
        """True when the oldest pending batch is ``seconds`` (default ``flush_seconds``) old."""
        now = time.monotonic() if now is None else now
        seconds = self.flush_seconds if seconds is None else seconds
        return self.oldest is not None and now - self.oldest >= seconds

    def seconds_to_due(self, now: float | None = None) -> float | None:
        """Seconds until ``due`` (0 if already), None with nothing pending."""
        if self.oldest is None:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, self.oldest + self.flush_seconds - now)

    def write(self, table: str) -> None:
        """Convert and write ``table``'s pending batches as one part."""
        batches = self._convert(table, self.pending.pop(table, []))
        self.rows.pop(table, None)
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        try:
            self.parts.write(pa.concat_tables(batches), table_spec(table))
        except BaseException as e:  # surfaced to the training thread by its next call
            self.on_error(e)

    def write_all(self) -> None:
        for name in list(self.pending):
            self.write(name)
        self.oldest = None

    def build(self, table: str, columns: Any) -> pa.Table:
        """Convert and validate one batch of ``table`` (``records.build_table``)."""
        return build_table(
            table,
            columns,
            run_id=self.run_id,
            rank=self.rank,
            vocab_size=self.vocab_size,
            token_sample_rate=self.token_sample_rate,
        )

    def _convert(self, table: str, batches: list) -> list[pa.Table]:
        """Tables for a table's pending batches (snapshots joined and converted in one call when
        possible, else one by one so that only a bad batch is rejected)."""
        raw = [b for b in batches if isinstance(b, dict)]
        out = [b for b in batches if not isinstance(b, dict)]
        if not raw:
            return out
        merged = merge_batches(table_spec(table), raw)
        if merged is not None:
            try:
                return out + [self.build(table, merged)]
            except Exception:  # noqa: BLE001 - find the offending batch below
                pass
        for columns in raw:
            try:
                out.append(self.build(table, columns))
            except Exception as e:  # noqa: BLE001 - surfaced to the training thread
                self.on_reject(e)
        return out

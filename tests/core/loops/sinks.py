"""Test helper: an in-memory telemetry sink that keeps every emitted batch (the protocol only)."""

from __future__ import annotations

from collections import defaultdict


class RecordingSink:
    """Implements emit/step_end/close; ``tables[name]`` is the list of batches emitted."""

    def __init__(self) -> None:
        self.run_id, self.run_dir = "recording", None
        self.tables: dict[str, list[dict]] = defaultdict(list)
        self.steps_ended: list[int] = []

    def emit(self, table, columns) -> None:
        self.tables[table].append(dict(columns))

    def step_end(self, step: int) -> None:
        self.steps_ended.append(step)

    def close(self, status: str = "finished") -> None:
        self.status = status

    def last(self, table: str) -> dict:
        return self.tables[table][-1]

"""The ledger's buffered events -> ``memory_events`` columns for the telemetry sink.

Plain columns, built on the training thread while the events are hot: integers and flags as numpy
arrays, ``ts`` as epoch datetime64[us] (the monotonic clock plus the ledger's epoch offset),
``logical_shape`` as a list of shapes (lists of ints: a step has a few dozen events), strings as
lists of str.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.memory.events import EVENT_COLUMNS, MemoryEvent

INT_COLUMNS = ("step", "rank", "bytes", "event_id")


def transposed(events: Sequence[MemoryEvent]) -> dict[str, list[Any]]:
    """Events as one list per ``memory_events`` column."""
    if not events:
        return {col: [] for col in EVENT_COLUMNS}
    return dict(zip(EVENT_COLUMNS, map(list, zip(*events, strict=True)), strict=True))


def telemetry_columns(events: Sequence[MemoryEvent], *, epoch_offset_ns: int) -> dict[str, Any]:
    """``events`` as ``memory_events`` columns [N]."""
    cols: dict[str, Any] = transposed(events)
    n = len(events)
    ns = np.fromiter(cols["ts"], dtype=np.int64, count=n) + epoch_offset_ns
    cols["ts"] = (ns // 1000).astype("datetime64[us]")
    cols["logical_shape"] = [list(shape) for shape in cols["logical_shape"]]
    for name in INT_COLUMNS:
        cols[name] = np.fromiter(cols[name], dtype=np.int64, count=n)
    cols["persistent"] = np.fromiter(cols["persistent"], dtype=bool, count=n)
    return cols

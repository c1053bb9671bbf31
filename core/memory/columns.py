"""The ledger's buffered events -> typed ``memory_events`` columns for the telemetry sink.

Built on the training thread while the events are hot, so the background writer only joins
contiguous buffers: integers and flags as numpy arrays, ``ts`` as epoch datetime64[us] (the
monotonic clock plus the ledger's epoch offset), ``logical_shape`` as an Arrow list array, and the
recurring strings (device, category, event, dtype, layout, producer, consumer, owner) as
dictionary arrays over codes interned per column (``observability.dictionary``). ``object`` names
carry a policy version and grow without bound, so they travel as a plain string array.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from core.memory.events import EVENT_COLUMNS, MemoryEvent
from observability.dictionary import StringDictionary

DICTIONARY_COLUMNS = (
    "device",
    "device_kind",
    "category",
    "event",
    "dtype",
    "layout",
    "producer",
    "consumer",
    "owner",
)
"""``memory_events`` string columns with few distinct values, sent dictionary-encoded."""
INT_COLUMNS = ("step", "rank", "bytes", "event_id")


def transposed(events: Sequence[MemoryEvent]) -> dict[str, list[Any]]:
    """Events as one list per ``memory_events`` column."""
    if not events:
        return {col: [] for col in EVENT_COLUMNS}
    return dict(zip(EVENT_COLUMNS, map(list, zip(*events, strict=True)), strict=True))


def telemetry_columns(
    events: Sequence[MemoryEvent], *, epoch_offset_ns: int, strings: dict[str, StringDictionary]
) -> dict[str, Any]:
    """``events`` as typed ``memory_events`` columns [N]; ``strings`` holds one
    ``StringDictionary`` per name in ``DICTIONARY_COLUMNS`` (created on first use, kept by the
    ledger so codes stay stable across steps)."""
    cols: dict[str, Any] = transposed(events)
    n = len(events)
    ns = np.fromiter(cols["ts"], dtype=np.int64, count=n) + epoch_offset_ns
    cols["ts"] = (ns // 1000).astype("datetime64[us]")
    shapes = cols["logical_shape"]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, shapes), dtype=np.int32, count=n), out=offsets[1:])
    flat = np.fromiter(chain.from_iterable(shapes), dtype=np.int64, count=int(offsets[-1]))
    cols["logical_shape"] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
    for name in INT_COLUMNS:
        cols[name] = np.fromiter(cols[name], dtype=np.int64, count=n)
    cols["persistent"] = np.fromiter(cols["persistent"], dtype=bool, count=n)
    for name in DICTIONARY_COLUMNS:
        if name not in strings:
            strings[name] = StringDictionary()
        cols[name] = strings[name].encode(cols[name])
    cols["object"] = pa.array(cols["object"], type=pa.string())
    return cols

"""One row of the ``memory_events`` table: the ledger's lifecycle record (issue 9).

``MemoryEvent``'s fields are the table's columns, in order; ``run_id`` is added by the sink.
``logical_shape`` is the object's shape tuple (``MemoryLedger.pending_columns`` shows it as a
string, ``"[3, 5]"``; the sink gets an Arrow list column).
"""

from typing import NamedTuple


class MemoryEvent(NamedTuple):
    """One row of ``memory_events`` (fields = :data:`EVENT_COLUMNS`)."""

    ts: int
    step: int
    rank: int
    device: str
    device_kind: str
    object: str
    category: str
    event: str
    bytes: int
    logical_shape: tuple[int, ...]
    dtype: str
    layout: str
    producer: str
    consumer: str
    owner: str
    event_id: int
    persistent: bool


EVENT_COLUMNS = MemoryEvent._fields
"""Columns of the ``memory_events`` table, in order."""

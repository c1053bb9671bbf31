"""One row of the ``memory_events`` table: the ledger's lifecycle record (issue 9).

``MemoryEvent``'s fields are the table's columns, in order; ``run_id`` is added by the sink.
``logical_shape`` is a string (``"[3, 5]"``) so the column stays flat.
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
    logical_shape: str
    dtype: str
    layout: str
    producer: str
    consumer: str
    owner: str
    event_id: int
    persistent: bool


EVENT_COLUMNS = MemoryEvent._fields
"""Columns of the ``memory_events`` table, in order."""

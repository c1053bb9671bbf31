"""Reading an offline W&B run's ``run-<id>.wandb`` file back (for the mirror's tests).

wandb 0.31 ships no reader for it. The file is a LevelDB-style log (wandb's ``datastore`` format):
a 7-byte header (``:W&B``, magic 0xBEE1 little-endian, version 0), then 32 KiB blocks of chunks,
each ``crc32 (4) | length (2, LE) | type (1)`` + data, type 1 = a whole record, 2/3/4 = its
first/middle/last piece; a block tail under 7 bytes is zero padding. Each record is a
``wandb_internal_pb2.Record``; ``history`` records hold the logged rows as JSON values.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7


def records(path: str | Path) -> Iterator:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file (starts {data[:7]!r})")
    pos, pieces = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # padding at the end of a block
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        pieces += data[pos + HEADER : pos + HEADER + n]
        pos += HEADER + n
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(pieces)
            pieces = b""
            yield record


def offline_history(path: str | Path) -> list[dict]:
    """The logged rows (``history`` records) in order, ``{key: value}`` with ``_step``."""
    return [
        {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
        for r in records(path)
        if r.WhichOneof("record_type") == "history"
    ]

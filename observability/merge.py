"""Batches handed over by ``emit`` -> one batch per table, converted once by the background writer.

The training thread only snapshots a batch (``snapshot``: numeric arrays and lists copied, so the
caller may reuse its buffers) and queues it. At flush time the writer joins a table's queued
batches column by column (``merge_batches``) and converts and validates the result with one
``build_table`` call: a flush's eight or so steps of ``tokens`` rows cost one conversion instead
of eight, run back to back on a warm cache instead of between the step's torch kernels. When the
batches cannot be joined exactly (different column sets, dtypes or kinds, broadcast scalars next to
arrays) ``merge_batches`` returns None and the writer converts them one by one; it does the same
when the merged batch fails validation, so only the offending batch is rejected. A column that
every batch gives as the same scalar (a run's tokenizer revision, the engine) stays one scalar,
broadcast once at conversion instead of converted row by row; scalars that differ between batches
become per-batch lists.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from observability.convert import SCALARS, column_length, is_torch, torch_to_numpy
from observability.schema import TableSpec


def snapshot(table: str, columns: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``columns`` that later in-place writes by the caller cannot change.

    CPU tensors and numpy arrays are copied (a CUDA tensor raises ValueError naming the column),
    lists and tuples become new lists, Arrow arrays and scalars are immutable and kept.
    """
    out: dict[str, Any] = {}
    for name, values in columns.items():
        if is_torch(values):
            where = f"telemetry table {table!r} column {name!r}"
            values = np.array(torch_to_numpy(values, where), copy=True)
        elif isinstance(values, np.ndarray):
            values = values.copy()
        elif isinstance(values, list | tuple):
            values = list(values)
        out[name] = values
    return out


_SCALAR_TYPES = (*SCALARS, type(None))


def _same_scalar(parts: list[Any]) -> bool:
    """True if every part is the same broadcast scalar (same type, equal value)."""
    first = parts[0]
    if not isinstance(first, _SCALAR_TYPES):
        return False
    kind = type(first)
    return all(type(p) is kind and (p is first or p == first) for p in parts)


def _length(batch: dict[str, Any]) -> int:
    """Rows of a checked batch: its first column that is not a broadcast scalar, else 1."""
    for values in batch.values():
        n = column_length(values)
        if n is not None:
            return n
    return 1


def _part(values: Any) -> Any:
    """One batch's column as something joinable: a 1+-D ndarray, a list or an Arrow array."""
    if isinstance(values, np.ndarray):
        return values if values.ndim >= 1 else None
    if isinstance(values, list):
        return values
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    if isinstance(values, pa.Array):
        return values
    return None  # a scalar to broadcast: join only in the one-batch case


def merge_batches(spec: TableSpec, batches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Join snapshotted batches of ``spec``'s table row-wise; None if they cannot be joined exactly.

    Exact means the joined batch converts to the same rows as the batches one by one: every batch
    has the same columns, and each column is, in every batch, an array of one dtype and row shape,
    a list, an Arrow array of one type, or a scalar (kept when every batch gives the same one,
    else repeated into a list per batch). Each batch's own lengths were checked by ``emit``.
    """
    if len(batches) == 1:
        return batches[0]
    names = batches[0].keys()
    if any(b.keys() != names for b in batches):
        return None
    out: dict[str, Any] = {}
    for name in names:
        values = [b[name] for b in batches]
        if _same_scalar(values):
            out[name] = values[0]
            continue
        parts = [_part(v) for v in values]
        if all(p is None and isinstance(v, _SCALAR_TYPES) for p, v in zip(parts, values)):
            parts = [[v] * _length(b) for v, b in zip(values, batches)]  # differing scalars
        first = parts[0]
        if any(p is None for p in parts):  # a scalar next to arrays
            return None
        if isinstance(first, np.ndarray):
            if not all(
                isinstance(p, np.ndarray)
                and p.dtype == first.dtype
                and p.shape[1:] == first.shape[1:]
                for p in parts
            ):
                return None
            out[name] = np.concatenate(parts)
        elif isinstance(first, list):
            if not all(isinstance(p, list) for p in parts):
                return None
            out[name] = list(itertools.chain.from_iterable(parts))
        else:
            if not all(isinstance(p, pa.Array) and p.type == first.type for p in parts):
                return None
            out[name] = pa.concat_arrays(parts)
    if all(isinstance(v, _SCALAR_TYPES) for v in out.values()):
        return None  # every column one scalar: the joined length would be lost
    return out

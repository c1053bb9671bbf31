"""The small-batch path: a few rows of Python values, screened in Python and converted in one call.

Most tables a training step emits are small and built from Python lists — one ``steps`` row of
~30 scalars, a handful of ``weight_syncs`` phases, a few dozen ``memory_events``. Converting and
checking them column by column costs ~100 pyarrow/numpy calls per step, and right after the
step's torch kernels those calls run cache-cold (measured ~4x slower than in a warm loop). Here
each value is screened against its column's rules with plain Python comparisons and the batch
is converted by one ``pa.array`` call over a struct of all its columns (~2.5x cheaper than
``pa.Table.from_pydict``, which converts column by column).

This is a screen, not a second validator: whenever a value could break a rule (or is of a kind
the screen does not reason about), ``screen_small`` returns None and the caller takes the
general path (``convert`` + ``validate``), which raises the canonical error naming table, column
and row. A batch accepted here is one the general path would accept, with the same contents.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from observability.convert import is_torch, json_strings
from observability.schema import table_spec
from observability.spec import ColumnSpec, TableSpec

SMALL_ROWS = 32
"""Largest batch (rows) the small-batch path takes (a step's ``samples`` at the default 8 × 8)."""

FLOAT32_MAX = 3.4028234663852886e38
_PLAIN = (int, float, str, bool, type(None))


def _values_ok(spec: ColumnSpec, values: list, vocab_size: int | None) -> bool:
    """True if no value of ``values`` can break ``spec``'s rules (elements for list columns)."""
    if spec.is_list:
        if not spec.nullable and any(v is None for v in values):
            return False
        if not all(isinstance(v, (list, tuple, type(None))) for v in values):
            return False
        flat = [e for v in values if v is not None for e in v]
        kinds = str if pa.types.is_string(spec.value_type) else (int, float)
        return all(isinstance(e, kinds) for e in flat) and _values_ok(
            spec.element_spec, flat, vocab_size
        )
    if pa.types.is_timestamp(spec.type):
        return True  # datetimes: ``screen_small`` already sent epoch numbers to _epoch_micros
    if spec.json:
        return all(isinstance(v, (str, dict, type(None))) for v in values)
    if not all(isinstance(v, _PLAIN) for v in values):
        return False
    if not spec.nullable and any(v is None for v in values):
        return False
    if spec.enum is not None:
        codes = spec.enum_codes
        return all(v is None or v in codes for v in values)
    if not spec.is_numeric:
        return True
    present = [v for v in values if v is not None]
    if not all(isinstance(v, (int, float)) for v in present):
        return False  # e.g. a string in a numeric column: the general path names it
    if pa.types.is_floating(spec.type):
        if spec.type == pa.float32() and any(abs(v) > FLOAT32_MAX for v in present):
            return False  # would round to ±inf in the column
        if spec.finite and not all(math.isfinite(v) for v in present):
            return False
    elif any(isinstance(v, float) for v in present):
        return False  # a float in an integer column: let the general path judge it
    if spec.min is not None and any(v < spec.min for v in present):
        return False
    if spec.max is not None and any(v > spec.max for v in present):
        return False
    if spec.below_vocab and vocab_size is not None and any(v >= vocab_size for v in present):
        return False
    return True


@functools.lru_cache(maxsize=64)
def _struct_type(table: str, names: tuple[str, ...], epoch: tuple[bool, ...]) -> pa.DataType:
    """One struct type over the batch's columns (epoch-second timestamps travel as int64 µs)."""
    spec = table_spec(table)
    fields = [
        pa.field(name, pa.int64()) if is_epoch else spec.column(name).arrow_field
        for name, is_epoch in zip(names, epoch, strict=True)
    ]
    return pa.struct(fields)


def _epoch_micros(values: list) -> list | None:
    """Epoch seconds -> integer µs exactly as ``convert`` does (round half to even; NaN -> null)."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return [None if v != v else round(v * 1e6) for v in values]


def screen_small(
    spec: TableSpec, given: Mapping[str, Any], n: int, vocab_size: int | None
) -> dict[str, pa.Array] | None:
    """Typed arrays for a small batch of Python values whose every value passes its column's
    rules, or None (the general path then converts, validates and raises).

    Args:
        given: column name -> Python list of ``n`` values, or a Python scalar (broadcast).
        n: the batch length (``<= SMALL_ROWS``).
    """
    if n > SMALL_ROWS:
        return None
    names, lists, epoch = [], [], []
    for name, values in given.items():
        col = spec.column(name)
        if isinstance(values, np.ndarray) or is_torch(values):
            if values.ndim != 1 or col.is_list or pa.types.is_timestamp(col.type):
                return None
            if is_torch(values):
                if values.device.type != "cpu":
                    return None  # the general path names the device
                values = values.detach()
            values = values.tolist()
        if isinstance(values, list):
            if len(values) != n:
                return None
        elif isinstance(values, _PLAIN + (datetime, dict)):
            values = [values] * n
        else:
            return None  # pyarrow arrays and other array-likes: the general path
        is_epoch = pa.types.is_timestamp(col.type) and not all(
            isinstance(v, datetime) for v in values
        )
        if is_epoch:
            values = _epoch_micros(values)
            if values is None or (not col.nullable and None in values):
                return None
        elif not _values_ok(col, values, vocab_size):
            return None
        names.append(name)
        lists.append(json_strings(values) if col.json else values)
        epoch.append(is_epoch)
    struct = _struct_type(spec.name, tuple(names), tuple(epoch))
    rows = [dict(zip(names, row, strict=True)) for row in zip(*lists, strict=True)]
    try:
        arrays = dict(zip(names, pa.array(rows, type=struct).flatten(), strict=True))
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return None
    for name, is_epoch in zip(names, epoch, strict=True):
        if is_epoch:
            arrays[name] = arrays[name].cast(spec.column(name).type)
    return arrays

"""Array-likes -> typed Arrow arrays for one schema column, without per-row Python.

Accepted inputs: pyarrow arrays, numpy arrays, CPU torch tensors (bf16/fp16 widened to fp32),
Python lists, and scalars (broadcast to the batch length). List columns take lists of lists or a
2-D array/tensor [N, k]. Time columns take epoch seconds (floats), datetime64 or datetimes. JSON
columns take strings or dicts (serialised with ``json.dumps``: the one per-row step, samples-sized).
Enum columns also take integer codes (index into the enum tuple): the fast path for per-token
tensors, ~10x cheaper than numpy unicode arrays.
Numeric data is always copied, so the caller may reuse its buffers after ``emit`` returns.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from observability.schema import ColumnSpec

SCALARS = (int, float, bool, str, bytes, dict, np.generic)


def is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def torch_to_numpy(t: Any, where: str) -> np.ndarray:
    if t.device.type != "cpu":
        raise ValueError(f"{where}: tensor on {t.device}; move it to the CPU before emit")
    t = t.detach()
    if t.dtype.is_floating_point and t.element_size() < 4:
        t = t.float()  # bf16 / fp16 have no (bf16) or lossy numpy views
    return t.numpy()


def column_length(values: Any) -> int | None:
    """Rows in ``values``, or None for a scalar that will be broadcast."""
    if type(values) is list:  # the common case first: emit checks every column of every batch
        return len(values)
    if values is None or isinstance(values, SCALARS):
        return None
    if is_torch(values) or isinstance(values, np.ndarray):
        if values.ndim == 0:
            return None
        return int(values.shape[0])
    return len(values)


def _numpy(values: Any, where: str) -> np.ndarray | None:
    if is_torch(values):
        return torch_to_numpy(values, where)
    if isinstance(values, np.ndarray):
        return values
    return None


def _timestamps(values: Any, spec: ColumnSpec, where: str) -> pa.Array:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_timestamp(values.type):
            return values.cast(spec.type)
        values = values.to_numpy(zero_copy_only=False)
    a = _numpy(values, where)
    if a is None:
        a = np.asarray(values)
    if a.dtype.kind in "iuf":  # epoch seconds; NaN -> null
        seconds = a.astype(np.float64)
        nan = np.isnan(seconds)
        micros = np.rint(np.where(nan, 0.0, seconds) * 1e6).astype(np.int64)
        return pa.array(micros, type=pa.int64(), mask=nan).cast(spec.type)
    if a.dtype.kind == "M":
        return pa.array(a).cast(spec.type)
    return pa.array(list(values)).cast(spec.type)  # datetime objects


def json_strings(values: Any) -> list:
    """JSON column values as strings (dicts serialised with sorted keys; strings and None kept)."""
    return [v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values]


def _list_array(values: Any, spec: ColumnSpec, where: str) -> pa.Array:
    a = _numpy(values, where)
    if a is not None and a.ndim == 2:  # [N, k] -> N lists of k
        n, k = a.shape
        offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
        flat = pa.array(np.ascontiguousarray(a).reshape(-1).copy())
        return pa.ListArray.from_arrays(offsets, flat.cast(spec.value_type))
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        arr = values
    else:
        arr = pa.array(list(a) if a is not None else values)
    return arr.cast(spec.type)


def enum_codes(values: Any, spec: ColumnSpec, where: str) -> np.ndarray | None:
    """``values`` as an array of integer codes for ``spec``'s enum, or None when ``spec`` is no
    enum or ``values`` are not an integer array/tensor (strings, lists: converted as values)."""
    if spec.enum is None:
        return None
    a = _numpy(values, where)
    return a if a is not None and a.dtype.kind in "iu" else None


def _enum_from_codes(codes: np.ndarray, spec: ColumnSpec, where: str) -> pa.Array:
    bad = (codes < 0) | (codes >= len(spec.enum))
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"{where}: enum code {codes[row]} at row {row} is not in [0, {len(spec.enum)}) "
            f"(codes index {list(spec.enum)})"
        )
    return spec.enum_array.take(pa.array(codes.astype(np.int32))).cast(spec.type)


def _cast_error_row(src: pa.Array, spec: ColumnSpec) -> int | None:
    """First row that cannot be stored in an integer column, found vectorized (else None)."""
    numeric = pa.types.is_integer(src.type) or pa.types.is_floating(src.type)
    if not (pa.types.is_integer(spec.type) and numeric):
        return None
    info = np.iinfo(spec.type.to_pandas_dtype())
    lo, hi = info.min, info.max
    if pa.types.is_floating(src.type):  # int64's bounds are not exact doubles: compare as floats
        lo, hi = float(lo), float(hi)
    bad = pc.or_(pc.less(src, lo), pc.greater(src, hi))
    if pa.types.is_floating(src.type):
        bad = pc.or_(bad, pc.not_equal(src, pc.floor(src)))
    i = pc.index(pc.fill_null(bad, False), True).as_py()
    return None if i < 0 else i


def _list_fast(values: list, spec: ColumnSpec) -> pa.Array | None:
    """A Python list converted straight to the column type in one ``pa.array`` call, or None.

    Lossy or impossible conversions raise inside pyarrow; they return None and take the general
    path (convert, then cast), which names the offending row. Non-int values for an integer column
    go there too: pyarrow would truncate a Python float silently.
    """
    try:
        if pa.types.is_integer(spec.type):  # infer first: pyarrow truncates Python floats
            arr = pa.array(values)  # into integer types silently (1.5 -> 1); bools infer bool
            if not (pa.types.is_integer(arr.type) or pa.types.is_null(arr.type)):
                return None
            return arr.cast(spec.type)  # a safe cast: overflow raises
        return pa.array(values, type=spec.type)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return None


def to_arrow(values: Any, spec: ColumnSpec, n: int, where: str) -> pa.Array:
    """Convert ``values`` (n rows, or a scalar) to an Arrow array of ``spec.type``.

    ``where`` prefixes error messages (``"telemetry table 'x' column 'y'"``). Raises ValueError
    when the values cannot be represented (wrong kind, integer overflow, fractional integers).
    """
    if values is None:
        return pa.nulls(n, type=spec.type)
    if column_length(values) is None:  # scalar: convert once, then broadcast
        if is_torch(values):
            values = torch_to_numpy(values, where).item()
        elif isinstance(values, np.ndarray | np.generic):
            values = values.item()
        one = to_arrow([values], spec, 1, where)  # a one-element list: the list fast path
        return one if n == 1 else one.take(np.zeros(n, dtype=np.int32))
    try:
        if spec.is_list:
            return _list_array(values, spec, where)
        if pa.types.is_timestamp(spec.type):
            if (
                isinstance(values, list)
                and values
                and isinstance(values[0], datetime)
                and (direct := _list_fast(values, spec)) is not None
            ):
                return direct  # datetime objects in one call (numbers are epoch seconds, below)
            return _timestamps(values, spec, where)
        if (codes := enum_codes(values, spec, where)) is not None:
            return _enum_from_codes(codes, spec, where)
        if spec.json and not isinstance(values, (pa.Array, pa.ChunkedArray)):
            values = json_strings(values)
        elif isinstance(values, list) and (direct := _list_fast(values, spec)) is not None:
            return direct
        a = _numpy(values, where)
        if a is not None:
            target = spec.type.to_pandas_dtype() if not pa.types.is_string(spec.type) else None
            if target is not None and a.dtype != object and np.can_cast(a.dtype, target, "safe"):
                return pa.array(a.astype(target))  # astype copies: the caller may reuse buffers
            src = pa.array(a.copy() if a.dtype != object else a)
        elif isinstance(values, pa.ChunkedArray):
            src = values.combine_chunks()
        elif isinstance(values, pa.Array):
            src = values
        else:
            src = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{where}: cannot convert to {spec.type}: {e}") from e
    try:
        return src.cast(spec.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        row = _cast_error_row(src, spec)
        at = f" at row {row} (value {src[row].as_py()!r})" if row is not None else ""
        raise ValueError(f"{where}: cannot store as {spec.type}{at}: {e}") from e

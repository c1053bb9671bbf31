"""Producer columns -> a typed Arrow table of one telemetry table, checked by the column rules.

A column value is (a) a numpy array or CPU torch tensor [n] (bf16/fp16 widened to fp32), (b) a
Python or numpy scalar or str, broadcast, (c) None: all null, (d) a ``numpy.ma.MaskedArray`` whose
masked entries are null, (e) for string columns a list or ndarray of str, (f) for enum columns
strings or integer codes (index into the enum tuple), (g) for list columns a 2-D array [n, k] (a
2-D ``MaskedArray`` leaves masked entries out of their row's list) or a list of lists. Times:
datetimes, datetime64 or epoch seconds; JSON: str or dict; Python lists and pyarrow arrays also.
``snapshot`` runs in ``emit``; ``join``, ``to_table`` and ``violation`` on the writer thread.
Enum codes and repeated strings travel dictionary-encoded (a byte a row, no strings built).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import date, datetime
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from observability.buffer_pool import BufferPool
from observability.rules import first_violation, table_rules
from observability.sampling import keep_tokens_for
from observability.schema import ColumnSpec, TableSpec, table_spec

SCALARS = (int, float, bool, str, bytes, dict, datetime, date, np.generic)
_SCALARS: dict[tuple, pa.Array] = {}  # converted scalars by (column spec id, type, value)


def is_torch(x: Any) -> bool:  # without importing torch
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _numpy(t: Any, where: str) -> np.ndarray:
    """A CPU tensor as numpy (a view; bf16 / fp16 as a new fp32 array)."""
    if t.device.type != "cpu":
        raise ValueError(f"{where}: tensor on {t.device}; move it to the CPU before emit")
    t = t.detach()
    if t.dtype.is_floating_point and t.element_size() < 4:
        t = t.float()
    return t.numpy()


def column_length(values: Any) -> int | None:
    """Rows in ``values``, or None for a scalar to broadcast (None included)."""
    if values is None or isinstance(values, SCALARS):
        return None
    if isinstance(values, np.ndarray) or is_torch(values):
        return None if values.ndim == 0 else int(values.shape[0])
    return len(values)


@lru_cache(maxsize=256)
def _checked(table: str, names: tuple[str, ...]) -> TableSpec:
    """``table``'s spec once the column names passed (cached per column set; failures raise)."""
    spec = table_spec(table)
    unknown = sorted(n for n in names if not spec.has_column(n))
    if unknown:
        raise ValueError(
            f"telemetry table {table!r}: unknown columns {unknown}; columns: {list(spec.column_names)}"
        )
    if "run_id" in names:
        raise ValueError(f"telemetry table {table!r} column 'run_id': filled in by the sink")
    missing = [
        c.name
        for c in spec.columns
        if not c.nullable and c.name not in names and c.name not in ("run_id", "rank")
    ]
    if missing:
        raise ValueError(f"telemetry table {table!r}: missing required columns {missing}")
    return spec


def check_batch(table: str, columns: Mapping[str, Any]) -> tuple[TableSpec, int]:
    """The structural checks ``emit`` runs at once: known table and columns, required columns
    present, equal lengths, 2-D only for list columns. Returns the spec and the batch length."""
    spec = _checked(table, tuple(columns))
    lengths = {}
    for name, values in columns.items():
        if (m := column_length(values)) is not None:
            lengths[name] = m
        ndim = getattr(values, "ndim", None)
        if ndim is not None and ndim > 1 and not spec.column(name).is_list:
            raise ValueError(f"telemetry table {table!r} column {name!r}: {ndim}-D, expected 1-D")
    if len(set(lengths.values())) > 1:
        raise ValueError(f"telemetry table {table!r}: columns have different lengths {lengths}")
    return spec, next(iter(lengths.values()), 1)


def snapshot(
    table: str, columns: Mapping[str, Any], pool: BufferPool | None = None
) -> tuple[dict[str, Any], list[np.ndarray]]:
    """``columns`` with every array copied (the caller may reuse its buffers once ``emit``
    returns; tensors as numpy), and the pool buffers used."""
    pool = pool or BufferPool(max_bytes=0)
    out: dict[str, Any] = {}
    used: list[np.ndarray] = []
    for name, values in columns.items():
        if is_torch(values):
            values = _numpy(values, f"telemetry table {table!r} column {name!r}")
        if isinstance(values, np.ma.MaskedArray):
            mask = np.ma.getmaskarray(values)
            data = pool.copy(np.ma.getdata(values), used)
            values = np.ma.MaskedArray(data, mask=pool.copy(mask, used), copy=False)
        elif isinstance(values, np.ndarray):
            values = pool.copy(values, used)
        elif isinstance(values, list | tuple):
            values = list(values)
        out[name] = values
    return out, used


def _micros(seconds: np.ndarray, mask: np.ndarray | None) -> pa.Array:
    """Epoch seconds -> timestamp microseconds (NaN -> null)."""
    s = seconds.astype(np.float64)
    nan = np.isnan(s) if mask is None else np.isnan(s) | mask
    return pa.array(np.rint(np.where(nan, 0.0, s) * 1e6).astype(np.int64), mask=nan)


def _bad_row(a: np.ndarray, col: ColumnSpec) -> int | None:
    """First value of ``a`` that an integer column cannot hold (out of range, fractional)."""
    if not (pa.types.is_integer(col.type) and a.dtype.kind in "iuf"):
        return None
    info = np.iinfo(col.type.to_pandas_dtype())
    bad = (a < info.min) | (a > info.max)
    if a.dtype.kind == "f":
        bad |= ~np.isfinite(a) | (a != np.floor(a))
    return int(np.argmax(bad)) if bad.any() else None


def _from_numpy(a: np.ndarray, col: ColumnSpec, mask: np.ndarray | None, where: str) -> pa.Array:
    """A 1-D array (``mask``: True = null) as ``col``'s type."""
    if pa.types.is_timestamp(col.type):
        if a.dtype.kind == "M":
            return pa.array(a.astype("datetime64[us]"), mask=mask).cast(col.type)
        if a.dtype.kind in "iuf":
            return _micros(a, mask).cast(col.type)
    if col.enum is not None and a.dtype.kind in "iu":
        if len(a) and (a.min() < 0 or a.max() >= len(col.enum)):
            row = int(np.argmax((a < 0) | (a >= len(col.enum))))
            raise ValueError(
                f"{where}: enum code {a[row]} at row {row} is not in [0, {len(col.enum)}) "
                f"(codes index {list(col.enum)})"
            )
        return pa.DictionaryArray.from_arrays(
            pa.array(a.astype(np.int8, copy=False), mask=mask), col.enum_array
        )
    if pa.types.is_string(col.type) or a.dtype.kind in "OUS" or col.json:
        values = a.tolist() if a.dtype.kind == "O" and col.json else a
        return _from_list(values if mask is None else np.ma.array(a, mask=mask).tolist(), col)
    target = np.dtype(col.type.to_pandas_dtype())
    if a.dtype == target or np.can_cast(a.dtype, target, "safe"):
        return pa.array(a.astype(target, copy=False), mask=mask)
    try:
        return pa.array(a, mask=mask).cast(col.type)  # safe: overflow and truncation raise
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        row = _bad_row(np.where(mask, 0, a) if mask is not None else a, col)
        at = f" at row {row} (value {a[row].item()!r})" if row is not None else ""
        raise ValueError(f"{where}: cannot store as {col.type}{at}: {e}") from e


def _from_list(values: Any, col: ColumnSpec) -> pa.Array:
    if col.json:
        values = [v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True)
                  for v in values]  # fmt: skip
    if pa.types.is_timestamp(col.type) and any(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    ):
        return _micros(np.array([np.nan if v is None else v for v in values]), None).cast(col.type)
    if col.enum is not None and type(values) is list and all(type(v) is int for v in values):
        return _from_numpy(np.asarray(values), col, None, "")
    if pa.types.is_integer(col.value_type):  # pyarrow would truncate Python floats silently
        arr = pa.array(values)
        if not (pa.types.is_integer(arr.type) or pa.types.is_null(arr.type) or col.is_list):
            raise ValueError(f"values of type {arr.type} for an integer column")
        return arr.cast(col.type)
    return pa.array(values, type=col.type)


def _list_column(a: np.ndarray, mask: np.ndarray | None, col: ColumnSpec) -> pa.Array:
    """[n, k] -> n lists of k (a masked entry is left out of its row's list)."""
    n, k = a.shape
    if mask is None:
        offsets, flat = np.arange(0, n * k + 1, k, dtype=np.int32), a.reshape(-1)
    else:
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum((~mask).sum(axis=1), out=offsets[1:])
        flat = a[~mask]
    values = _from_numpy(np.ascontiguousarray(flat), ColumnSpec("", col.value_type, ""), None, "")
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def to_arrow(values: Any, col: ColumnSpec, n: int, where: str) -> pa.Array:
    """One column value (see the module docstring) as ``n`` rows of ``col``'s type."""
    try:
        if values is None:
            return pa.nulls(n, type=col.type)
        if isinstance(values, pa.Array | pa.ChunkedArray):
            arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
            return arr if arr.type == col.type else arr.cast(col.type)
        if is_torch(values):
            values = _numpy(values, where)
        if column_length(values) is None:  # a scalar: one row, repeated
            if isinstance(values, np.ndarray | np.generic):
                values = values.item()
            key = (id(col), type(values), values) if not isinstance(values, dict) else None
            if (one := _SCALARS.get(key)) is None:  # a run's scalars recur every step
                one = to_arrow([values], col, 1, where)
                if key is not None and len(_SCALARS) < 4096:
                    _SCALARS[key] = one
            if pa.types.is_string(one.type):  # n strings: one value and n 1-byte codes
                return _repeated(one, n)
            return one if n == 1 else pa.repeat(one[0], n)
        if isinstance(values, np.ndarray):
            mask = np.ma.getmask(values) if isinstance(values, np.ma.MaskedArray) else None
            data = np.ma.getdata(values)
            mask = None if mask is None or mask is np.ma.nomask or not mask.any() else mask
            if col.is_list and data.ndim == 2:
                return _list_column(data, mask, col)
            if col.is_list or data.dtype.kind == "O" and not col.json:
                return _from_list(np.ma.array(data, mask=mask).tolist(), col)
            return _from_numpy(data, col, mask, where)
        return _from_list(list(values), col)
    except (ValueError, pa.ArrowException, TypeError, OverflowError) as e:
        if str(e).startswith(where):
            raise
        raise ValueError(f"{where}: cannot convert to {col.type}: {e}") from e


def join(batches: list[tuple[dict[str, Any], int]]) -> tuple[dict[str, Any], int] | None:
    """Snapshots of one table with the same columns as one (arrays and lists concatenated, a
    scalar all share kept, differing scalars repeated per row), or None if a column differs in
    kind: a flush then converts a table once instead of once a batch."""
    first = batches[0][0]
    if len(batches) == 1 or any(b.keys() != first.keys() for b, _ in batches):
        return batches[0] if len(batches) == 1 else None
    out, lengths = {}, [n for _, n in batches]
    for name, v0 in first.items():
        vs = [b[name] for b, _ in batches]
        kind = type(v0)
        if kind in (np.ndarray, np.ma.MaskedArray) and all(
            type(v) is kind and v.dtype == v0.dtype and v.shape[1:] == v0.shape[1:] for v in vs
        ):
            out[name] = np.ma.concatenate(vs) if kind is np.ma.MaskedArray else np.concatenate(vs)
        elif kind is list and all(type(v) is list for v in vs):
            out[name] = [x for v in vs for x in v]
        elif all(column_length(v) is None and not isinstance(v, dict) for v in vs):
            if all(type(v) is kind and (v is v0 or v == v0) for v in vs):
                out[name] = v0
            elif all(type(v) in (int, float, np.int64, np.float64) for v in vs):
                out[name] = np.repeat(np.asarray(vs), lengths)
            else:
                out[name] = [v for v, n in zip(vs, lengths, strict=True) for _ in range(n)]
        else:
            return None
    return out, sum(lengths)


def _exempt(v: Any, col: ColumnSpec) -> bool:
    """True when conversion alone proves the rules: enum codes without nulls."""
    plain = isinstance(v, np.ndarray) and not isinstance(v, np.ma.MaskedArray)
    return col.enum is not None and plain and v.dtype.kind in "iu"


def to_table(
    spec: TableSpec,
    columns: Mapping[str, Any],
    n: int,
    *,
    run_id: str,
    rank: int,
    token_sample_rate: float = 1.0,
) -> tuple[pa.Table, tuple[str, ...]]:
    """A checked batch as a table with ``spec``'s full schema (sink-owned columns filled, absent
    ones null, per-token rows outside the token sample dropped), and the names of the columns
    the rules still have to check."""
    given = dict(columns)
    if spec.has_column("rank") and "rank" not in given:
        given["rank"] = rank
    where = f"telemetry table {spec.name!r}"
    arrays = {
        name: to_arrow(v, spec.column(name), n, f"{where} column {name!r}")
        for name, v in given.items()
    }
    ids = arrays.get("sample_id")
    if ids is not None and ids.null_count == 0 and (spec.per_token or spec.name == "samples"):
        keep = keep_tokens_for(ids.to_numpy(), token_sample_rate)
        if spec.per_token and not keep.all():
            arrays = {name: a.filter(pa.array(keep)) for name, a in arrays.items()}
            n = int(keep.sum())
        if spec.name == "samples" and "tokens_sampled" not in arrays:
            arrays["tokens_sampled"] = pa.array(keep)
    arrays["run_id"] = _repeated(pa.array([run_id]), n)
    out = [arrays[c.name] if c.name in arrays else _nulls(n, c.type) for c in spec.columns]
    check = tuple(k for k, v in given.items() if not _exempt(v, spec.column(k)))
    return pa.Table.from_arrays(out, schema=_schema(spec.name, tuple(a.type for a in out))), check


def _repeated(one: pa.Array, n: int) -> pa.DictionaryArray:
    """``n`` copies of a one-element string array, dictionary-encoded (no n strings built)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int8)), one)


_nulls = lru_cache(maxsize=256)(pa.nulls)  # cached: batches of one size recur every step


@lru_cache(maxsize=256)
def _schema(table: str, types: tuple[pa.DataType, ...]) -> pa.Schema:
    """The table's schema with the types the arrays travel as: strings may be dictionary-encoded
    (enum codes, repeated values); parts store them as strings (``parts.PartWriter``)."""
    spec = table_spec(table)
    if types == tuple(spec.arrow_schema.types):
        return spec.arrow_schema
    return pa.schema(
        [
            pa.field(c.name, t, nullable=c.nullable)
            for c, t in zip(spec.columns, types, strict=True)
        ],
        metadata=spec.arrow_schema.metadata,
    )


def unify(tables: list[pa.Table], spec: TableSpec) -> pa.Table:
    """Batches of one table as one table (dictionary-encoded strings decoded where the batches
    disagree on a column's type)."""
    if len({t.schema for t in tables}) > 1:
        tables = [t.cast(spec.arrow_schema) for t in tables]
    return pa.concat_tables(tables)


def violation(
    table: pa.Table, spec: TableSpec, check: tuple[str, ...], vocab_size: int | None
) -> Callable[[], tuple[str, int] | None]:
    """Start checking ``table``'s ``check`` columns against their rules (in polars' threads); the
    returned function gives (error message, row) for the first row breaking one, or None. The
    message names table, column, rule, row, the row's sample_id or step, and the value."""
    rules = tuple(r for r in table_rules(spec.name, vocab_size) if r.column in check)
    names = sorted({r.column for r in rules})
    found = first_violation(pl.from_arrow(table.select(names)), rules) if names else lambda: None

    def message() -> tuple[str, int] | None:
        if (hit := found()) is None:
            return None
        rule, row = hit
        ident = next((c for c in ("sample_id", "step") if c in table.column_names), None)
        tag = "" if ident is None else f" ({ident} {table[ident][row].as_py()})"
        value = table[rule.column][row].as_py()
        return (
            f"telemetry table {spec.name!r} column {rule.column!r}: {rule.violation} at row "
            f"{row}{tag}: value {value!r}",
            row,
        )

    return message


def build_table(
    table: str,
    columns: Mapping[str, Any],
    *,
    run_id: str,
    rank: int,
    vocab_size: int | None = None,
    token_sample_rate: float = 1.0,
) -> pa.Table:
    """Check, convert and validate one batch for ``table`` (ValueError naming table, column,
    rule, row and sample on bad input); the typed table (maybe 0 rows)."""
    spec, n = check_batch(table, columns)
    out, check = to_table(
        spec, columns, n, run_id=run_id, rank=rank, token_sample_rate=token_sample_rate
    )
    bad = violation(out, spec, check, vocab_size)()
    if bad is not None:
        raise ValueError(bad[0])
    return out.cast(spec.arrow_schema)

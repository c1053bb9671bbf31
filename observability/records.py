"""One emitted columnar batch -> a validated Arrow table with the full schema of its table.

Steps: reject unknown tables/columns and mismatched lengths, fill sink-owned columns (run_id,
rank, samples.tokens_sampled), convert and check the columns — small batches of Python values
through one screened conversion (``smallbatch``), the rest column by column (``convert``, then
``validate``) — drop per-token rows of samples outside the token sample, and null-fill absent
nullable columns.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from observability.convert import column_length, enum_codes, to_arrow
from observability.sampling import keep_tokens_for
from observability.schema import TableSpec, table_spec
from observability.smallbatch import screen_small
from observability.validate import check_column


@functools.lru_cache(maxsize=16)
def _constant_string(value: str, n: int) -> pa.Array:
    """``n`` copies of ``value`` (cached: batches of one size recur every step; arrays are immutable)."""
    return pa.array([value], type=pa.string()).take(np.zeros(n, dtype=np.int32))


@functools.lru_cache(maxsize=256)
def _nulls(type_: pa.DataType, n: int) -> pa.Array:
    """An all-null column (cached like ``_constant_string``)."""
    return pa.nulls(n, type=type_)


def _batch_length(spec: TableSpec, columns: Mapping[str, Any]) -> int:
    n = None
    for values in columns.values():
        m = column_length(values)
        if m is None or m == n:
            continue
        if n is not None:
            lengths = {k: column_length(v) for k, v in columns.items()}
            lengths = {k: v for k, v in lengths.items() if v is not None}
            raise ValueError(
                f"telemetry table {spec.name!r}: columns have different lengths {lengths}"
            )
        n = m
    return 1 if n is None else n


@functools.lru_cache(maxsize=256)
def _checked_columns(table: str, names: tuple[str, ...]) -> TableSpec:
    """``table``'s spec once ``names`` passed the column checks (cached per column set: a
    training loop emits the same few sets every step; failures raise and are not cached)."""
    spec = table_spec(table)
    unknown = sorted(name for name in names if not spec.has_column(name))
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
    """The cheap structural checks of a batch: known table and columns, no ``run_id``, required
    columns present, equal lengths. Returns the table's spec and the batch length. ``emit`` runs
    these on the calling thread even when conversion is left to the background writer."""
    spec = _checked_columns(table, tuple(columns))
    return spec, _batch_length(spec, columns)


def build_table(
    table: str,
    columns: Mapping[str, Any],
    *,
    run_id: str,
    rank: int,
    vocab_size: int | None = None,
    token_sample_rate: float = 1.0,
) -> pa.Table:
    """Validate one batch for ``table`` and return it as a typed ``pa.Table`` (maybe 0 rows).

    ``columns`` maps column name -> array-like [N] or scalar (broadcast). Raises ValueError naming
    the table, the column and the first offending row's sample_id (or step).
    """
    spec, n = check_batch(table, columns)
    given = dict(columns)
    if spec.has_column("rank") and "rank" not in given:
        given["rank"] = rank
    arrays = screen_small(spec, given, n, vocab_size)  # None unless small and clearly valid
    screened = arrays is not None
    from_codes: set[str] = set()  # enum columns given as codes: ``to_arrow`` range-checks them
    if not screened:
        where = f"telemetry table {table!r}"
        from_codes = {
            name for name, v in given.items() if enum_codes(v, spec.column(name), where) is not None
        }
        arrays = {
            name: to_arrow(values, spec.column(name), n, f"{where} column {name!r}")
            for name, values in given.items()
        }
    ids = arrays.get("sample_id")
    if ids is not None and ids.null_count == 0:
        keep = keep_tokens_for(ids.to_numpy(), token_sample_rate)
        if spec.per_token and not keep.all():
            mask = pa.array(keep)
            arrays = {name: arr.filter(mask) for name, arr in arrays.items()}
            n = int(keep.sum())
        if table == "samples" and "tokens_sampled" not in arrays:
            arrays["tokens_sampled"] = pa.array(keep)
    row_col = "sample_id" if "sample_id" in arrays else "step" if "step" in arrays else None
    row_ids = (row_col, arrays[row_col]) if row_col else None
    if not screened:  # the small-batch screen already proved every rule
        for name, arr in arrays.items():
            if name in from_codes:
                continue  # no nulls, every code in range: nothing left to check
            check_column(table, spec.column(name), arr, row_ids=row_ids, vocab_size=vocab_size)
    arrays["run_id"] = _constant_string(run_id, n)
    out = [arrays[c.name] if c.name in arrays else _nulls(c.type, n) for c in spec.columns]
    return pa.Table.from_arrays(out, schema=spec.arrow_schema)

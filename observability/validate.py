"""Vectorized checks of one typed column against its ``ColumnSpec`` rules.

Each rule builds a boolean violation mask with ``pyarrow.compute`` and reports only the first
offending row, naming table, column, row, the row's ``sample_id`` (or ``step``) and the value.
Simplification: the first failing rule wins; list columns are checked element-wise and the
element is mapped back to its row with ``list_parent_indices``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from observability.schema import ColumnSpec


def first_true(mask: pa.Array) -> int | None:
    """Index of the first true in a boolean mask (nulls count as false), or None."""
    if not pc.any(mask).as_py():  # the common case, ~10x cheaper than index()
        return None
    return pc.index(pc.fill_null(mask, False), True).as_py()


def _violations(
    spec: ColumnSpec, values: pa.Array, vocab_size: int | None
) -> Iterator[tuple[str, pa.Array]]:
    """(rule, violation mask) for each rule ``values`` breaks, most basic rule first.

    Bounds are screened with one ``min_max`` pass; masks are built only for failing rules.
    """
    if spec.enum is not None:
        allowed = pc.is_in(values, value_set=pa.array(spec.enum, type=pa.string()))
        bad = pc.and_(pc.invert(allowed), pc.is_valid(values))
        yield f"not one of {list(spec.enum)}", bad
    numeric = pa.types.is_integer(spec.value_type) or pa.types.is_floating(spec.value_type)
    if not numeric or len(values) == values.null_count:
        return
    if spec.finite and pa.types.is_floating(spec.value_type):
        yield "not finite", pc.invert(pc.is_finite(values))
    mm = pc.min_max(values)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if spec.min is not None and lo < spec.min:
        yield f"below the minimum {spec.min}", pc.less(values, spec.min)
    if spec.max is not None and hi > spec.max:
        yield f"above the maximum {spec.max}", pc.greater(values, spec.max)
    if spec.below_vocab and vocab_size is not None and hi >= vocab_size:
        yield f"outside the vocabulary [0, {vocab_size})", pc.greater_equal(values, vocab_size)


def check_column(
    table: str,
    spec: ColumnSpec,
    values: pa.Array,
    *,
    row_ids: tuple[str, pa.Array] | None,
    vocab_size: int | None,
) -> None:
    """Raise ValueError on the first rule ``values`` [N] break; ``row_ids`` names rows in messages.

    ``row_ids`` is ``(column name, array [N])``, e.g. ``("sample_id", ...)``, or None.
    """
    where = f"telemetry table {table!r} column {spec.name!r}"

    def fail(rule: str, row: int, value: object) -> None:
        ident = f" ({row_ids[0]} {row_ids[1][row].as_py()})" if row_ids is not None else ""
        raise ValueError(f"{where}: {rule} at row {row}{ident}: value {value!r}")

    if not spec.nullable and values.null_count:
        row = first_true(pc.is_null(values))
        fail("null in a non-nullable column", row, None)
    if spec.is_list:
        elements = pc.list_flatten(values)
        parents = pc.list_parent_indices(values)
        for rule, mask in _violations(spec, elements, vocab_size):
            i = first_true(mask)
            if i is not None:
                fail(f"element {rule}", parents[i].as_py(), values[parents[i].as_py()].as_py())
        return
    for rule, mask in _violations(spec, values, vocab_size):
        i = first_true(mask)
        if i is not None:
            fail(rule, i, values[i].as_py())

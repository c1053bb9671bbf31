"""pandera ``DataFrameModel`` per telemetry table, derived from ``observability.schema`` (polars).

Design. One model class per (table, vocab size), built programmatically from the ``ColumnSpec``s:
the Arrow type maps to a polars dtype (timestamps keep unit and zone, lists their element type);
``strict = True`` (no column outside the schema); non-nullable columns reject nulls; ``enum``
becomes ``isin``; integer bounds become ``Field(ge=, le=)`` and ``below_vocab`` adds
``lt=vocab_size``; float bounds are custom checks that let NaN through (as the writer does; NaN
is the ``finite`` rule's business); ``finite`` rejects NaN and ±inf; list bounds apply to every
element. Nulls pass value checks (``ignore_na``). Deliberately left out: JSON validity of JSON
columns and key uniqueness (cross-row rules belong to the SQL checks).
"""

from __future__ import annotations

from functools import lru_cache

import pandera.polars as pa
import polars as pl
import pyarrow

from observability.schema import TABLES, ColumnSpec, table_spec


def polars_dtype(t: pyarrow.DataType) -> pl.DataType:
    """The polars dtype a column of Arrow type ``t`` reads as."""
    if pyarrow.types.is_list(t):
        return pl.List(polars_dtype(t.value_type))
    if pyarrow.types.is_timestamp(t):
        return pl.Datetime(t.unit, t.tz)
    return pl.from_arrow(pyarrow.array([], type=t)).dtype


def _is_int(spec: ColumnSpec) -> bool:
    return pyarrow.types.is_integer(spec.value_type)


def _is_float(spec: ColumnSpec) -> bool:
    return pyarrow.types.is_floating(spec.value_type)


def _bounds_expr(col: pl.Expr, spec: ColumnSpec, vocab_size: int | None) -> pl.Expr | None:
    """True where ``col`` (scalar values) is within the spec's bounds (NaN passes), else None."""
    conds = []
    if spec.min is not None:
        conds.append(col >= spec.min)
    if spec.max is not None:
        conds.append(col <= spec.max)
    if spec.below_vocab and vocab_size is not None:
        conds.append(col < vocab_size)
    if not conds:
        return None
    ok = pl.all_horizontal(conds)
    return ok | col.is_nan() if _is_float(spec) else ok


def _bound_label(spec: ColumnSpec, vocab_size: int | None) -> str:
    parts = []
    if spec.min is not None:
        parts.append(f">= {spec.min:g}")
    if spec.max is not None:
        parts.append(f"<= {spec.max:g}")
    if spec.below_vocab and vocab_size is not None:
        parts.append(f"< vocab_size {vocab_size}")
    return " and ".join(parts)


def _custom_checks(spec: ColumnSpec, vocab_size: int | None) -> dict:
    """Check methods (name -> classmethod) for rules ``Field`` cannot express."""
    checks = {}
    if spec.finite and _is_float(spec):

        def finite(cls, data: pa.PolarsData) -> pl.LazyFrame:
            return data.lazyframe.select(pl.col(data.key).is_finite())

        checks[f"_finite_{spec.name}"] = pa.check(spec.name, name="finite")(finite)
    label = _bound_label(spec, vocab_size)
    if spec.is_list and (_is_int(spec) or _is_float(spec)):
        element_ok = _bounds_expr(pl.element(), spec, vocab_size)
        if element_ok is not None:

            def elements(cls, data: pa.PolarsData, ok=element_ok) -> pl.LazyFrame:
                return data.lazyframe.select(pl.col(data.key).list.eval(ok).list.all())

            checks[f"_elements_{spec.name}"] = pa.check(spec.name, name=f"elements {label}")(
                elements
            )
    elif _is_float(spec) and _bounds_expr(pl.col("x"), spec, vocab_size) is not None:

        def bounds(cls, data: pa.PolarsData) -> pl.LazyFrame:
            return data.lazyframe.select(_bounds_expr(pl.col(data.key), spec, vocab_size))

        checks[f"_bounds_{spec.name}"] = pa.check(spec.name, name=label)(bounds)
    return checks


def _field(spec: ColumnSpec, vocab_size: int | None):
    kwargs: dict = {"nullable": spec.nullable}
    if spec.enum is not None:
        kwargs["isin"] = list(spec.enum)
    if _is_int(spec) and not spec.is_list:
        if spec.min is not None:
            kwargs["ge"] = int(spec.min)
        if spec.max is not None:
            kwargs["le"] = int(spec.max)
        if spec.below_vocab and vocab_size is not None:
            kwargs["lt"] = int(vocab_size)
    return pa.Field(**kwargs)


@lru_cache(maxsize=64)
def model_for(table: str, vocab_size: int | None = None) -> type[pa.DataFrameModel]:
    """The pandera model of ``table``; ``vocab_size`` enables the token-id rules."""
    spec = table_spec(table)
    namespace: dict = {"__annotations__": {}, "__module__": __name__}
    for col in spec.columns:
        namespace["__annotations__"][col.name] = polars_dtype(col.type)
        namespace[col.name] = _field(col, vocab_size)
        namespace.update(_custom_checks(col, vocab_size))

    class Config:
        strict = True
        name = f"closedloop.{table}"

    namespace["Config"] = Config
    name = "".join(p.title() for p in table.split("_")) + "Model"
    return type(name, (pa.DataFrameModel,), namespace)


MODELS = {name: model_for(name) for name in TABLES}
"""Every table's model without the vocabulary rule (for docs, dashboards and notebooks)."""

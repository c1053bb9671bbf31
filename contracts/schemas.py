"""pandera ``DataFrameModel`` per telemetry table, derived from ``observability.schema`` (polars).

Design. One model class per (table, vocab size), built programmatically: the Arrow type maps to a
polars dtype (timestamps keep unit and zone, lists their element type), ``strict = True`` (no
column outside the schema), and the column rules are ``observability.rules`` — the same rules, as
the same polars expressions, that the writer applies to every batch: ``not_null`` becomes the
field's ``nullable``, every other rule a check named after it (``>= 0``, ``finite``,
``isin([...])``, ``elements >= 0``). Deliberately left out: JSON validity of JSON columns and key
uniqueness (cross-row rules belong to the SQL checks).
"""

from __future__ import annotations

from functools import lru_cache

import pandera.polars as pa
import polars as pl
import pyarrow

from observability.rules import Rule, column_rules
from observability.schema import TABLES, table_spec


def polars_dtype(t: pyarrow.DataType) -> pl.DataType:
    """The polars dtype a column of Arrow type ``t`` reads as."""
    if pyarrow.types.is_list(t):
        return pl.List(polars_dtype(t.value_type))
    if pyarrow.types.is_timestamp(t):
        return pl.Datetime(t.unit, t.tz)
    return pl.from_arrow(pyarrow.array([], type=t)).dtype


def _check(rule: Rule):
    """The pandera check method of one rule (its polars expression over the column)."""

    def check(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(rule.ok(pl.col(data.key)))

    return pa.check(rule.column, name=rule.name)(check)


@lru_cache(maxsize=64)
def model_for(table: str, vocab_size: int | None = None) -> type[pa.DataFrameModel]:
    """The pandera model of ``table``; ``vocab_size`` enables the token-id rules."""
    spec = table_spec(table)
    namespace: dict = {"__annotations__": {}, "__module__": __name__}
    for col in spec.columns:
        rules = column_rules(col, vocab_size)
        namespace["__annotations__"][col.name] = polars_dtype(col.type)
        nullable = not any(r.kind == "not_null" for r in rules)
        namespace[col.name] = pa.Field(nullable=nullable)
        for r in rules:
            if r.kind != "not_null":
                namespace[f"_{r.kind}_{col.name}"] = _check(r)

    class Config:
        strict = True
        name = f"closedloop.{table}"

    namespace["Config"] = Config
    name = "".join(p.title() for p in table.split("_")) + "Model"
    return type(name, (pa.DataFrameModel,), namespace)


MODELS = {name: model_for(name) for name in TABLES}
"""Every table's model without the vocabulary rule (for docs, dashboards and notebooks)."""

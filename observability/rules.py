"""The column rules: derived once from the schema's ``ColumnSpec``s, read by every checker.

``table_rules(table, vocab_size)`` lists a table's rules (per column in ``KINDS`` order, the most
basic first); the writer evaluates them on each batch (``first_violation``, one polars pass),
``contracts/schemas.py`` turns each into a pandera check with the same polars expression, and
``violation_sql`` gives the same rule as a DuckDB predicate. Kinds:
``not_null``, ``enum``, ``finite``, ``min``, ``max`` (inclusive) and ``below_vocab`` (< the run's
``vocab_size``). Nulls pass every rule but ``not_null``; NaN passes bounds (``finite`` judges it);
list columns apply the value rules to every element. Simplification: the first failing row per
rule is what a checker reports (the pandera models report them all).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import polars as pl
import pyarrow as pa

from observability.schema import ColumnSpec, table_spec

KINDS = ("not_null", "enum", "finite", "min", "max", "below_vocab")


@dataclass(frozen=True)
class Rule:
    """One rule of one column."""

    column: str
    kind: str
    """One of ``KINDS``."""
    value: Any = None
    """The bound (``min``, ``max``, ``below_vocab``) or the allowed values (``enum``)."""
    floating: bool = False
    """Float values: NaN passes the bounds."""
    is_list: bool = False
    """The rule applies to every element of a list column."""

    @property
    def name(self) -> str:
        """What passes, as checkers name the rule: ``>= 0``, ``finite``, ``isin([...])``."""
        v = self.value
        label = (
            "not_nullable" if self.kind == "not_null"
            else f"isin({list(v)})" if self.kind == "enum"
            else f">= {v}" if self.kind == "min"
            else f"<= {v}" if self.kind == "max"
            else f"< vocab_size {v}" if self.kind == "below_vocab"
            else "finite"
        )  # fmt: skip
        return f"elements {label}" if self.is_list and self.kind != "not_null" else label

    @property
    def violation(self) -> str:
        """What fails, for error messages: ``below the minimum 0``, ``not finite``."""
        v = self.value
        text = (
            "null in a non-nullable column" if self.kind == "not_null"
            else f"not one of {list(v)}" if self.kind == "enum"
            else f"below the minimum {v}" if self.kind == "min"
            else f"above the maximum {v}" if self.kind == "max"
            else f"outside the vocabulary [0, {v})" if self.kind == "below_vocab"
            else "not finite"
        )  # fmt: skip
        return f"element {text}" if self.is_list and self.kind != "not_null" else text

    def ok(self, col: pl.Expr | None = None) -> pl.Expr:
        """Boolean expression, never null: True where a row passes (``col`` default: the column)."""
        col = pl.col(self.column) if col is None else col
        if self.kind == "not_null":
            return col.is_not_null()
        if self.is_list:
            element = self._scalar_ok(pl.element())
            return col.list.eval(element).list.all() | col.is_null()
        return self._scalar_ok(col)

    def _scalar_ok(self, x: pl.Expr) -> pl.Expr:
        if self.kind == "enum":
            return x.is_in(list(self.value)) | x.is_null()
        if self.kind == "finite":
            return x.is_finite() | x.is_null()
        passes = {"min": x >= self.value, "max": x <= self.value, "below_vocab": x < self.value}
        ok = passes[self.kind] | x.is_null()
        return ok | x.is_nan() if self.floating else ok

    def violation_sql(self, col: str | None = None) -> str:
        """DuckDB predicate, true where a row violates the rule (NULL where it passes a null)."""
        col = col or '"' + self.column.replace('"', '""') + '"'
        if self.kind == "not_null":
            return f"{col} IS NULL"
        if self.is_list:
            return f"list_bool_or(list_transform({col}, x -> {self._scalar_sql('x')}))"
        return self._scalar_sql(col)

    def _scalar_sql(self, x: str) -> str:
        if self.kind == "enum":
            return f"{x} NOT IN ({', '.join(repr(v) for v in self.value)})"
        if self.kind == "finite":
            return f"NOT isfinite({x})"
        op = {"min": "<", "max": ">", "below_vocab": ">="}[self.kind]
        bad = f"{x} {op} {self.value!r}"
        return f"({bad} AND NOT isnan({x}))" if self.floating else bad


def column_rules(col: ColumnSpec, vocab_size: int | None = None) -> tuple[Rule, ...]:
    """The rules of one column (``below_vocab`` only when ``vocab_size`` is known)."""
    kinds = dict(floating=pa.types.is_floating(col.value_type), is_list=col.is_list)
    rules = [] if col.nullable else [Rule(col.name, "not_null")]
    if col.enum is not None:
        rules.append(Rule(col.name, "enum", col.enum, **kinds))
    if col.finite:  # before the bounds: +inf is reported as not finite
        rules.append(Rule(col.name, "finite", **kinds))
    for kind in ("min", "max"):
        if getattr(col, kind) is not None:
            rules.append(Rule(col.name, kind, getattr(col, kind), **kinds))
    if col.below_vocab and vocab_size is not None:
        rules.append(Rule(col.name, "below_vocab", int(vocab_size), **kinds))
    return tuple(rules)


@lru_cache(maxsize=128)
def table_rules(table: str, vocab_size: int | None = None) -> tuple[Rule, ...]:
    """Every rule of ``table``, in column order."""
    return tuple(r for col in table_spec(table).columns for r in column_rules(col, vocab_size))


def first_violation(
    frame: pl.DataFrame, rules: tuple[Rule, ...]
) -> Callable[[], tuple[Rule, int] | None]:
    """Start one polars pass over the rules' columns (in polars' own threads, so the caller can
    work meanwhile); the returned function waits for it and gives the earliest row of ``frame``
    breaking one of ``rules`` (ties: the first rule) with the rule, or None."""
    rules = tuple(r for r in rules if r.column in frame.columns)
    if not rules or frame.height == 0:
        return lambda: None
    firsts = [(~r.ok()).arg_true().first().alias(str(i)) for i, r in enumerate(rules)]
    query = frame.lazy().select(firsts).collect(background=True)

    def result() -> tuple[Rule, int] | None:
        found = [(row, i) for i, row in enumerate(query.fetch_blocking().row(0)) if row is not None]
        return None if not found else (rules[min(found)[1]], int(min(found)[0]))

    return result

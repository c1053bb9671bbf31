"""``ColumnSpec`` and ``TableSpec``: how the telemetry schema (``observability.schema``) is described.

A column is an Arrow type plus the value rules the writer enforces and ``contracts/`` turns into
pandera fields. Bounds are inclusive; for list columns they apply to the elements.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 1
"""Bumped when a column changes meaning or type; stored in every ``runs`` row and part file."""


@dataclass(frozen=True)
class ColumnSpec:
    """One column: Arrow type, nullability and the value rules the writer and contracts enforce."""

    name: str
    type: pa.DataType
    """Arrow type of the stored column (list types: ``pa.list_(element)``)."""
    doc: str
    nullable: bool = True
    """Whether null is allowed (algorithms that do not produce a value leave it null)."""
    enum: tuple[str, ...] | None = None
    """Allowed string values, or None for free text."""
    min: float | None = None
    """Inclusive lower bound (elements for list columns); NaN passes bounds, see ``finite``."""
    max: float | None = None
    """Inclusive upper bound (elements for list columns)."""
    below_vocab: bool = False
    """Value must be < the run's ``vocab_size`` (checked when the run declares one)."""
    finite: bool = False
    """NaN and +/-inf are rejected."""
    dictionary: bool = False
    """Parquet dictionary encoding (only for low-cardinality columns: ids, steps, enums)."""
    json: bool = False
    """A JSON document stored as a string (the writer serialises dicts)."""

    @property
    def arrow_field(self) -> pa.Field:
        return pa.field(self.name, self.type, nullable=self.nullable)

    @property
    def is_list(self) -> bool:
        return pa.types.is_list(self.type)

    @property
    def value_type(self) -> pa.DataType:
        """The element type of a list column, else the column type."""
        return self.type.value_type if self.is_list else self.type


@dataclass(frozen=True)
class TableSpec:
    """One table: ordered columns, the columns identifying a row, and whether token sampling applies."""

    name: str
    doc: str
    columns: tuple[ColumnSpec, ...]
    key: tuple[str, ...]
    """Columns that identify a row (documentation and contracts; not enforced by the writer)."""
    per_token: bool = False
    """Rows belong to single tokens of a sample: ``token_sample_rate`` applies (by ``sample_id``)."""

    @property
    def arrow_schema(self) -> pa.Schema:
        meta = {"closedloop.table": self.name, "closedloop.schema_version": str(SCHEMA_VERSION)}
        return pa.schema([c.arrow_field for c in self.columns], metadata=meta)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def dictionary_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.dictionary]

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"table {self.name!r} has no column {name!r}")

    def empty_table(self) -> pa.Table:
        """A typed table with zero rows (what an unused table reads as)."""
        return self.arrow_schema.empty_table()

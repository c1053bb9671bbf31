"""``ColumnSpec`` and ``TableSpec``: how the telemetry schema (``observability.schema``) is described.

A column is an Arrow type plus the value rules the writer enforces and ``contracts/`` turns into
pandera fields. Bounds are inclusive; for list columns they apply to the elements.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

SCHEMA_VERSION = 6
"""Bumped when a column changes meaning or type, or tables and columns are added; stored in every
``runs`` row and part file. Version 2 (async agentic RL): the ``turns`` table; per-token ``turn``
and ``kv_version``; per-sample ``worker``, ``env_latency_s``, ``refill``,
``policy_version_rollout_max``; per-step queue, worker and failure counts. Version 3 (critic and
compaction): per-token ``value``, ``return``, ``segment``; the ``compactions`` table; per-step
value loss, explained variance, critic updates, frozen-parameter checksum and the policy-loss
denominator. Version 4 (teachers and mixed rewards): the ``teacher_routes`` table; per-token
``teacher_prefix_hash``; per-step teacher payload, bytes, KL, distill loss and judge–verifier
agreement; ``reward_components`` values may be null (a component that could not score).
Version 5 (other trainers' loss internals): per-token ``clip_low``, ``clip_high`` and
``is_weight``. Version 6 (teacher provenance, step size): per route the teacher's trained domains, source
and config hashes, the student's source and the declared source; per step the update norm
‖Δθ‖₂ and the parameter norm ‖θ‖₂. Readers open older runs
(missing columns and tables read as null / empty)."""

KNOWN_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6)
"""Versions a reader of this schema can open."""


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

    # Derived attributes are cached per instance (the writer asks for them ~100 times a step).
    @cached_property
    def arrow_field(self) -> pa.Field:
        return pa.field(self.name, self.type, nullable=self.nullable)

    @cached_property
    def is_list(self) -> bool:
        return pa.types.is_list(self.type)

    @cached_property
    def value_type(self) -> pa.DataType:
        """The element type of a list column, else the column type."""
        return self.type.value_type if self.is_list else self.type

    @cached_property
    def element_spec(self) -> ColumnSpec:
        """The rules of one element of a list column (nullable; itself for a scalar column)."""
        if not self.is_list:
            return self
        return dataclasses.replace(self, type=self.value_type, nullable=True)

    @cached_property
    def is_numeric(self) -> bool:
        """Integer or floating values (elements for list columns)."""
        return pa.types.is_integer(self.value_type) or pa.types.is_floating(self.value_type)

    @cached_property
    def enum_array(self) -> pa.Array | None:
        """The enum values as a string array (code i -> ``enum_array[i]``), or None."""
        return None if self.enum is None else pa.array(self.enum, type=pa.string())

    @cached_property
    def enum_codes(self) -> dict[str, int] | None:
        """Enum value -> its code (index into ``enum``), or None for free text."""
        return None if self.enum is None else {v: i for i, v in enumerate(self.enum)}


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

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        meta = {"closedloop.table": self.name, "closedloop.schema_version": str(SCHEMA_VERSION)}
        return pa.schema([c.arrow_field for c in self.columns], metadata=meta)

    @cached_property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def dictionary_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.dictionary]

    @cached_property
    def statistics_columns(self) -> list[str]:
        """Columns whose Parquet min/max statistics are written: the integer and time columns
        readers filter and join on (steps, ids, positions, versions, timestamps). String and
        float statistics are left out: they cost ~15% of a part's encoding and prune nothing."""
        return [
            c.name
            for c in self.columns
            if pa.types.is_integer(c.type) or pa.types.is_timestamp(c.type)
        ]

    @cached_property
    def _by_name(self) -> dict[str, ColumnSpec]:
        return {c.name: c for c in self.columns}

    def has_column(self, name: str) -> bool:
        return name in self._by_name

    def column(self, name: str) -> ColumnSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"table {self.name!r} has no column {name!r}") from None

    def empty_table(self) -> pa.Table:
        """A typed table with zero rows (what an unused table reads as)."""
        return self.arrow_schema.empty_table()

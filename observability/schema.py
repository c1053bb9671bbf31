"""The telemetry schema: the one source of tables, columns, Arrow types, enums and value ranges.

The writer validates and types records with it, the reader builds typed views from it,
``contracts/`` turns ``ColumnSpec`` bounds into pandera fields, dashboards and notebooks query the
column names defined here (public interface: add columns, never rename). Simplifications: bounds
are inclusive ``min``/``max`` (plus ``below_vocab``: value < the run's ``vocab_size``); for list
columns they apply to the elements; enums are stored as plain strings; time points are UTC
``timestamp[us]``, durations are float seconds.
"""

from __future__ import annotations

from types import MappingProxyType

from observability import schema_run, schema_trajectory
from observability.spec import SCHEMA_VERSION, ColumnSpec, TableSpec

__all__ = ["ENUMS", "SCHEMA_VERSION", "TABLES", "ColumnSpec", "TableSpec", "table_spec"]

# the tables live in schema_run (run-level) and schema_trajectory (per sample and token)
_BY_NAME = {t.name: t for t in schema_run.TABLES + schema_trajectory.TABLES}
_ORDER = (
    "runs",
    "steps",
    "train_logprobs",
    "samples",
    "tokens",
    "compactions",
    "turns",
    "reward_components",
    "teacher_routes",
    "topk",
    "moe_routes",
    "qparams",
    "weight_syncs",
    "memory_events",
    "memory_peaks",
    "evals",
    "contract_results",
)

TABLES: MappingProxyType[str, TableSpec] = MappingProxyType({n: _BY_NAME[n] for n in _ORDER})
"""Every telemetry table by name, in a stable order."""


ENUMS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {f"{t.name}.{c.name}": c.enum for t in TABLES.values() for c in t.columns if c.enum is not None}
)
"""Every enum column (``"table.column"``) and its allowed values."""


def table_spec(name: str) -> TableSpec:
    """The spec of ``name``; ValueError listing the valid tables on a typo."""
    try:
        return TABLES[name]
    except KeyError:
        raise ValueError(f"unknown telemetry table {name!r}; tables: {', '.join(TABLES)}") from None

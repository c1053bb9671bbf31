"""The telemetry schema's building blocks: Arrow type aliases, column constructors and the
columns many tables share (``observability.schema`` assembles the tables)."""

from __future__ import annotations

import pyarrow as pa

from observability import enums as E
from observability.spec import ColumnSpec

I16, I32, I64 = pa.int16(), pa.int32(), pa.int64()
F32, F64, STR, BOOL = pa.float32(), pa.float64(), pa.string(), pa.bool_()
TS = pa.timestamp("us", tz="UTC")


def _c(name: str, type_: pa.DataType, doc: str, **rules) -> ColumnSpec:
    return ColumnSpec(name, type_, doc, **rules)


def _enum(name: str, values: tuple[str, ...], doc: str, nullable: bool = False) -> ColumnSpec:
    return ColumnSpec(name, STR, doc, nullable=nullable, enum=values, dictionary=True)


def _frac(name: str, doc: str) -> ColumnSpec:
    return ColumnSpec(name, F64, doc + " (fraction in [0, 1])", min=0.0, max=1.0)


def _nonneg(name: str, type_: pa.DataType, doc: str, **rules) -> ColumnSpec:
    return ColumnSpec(name, type_, doc, min=0, **rules)


def _logp(name: str, doc: str) -> ColumnSpec:
    return ColumnSpec(name, F32, doc + " (finite, <= 0)", max=0.0, finite=True)


RUN_ID = _c(
    "run_id", STR, "run identifier (filled in by the sink)", nullable=False, dictionary=True
)
STEP = _nonneg("step", I64, "optimizer step", nullable=False, dictionary=True)
STEP_OPT = _nonneg("step", I64, "optimizer step, when the record belongs to one", dictionary=True)
RANK = _nonneg(
    "rank", I32, "data-parallel rank (filled in by the sink)", nullable=False, dictionary=True
)
SAMPLE_ID = _nonneg("sample_id", I64, "trajectory id, unique in the run", nullable=False)
POS = _nonneg("pos", I32, "token position in the full sequence (prompt included)", nullable=False)
POLICY_VERSION = _nonneg("policy_version", I64, "weights version", nullable=False, dictionary=True)
ENGINE = _enum("engine", E.ENGINES, "which side computed the record")
CATEGORY = _enum("category", E.MEMORY_CATEGORIES, "memory ledger category")
OWNER = _c("owner", STR, "component that owns the memory", dictionary=True)

"""Compaction: fold a run's committed parts into ``RUN_DIR/telemetry.duckdb`` for archiving and speed.

The database is built under a hidden tmp name from a snapshot of the parts, checkpointed, fsynced
and renamed over ``telemetry.duckdb``; then ``telemetry/manifest.json`` is replaced atomically.
The database lists the parts it holds in its own ``_closedloop_parts`` table, so a reader that
attaches it knows exactly which parts to skip, whatever manifest it raced with: no row is counted
twice. Parts are never rewritten; parts covered by a live merge are pruned once
``parts.PRUNE_AFTER_S`` old (a live reader may hold them). Corrupt parts are skipped with a
warning. Simplification: every compaction rebuilds from all visible parts.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from observability.parts import (
    DB_NAME,
    MANIFEST_NAME,
    PartStatus,
    atomic_write_bytes,
    check_part,
    fsync_dir,
    list_parts,
    part_key,
    prune,
    resolve_run_dir,
    telemetry_dir,
)
from observability.schema import SCHEMA_VERSION, TABLES

PARTS_TABLE = "_closedloop_parts"


def sql_str(s: str | os.PathLike) -> str:
    """A SQL string literal."""
    return "'" + str(s).replace("'", "''") + "'"


def parquet_scan(paths: list[Path]) -> str:
    """SQL scanning ``paths`` (non-empty) with schema evolution by column name."""
    return f"read_parquet([{', '.join(sql_str(p) for p in paths)}], union_by_name = true)"


def good_parts(run_dir: Path, table: str) -> list[tuple[Path, PartStatus]]:
    """Visible parts of ``table`` with their footer status; corrupt ones skipped with a warning."""
    out = []
    for path in list_parts(run_dir, table):
        status = check_part(path)
        if status.error is not None:
            warnings.warn(f"skipping corrupt telemetry part {path}: {status.error}", stacklevel=2)
            continue
        out.append((path, status))
    return out


@dataclass(frozen=True)
class CompactionResult:
    db_path: Path
    parts: int
    rows: dict[str, int]


def compact(run: str | os.PathLike) -> CompactionResult:
    """Build ``RUN_DIR/telemetry.duckdb`` from every committed part of ``run``."""
    run_dir = resolve_run_dir(run)
    if not telemetry_dir(run_dir).is_dir():
        raise ValueError(f"{run_dir} has no telemetry/ directory")
    final = run_dir / DB_NAME
    tmp = run_dir / f".{DB_NAME}.{uuid.uuid4().hex[:8]}.tmp"
    covered: list[tuple[str, str, int]] = []
    rows: dict[str, int] = {}
    try:
        con = duckdb.connect(str(tmp))
        try:
            for name, spec in TABLES.items():
                parts = good_parts(run_dir, name)
                con.register("_empty", spec.empty_table())
                select = "SELECT * FROM _empty"
                if parts:
                    select += (
                        f" UNION ALL BY NAME SELECT * FROM {parquet_scan([p for p, _ in parts])}"
                    )
                order = " ORDER BY step" if "step" in spec.column_names else ""
                con.execute(f'CREATE TABLE "{name}" AS {select}{order}')
                con.unregister("_empty")
                covered += [(name, part_key(p), s.rows) for p, s in parts]
                rows[name] = sum(s.rows for _, s in parts)
            con.register(
                "_covered",
                pa.table(
                    {
                        "table_name": [c[0] for c in covered],
                        "part": [c[1] for c in covered],
                        "rows": pa.array([c[2] for c in covered], type=pa.int64()),
                    }
                ),
            )
            con.execute(f"CREATE TABLE {PARTS_TABLE} AS SELECT * FROM _covered")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fsync_dir(run_dir)
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            leftover.unlink(missing_ok=True)
    manifest = {
        "db": DB_NAME,
        "schema_version": SCHEMA_VERSION,
        "compacted_at": time.time(),
        "rows": rows,
        "parts": sorted(c[1] for c in covered),
    }
    atomic_write_bytes(
        telemetry_dir(run_dir) / MANIFEST_NAME, json.dumps(manifest, indent=1).encode()
    )
    prune(run_dir)
    return CompactionResult(final, len(covered), rows)

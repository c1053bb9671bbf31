"""``closedloop telemetry verify``: decode every committed part and the compacted database.

Reports corrupt parts (e.g. truncated by a disk-full crash), a compacted database that does not
open, leftover tmp files from crashed writers and parts a live merge covers that are not pruned
yet (both harmless: readers never see them).
Simplification: checks readability, not the values (that is what ``contracts/`` does).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from observability.compact import PARTS_TABLE
from observability.parts import (
    DB_NAME,
    MANIFEST_NAME,
    PartStatus,
    check_part,
    list_parts,
    resolve_run_dir,
    telemetry_dir,
)
from observability.schema import TABLES


@dataclass(frozen=True)
class VerifyReport:
    run_dir: Path
    parts: int
    rows: int
    corrupt: list[PartStatus] = field(default_factory=list)
    tmp_files: list[Path] = field(default_factory=list)
    covered: int = 0
    """Parts hidden by a merged part that covers them (pruned later)."""
    db_error: str | None = None
    """Why the compacted database (named by the manifest) could not be read, if it could not."""

    @property
    def ok(self) -> bool:
        return not self.corrupt and self.db_error is None

    def lines(self) -> list[str]:
        out = [f"{self.run_dir}: {self.parts} parts, {self.rows} rows"]
        out += [f"CORRUPT {s.path}: {s.error}" for s in self.corrupt]
        if self.db_error is not None:
            out.append(f"CORRUPT {self.run_dir / DB_NAME}: {self.db_error}")
        out += [f"leftover tmp file (ignored by readers) {p}" for p in self.tmp_files]
        if self.covered:
            out.append(f"{self.covered} parts covered by merged parts (ignored by readers)")
        out.append("OK" if self.ok else "FAILED")
        return out


def _check_db(run_dir: Path) -> str | None:
    if not (telemetry_dir(run_dir) / MANIFEST_NAME).is_file():
        return None
    try:
        con = duckdb.connect(str(run_dir / DB_NAME), read_only=True)
        try:
            con.execute(f"SELECT count(*) FROM {PARTS_TABLE}").fetchall()
        finally:
            con.close()
    except duckdb.Error as e:
        return str(e)
    return None


def verify(run: str | os.PathLike, *, full: bool = True) -> VerifyReport:
    """Check every part of ``run`` (``full``: decode all pages, else footers only)."""
    run_dir = resolve_run_dir(run)
    root = telemetry_dir(run_dir)
    if not root.is_dir():
        raise ValueError(f"{run_dir} is not a telemetry run (no telemetry/ directory)")
    statuses = [check_part(p, full=full) for name in TABLES for p in list_parts(run_dir, name)]
    return VerifyReport(
        run_dir=run_dir,
        parts=len(statuses),
        rows=sum(s.rows for s in statuses if s.rows is not None),
        corrupt=[s for s in statuses if s.error is not None],
        tmp_files=sorted([*root.glob("*/.*.tmp"), *run_dir.glob(f".{DB_NAME}.*")]),
        covered=sum(len(list_parts(run_dir, name, covered=True)) for name in TABLES),
        db_error=_check_db(run_dir),
    )

"""Readers: an in-memory DuckDB connection with one typed view per telemetry table.

Each view unions a typed zero-row table (so unused tables are typed and empty), the compacted
``telemetry.duckdb`` (attached read-only, when the manifest names it) and every visible part it
does not cover (``parts.list_parts``: parts a live merge covers are hidden). Parts are scanned in
groups of one schema each (plain multi-file scans; ``union_by_name`` only across groups, for
parts of older writers). Views are a snapshot of the files present at ``open_run``/``refresh``
time: a live reader calls ``refresh(con)`` (cheap) or reopens to see newer parts; a snapshot stays
readable for ``parts.PRUNE_AFTER_S`` of live merges. ``runs`` keeps the latest status row per
run; ``runs_history`` has them all. Corrupt parts are skipped with a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import duckdb

from observability.compact import PARTS_TABLE, good_parts, sql_str
from observability.parts import DB_NAME, MANIFEST_NAME, resolve_run_dir, telemetry_dir
from observability.schema import TABLES

INTERNAL_SCHEMA = "_cl"
"""Schema holding the reader's helper tables (typed empties, sources, attachments)."""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _attach_compacted(
    con: duckdb.DuckDBPyConnection, run_dir: Path, alias: str
) -> tuple[set[str], set[str]] | None:
    """Attach the run's compacted DB as ``alias``: (part keys it covers, its tables), or None."""
    manifest = telemetry_dir(run_dir) / MANIFEST_NAME
    db = run_dir / DB_NAME
    if not manifest.is_file():
        return None
    try:
        if json.loads(manifest.read_text()).get("db") != DB_NAME or not db.is_file():
            return None
        con.execute(f"ATTACH {sql_str(db)} AS {_q(alias)} (READ_ONLY)")
    except (OSError, ValueError, duckdb.Error) as e:
        warnings.warn(f"ignoring compacted telemetry {db}: {e}", stacklevel=3)
        return None
    con.execute(f"INSERT INTO {INTERNAL_SCHEMA}.attached VALUES ({sql_str(alias)})")
    parts = con.execute(f"SELECT part FROM {_q(alias)}.{PARTS_TABLE}").fetchall()
    tables = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [alias]
    ).fetchall()
    return {r[0] for r in parts}, {r[0] for r in tables}


def _build_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every view from the files present now."""
    cl = INTERNAL_SCHEMA
    for (alias,) in con.execute(f"SELECT alias FROM {cl}.attached").fetchall():
        con.execute(f"DETACH {_q(alias)}")
    con.execute(f"DELETE FROM {cl}.attached")
    gen = con.execute(f"UPDATE {cl}.state SET generation = generation + 1 RETURNING generation")
    generation = gen.fetchall()[0][0]
    run_dirs = [Path(r[0]) for r in con.execute(f"SELECT run_dir FROM {cl}.sources").fetchall()]
    dbs = {}  # run index -> (alias, covered part keys, tables)
    for i, run_dir in enumerate(run_dirs):
        alias = f"_cl_db{generation}_{i}"
        attached = _attach_compacted(con, run_dir, alias)
        if attached is not None:
            dbs[i] = (alias, *attached)
    for name in TABLES:
        selects = [f"SELECT * FROM {cl}.{_q(name)}"]
        groups: dict[str, list[Path]] = {}  # one plain scan per schema
        for i, run_dir in enumerate(run_dirs):
            covered = dbs[i][1] if i in dbs else set()
            for p, status in good_parts(run_dir, name):
                if f"{name}/{p.name}" not in covered:
                    groups.setdefault(str(status.schema), []).append(p)
        for paths in groups.values():
            files = ", ".join(sql_str(p) for p in paths)
            selects.append(f"SELECT * FROM read_parquet([{files}])")
        selects += [
            f"SELECT * FROM {_q(a)}.{_q(name)}" for a, _, tables in dbs.values() if name in tables
        ]
        view = "runs_history" if name == "runs" else name
        con.execute(f"CREATE OR REPLACE VIEW {_q(view)} AS {' UNION ALL BY NAME '.join(selects)}")
    con.execute(
        "CREATE OR REPLACE VIEW runs AS SELECT * FROM runs_history QUALIFY row_number() OVER "
        "(PARTITION BY run_id ORDER BY updated_at DESC, status = 'running') = 1"
    )


def _connect(run_dirs: list[Path]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET parquet_metadata_cache = true")  # parts are immutable once visible
    cl = INTERNAL_SCHEMA
    con.execute(f"CREATE SCHEMA {cl}")
    for name, spec in TABLES.items():
        con.register("_empty", spec.empty_table())
        con.execute(f"CREATE TABLE {cl}.{_q(name)} AS SELECT * FROM _empty")
        con.unregister("_empty")
    con.execute(f"CREATE TABLE {cl}.sources (run_dir VARCHAR)")
    con.execute(f"CREATE TABLE {cl}.attached (alias VARCHAR)")
    con.execute(f"CREATE TABLE {cl}.state AS SELECT 0 AS generation")
    if run_dirs:
        con.executemany(f"INSERT INTO {cl}.sources VALUES (?)", [[str(d)] for d in run_dirs])
    _build_views(con)
    return con


def run_dirs_under(root: str | os.PathLike) -> list[Path]:
    """``root`` itself if it is a run directory, else its sub-directories that hold telemetry."""
    root = resolve_run_dir(root)
    if telemetry_dir(root).is_dir():
        return [root]
    if not root.is_dir():
        raise ValueError(f"no telemetry runs under {root}: not a directory")
    return sorted(d for d in root.iterdir() if telemetry_dir(d).is_dir())


def open_run(path: str | os.PathLike) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with one view per telemetry table of the run at ``path``.

    ``path`` is a run directory (or its ``telemetry/`` or ``telemetry.duckdb``). Safe while the
    run is writing; the views are a snapshot, see ``refresh``.
    """
    run_dir = resolve_run_dir(path)
    if not telemetry_dir(run_dir).is_dir():
        raise ValueError(f"{run_dir} is not a telemetry run (no telemetry/ directory)")
    return _connect([run_dir])


def open_runs(root: str | os.PathLike) -> duckdb.DuckDBPyConnection:
    """Like ``open_run`` over every run directory directly under ``root`` (views union all runs)."""
    return _connect(run_dirs_under(root))


def refresh(con: duckdb.DuckDBPyConnection) -> None:
    """Re-list the files of a connection from ``open_run``/``open_runs`` so views see new parts."""
    _build_views(con)

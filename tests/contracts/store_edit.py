"""Test helpers: copy a real run and inject violations into its telemetry.

``edit_rows`` rewrites the committed Parquet parts of a table (a polars expression picks the
rows, new values replace columns) and recompacts the run so readers see only the edited rows;
``append_rows`` writes new rows through the real writer (``DuckDBTelemetry``) as new parts.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from observability import DuckDBTelemetry, TelemetryConfig, open_run
from observability.compact import compact
from observability.parts import list_parts
from observability.schema import table_spec
from observability.writer import RUN_INFO_KEYS


def copy_run(run_dir: Path, root: Path, name: str = "copy") -> Path:
    """A private copy of ``run_dir`` under ``root`` (the session runs are read-only)."""
    dst = root / f"{name}-{run_dir.name}"
    shutil.copytree(run_dir, dst)
    return dst


def query(run_dir: Path, sql: str) -> list[dict]:
    con = open_run(run_dir)
    try:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


def edit_rows(
    run_dir: Path,
    table: str,
    where: pl.Expr,
    values: dict | None = None,
    *,
    drop: bool = False,
    drop_columns: tuple[str, ...] = (),
) -> int:
    """Set ``values`` (column -> scalar) on the rows matching ``where``, or ``drop`` them;
    ``drop_columns`` removes columns from the parts that contain a matching row. Returns the
    number of matching rows; the run is recompacted afterwards."""
    spec = table_spec(table)
    n = 0
    for part in list_parts(run_dir, table):
        df = pl.read_parquet(part)
        hit = df.select(where.fill_null(False)).to_series()
        k = int(hit.sum())
        if k == 0:
            continue
        n += k
        if drop:
            df = df.filter(~hit)
        for column, value in (values or {}).items():
            dtype = df.schema[column]
            df = df.with_columns(
                pl.when(hit)
                .then(pl.lit(value, dtype=dtype))
                .otherwise(pl.col(column))
                .alias(column)
            )
        df = df.drop(list(drop_columns))
        schema = spec.arrow_schema
        for column in drop_columns:
            schema = schema.remove(schema.get_field_index(column))
        pq.write_table(df.to_arrow().select(schema.names).cast(schema), part)
    compact(run_dir)
    return n


def append_rows(run_dir: Path, tables: dict[str, dict]) -> None:
    """Emit ``{table: columns}`` into ``run_dir`` with the real writer, as new parts.

    The writer re-records the run's ``runs`` row with the same declared info (it always writes
    one at start and close); compaction is off so the new parts stay separate.
    """
    (run,) = query(run_dir, "SELECT * FROM runs")
    info = {
        k: None if isinstance(run[k], float) and math.isnan(run[k]) else run[k]
        for k in RUN_INFO_KEYS
    }
    sink = DuckDBTelemetry(
        run_dir,
        run_id=run["run_id"],
        run_info=info,
        config=TelemetryConfig(compact_on_close=False),
    )
    for table, columns in tables.items():
        sink.emit(table, columns)
    sink.close("finished")

"""Readers: typed empty views, snapshots and refresh, many runs, corrupt parts, latest run status."""

import warnings

import pyarrow.parquet as pq
import pytest

from observability import DuckDBTelemetry, TelemetryConfig, open_run, open_runs, refresh
from observability.parts import list_parts
from observability.schema import TABLES
from tests.observability.fakes import valid_columns

CFG = TelemetryConfig(flush_seconds=60, compact_on_close=False)


def write_run(root, name, n_samples, *, close="finished", run_id=None):
    tel = DuckDBTelemetry(root / name, run_id=run_id, config=CFG)
    tel.emit("samples", valid_columns(TABLES["samples"], n_samples))
    tel.flush()
    if close:
        tel.close(close)
    return tel


def test_empty_run_has_typed_empty_views(tmp_path):
    (tmp_path / "run" / "telemetry").mkdir(parents=True)  # a run whose writer never started
    con = open_run(tmp_path / "run")
    for name in TABLES:
        assert con.execute(f'SELECT count(*) FROM "{name}"').fetchall() == [(0,)]
    types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE tokens)").fetchall())
    assert types["rollout_logp"] == "FLOAT" and types["token_id"] == "INTEGER"
    assert types["step"] == "BIGINT" and types["loss_mask"] == "BOOLEAN"
    mem = dict(
        con.execute("SELECT column_name, column_type FROM (DESCRIBE memory_events)").fetchall()
    )
    assert mem["logical_shape"] == "BIGINT[]" and mem["ts"] == "TIMESTAMP WITH TIME ZONE"


def test_snapshot_then_refresh_sees_new_parts(tmp_path):
    tel = write_run(tmp_path, "run", 3, close=None)
    con = open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM samples").fetchall() == [(3,)]
    tel.emit("samples", valid_columns(TABLES["samples"], 2, start_id=3))
    tel.flush()
    assert con.execute("SELECT count(*) FROM samples").fetchall() == [(3,)]  # snapshot
    refresh(con)
    assert con.execute("SELECT count(*) FROM samples").fetchall() == [(5,)]
    assert con.execute("SELECT status FROM runs").fetchall() == [("running",)]
    tel.close()
    refresh(con)
    assert con.execute("SELECT status FROM runs").fetchall() == [("finished",)]


def test_open_runs_unions_runs_and_accepts_other_paths(tmp_path):
    write_run(tmp_path, "a", 3)
    write_run(tmp_path, "b", 4, close="failed")
    (tmp_path / "not_a_run").mkdir()
    con = open_runs(tmp_path)
    assert con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall() == [
        ("a", "finished"),
        ("b", "failed"),
    ]
    counts = con.execute("SELECT run_id, count(*) FROM samples GROUP BY ALL ORDER BY 1").fetchall()
    assert counts == [("a", 3), ("b", 4)]
    for path in (tmp_path / "a" / "telemetry", tmp_path / "a"):
        assert open_run(path).execute("SELECT count(*) FROM samples").fetchall() == [(3,)]
    assert open_runs(tmp_path / "a").execute("SELECT count(*) FROM runs").fetchall() == [(1,)]
    with pytest.raises(ValueError, match="not a telemetry run"):
        open_run(tmp_path / "not_a_run")


def test_corrupt_part_is_skipped_with_a_warning_naming_it(tmp_path):
    tel = write_run(tmp_path, "run", 3, close=None)
    tel.emit("samples", valid_columns(TABLES["samples"], 5, start_id=3))
    tel.close()
    first, second = list_parts(tmp_path / "run", "samples")
    data = second.read_bytes()
    second.write_bytes(data[: len(data) // 2])  # a disk-full crash truncated it
    with pytest.warns(UserWarning, match=f"skipping corrupt telemetry part .*{second.name}"):
        con = open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM samples").fetchall() == [
        (pq.read_metadata(first).num_rows,)
    ]


def test_tmp_files_are_invisible(tmp_path):
    write_run(tmp_path, "run", 3)
    d = tmp_path / "run" / "telemetry" / "samples"
    (d / ".part-r0000-x-0000009.parquet.tmp").write_bytes(b"PAR1 half written")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        con = open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM samples").fetchall() == [(3,)]

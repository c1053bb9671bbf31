"""Compaction and verification: no row counted twice, parts untouched, corrupt parts reported."""

import json
import subprocess
import sys

from observability import DuckDBTelemetry, TelemetryConfig, open_run, refresh
from observability.cli import main
from observability.compact import compact
from observability.parts import list_parts
from observability.schema import TABLES
from observability.verify import verify
from tests.observability.fakes import valid_columns

CFG = TelemetryConfig(flush_seconds=60, compact_on_close=False)


def counts(con):
    return {
        name: con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
        for name in ("samples", "tokens", "runs_history")
    }


def test_compaction_never_double_counts_and_keeps_old_readers_working(tmp_path):
    run = tmp_path / "run"
    tel = DuckDBTelemetry(run, config=CFG)
    for i in range(3):
        tel.emit("samples", valid_columns(TABLES["samples"], 4, start_id=4 * i))
        tel.emit("tokens", valid_columns(TABLES["tokens"], 10, start_id=4 * i))
        tel.flush()
    before = open_run(run)
    assert counts(before) == {"samples": 12, "tokens": 30, "runs_history": 1}
    parts_before = {p: p.stat().st_mtime_ns for t in TABLES for p in list_parts(run, t)}
    result = compact(run)
    assert result.rows["samples"] == 12 and result.parts == len(parts_before)
    manifest = json.loads((run / "telemetry" / "manifest.json").read_text())
    assert manifest["db"] == "telemetry.duckdb" and len(manifest["parts"]) == len(parts_before)
    after = open_run(run)
    assert counts(after) == counts(before)  # compacted DB replaces its parts, never adds to them
    assert (
        "_cl_db"
        in after.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'samples'").fetchall()[
            0
        ][0]
    )
    tel.emit("samples", valid_columns(TABLES["samples"], 5, start_id=100))  # newer than the DB
    tel.close()
    refresh(after)
    assert counts(after) == {"samples": 17, "tokens": 30, "runs_history": 2}
    assert counts(before) == {"samples": 12, "tokens": 30, "runs_history": 1}  # old snapshot intact
    compact(run)  # a second compaction covers the newer parts too
    refresh(before)
    assert counts(before) == counts(after)
    assert {p: p.stat().st_mtime_ns for p in parts_before} == parts_before  # parts untouched
    assert not list(run.glob(".telemetry.duckdb*"))  # no tmp database left behind


def test_verify_reports_corrupt_parts_and_exit_codes(tmp_path, capsys):
    run = tmp_path / "run"
    tel = DuckDBTelemetry(run, config=CFG)
    tel.emit("samples", valid_columns(TABLES["samples"], 4))
    tel.close()
    assert verify(run).ok
    assert main(["telemetry", "verify", str(run)]) == 0
    assert main(["telemetry", "compact", str(run)]) == 0
    assert "compacted 3 parts, 6 rows" in capsys.readouterr().out
    (part,) = list_parts(run, "samples")
    part.write_bytes(part.read_bytes()[:-20])
    report = verify(run)
    assert not report.ok and [s.path for s in report.corrupt] == [part]
    assert main(["telemetry", "verify", str(run)]) == 1
    assert f"CORRUPT {part}" in capsys.readouterr().out


def test_cli_module_entry_point(tmp_path):
    run = tmp_path / "run"
    DuckDBTelemetry(run, config=CFG).close()
    proc = subprocess.run(
        [sys.executable, "-m", "observability.cli", "telemetry", "verify", "--quick", str(run)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("OK")

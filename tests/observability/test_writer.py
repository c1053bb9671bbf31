"""The background writer: round trips, flush triggers, backpressure, bad input, close."""

import json
import time

import numpy as np
import pytest

from observability import DuckDBTelemetry, TelemetryConfig, open_run
from observability.parts import list_parts
from observability.records import build_table
from observability.schema import TABLES
from tests.observability.fakes import VOCAB, valid_columns

FAST = TelemetryConfig(flush_seconds=0.05, compact_on_close=False)


def canonical(rows):
    """Rows as sorted, hashable tuples (datetimes as epoch seconds) for order-free comparison."""
    out = []
    for r in rows:
        out.append(tuple((k, v.timestamp() if hasattr(v, "timestamp") else
                          tuple(v) if isinstance(v, list) else v) for k, v in sorted(r.items())))  # fmt: skip
    return sorted(out, key=repr)


def sink(tmp_path, name="run", **kw):
    kw.setdefault("config", FAST)
    kw.setdefault("run_info", {"vocab_size": VOCAB, "algorithm": "grpo"})
    return DuckDBTelemetry(tmp_path / name, **kw)


def test_every_table_round_trips(tmp_path):
    tel = sink(tmp_path)
    sent = {}
    for name, spec in TABLES.items():
        if name == "runs":
            continue
        cols = valid_columns(spec, 7, seed=1)
        tel.emit(name, cols)
        sent[name] = cols
    tel.close()
    con = open_run(tmp_path / "run")
    for name, cols in sent.items():
        got = con.sql(f'SELECT * FROM "{name}"').to_arrow_table()
        assert got.column_names == list(TABLES[name].column_names), name
        expected = build_table(name, cols, run_id="run", rank=0, vocab_size=VOCAB)
        assert canonical(got.to_pylist()) == canonical(expected.to_pylist()), name
    (run,) = con.execute("SELECT run_id, status, algorithm, vocab_size FROM runs").fetchall()
    assert run == ("run", "finished", "grpo", VOCAB)


def test_runs_rows_track_status_and_config(tmp_path):
    tel = sink(tmp_path, run_id="abc", run_info={"config": {"lr": 1e-3}, "git_sha": "deadbeef"})
    con = open_run(tmp_path / "run")
    assert con.execute("SELECT status, ended_at FROM runs").fetchall() == [("running", None)]
    tel.close("failed")
    con = open_run(tmp_path / "run")
    (status, config, ended, n) = con.execute(
        "SELECT status, config, ended_at IS NOT NULL, (SELECT count(*) FROM runs_history) FROM runs"
    ).fetchall()[0]
    assert (status, json.loads(config), ended, n) == ("failed", {"lr": 1e-3}, True, 2)
    with pytest.raises(ValueError, match=r"unknown run_info keys \['lr'\]"):
        sink(tmp_path, name="bad", run_info={"lr": 1})
    with pytest.raises(ValueError, match="close status"):
        tel.close("ok")


def test_flush_on_rows_seconds_and_step_end(tmp_path):
    rows = sink(tmp_path, name="rows", config=TelemetryConfig(flush_rows=10, flush_seconds=60))
    for i in range(3):
        rows.emit("samples", valid_columns(TABLES["samples"], 6, start_id=6 * i))
    rows.flush()
    # 6 rows pending, 12 -> part (threshold 10), 6 pending at flush() -> part: two parts.
    assert [p.name.startswith("part-r0000") for p in list_parts(tmp_path / "rows", "samples")] == [
        True
    ] * 2
    rows.close()
    timed = sink(tmp_path, name="timed", config=TelemetryConfig(flush_seconds=0.1))
    timed.emit("samples", valid_columns(TABLES["samples"], 3))
    deadline = time.monotonic() + 5
    while not list_parts(tmp_path / "timed", "samples") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(list_parts(tmp_path / "timed", "samples")) == 1  # written by the timer alone
    timed.close()
    stepped = sink(tmp_path, name="stepped", config=TelemetryConfig(flush_seconds=60))
    stepped.emit("samples", valid_columns(TABLES["samples"], 3))
    stepped.step_end(0)
    deadline = time.monotonic() + 5
    while not list_parts(tmp_path / "stepped", "samples") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(list_parts(tmp_path / "stepped", "samples")) == 1
    stepped.close()


def test_backpressure_blocks_instead_of_dropping(tmp_path, monkeypatch):
    tel = sink(
        tmp_path, config=TelemetryConfig(queue_max_batches=1, flush_rows=1, compact_on_close=False)
    )
    real_write = tel._parts.write

    def slow_write(table, spec):
        time.sleep(0.05)
        return real_write(table, spec)

    monkeypatch.setattr(tel._parts, "write", slow_write)
    t0 = time.monotonic()
    for i in range(6):
        tel.emit("samples", valid_columns(TABLES["samples"], 2, start_id=2 * i))
    # One batch in the writer + one queued: emitting 6 must wait for ~4 writes of 50 ms.
    assert time.monotonic() - t0 > 0.15
    tel.close()
    assert open_run(tmp_path / "run").execute("SELECT count(*) FROM samples").fetchall() == [(12,)]


def test_rejected_batch_keeps_earlier_data_and_the_writer_working(tmp_path):
    tel = sink(tmp_path)
    good = valid_columns(TABLES["tokens"], 4)
    tel.emit("tokens", good)
    bad = dict(good, train_logp=np.array([-1, np.nan, -1, -1], dtype=np.float32))
    with pytest.raises(
        ValueError, match=r"'tokens' column 'train_logp': not finite at row 1 \(sample_id 1\)"
    ):
        tel.emit("tokens", bad)
    tel.emit("tokens", valid_columns(TABLES["tokens"], 4, start_id=4))
    tel.close()
    con = open_run(tmp_path / "run")
    assert con.execute("SELECT count(*), count(DISTINCT sample_id) FROM tokens").fetchall() == [
        (8, 8)
    ]


def test_background_failure_surfaces_and_marks_the_run_failed(tmp_path, monkeypatch):
    tel = sink(tmp_path)

    def broken(table, spec):
        raise OSError("disk full")

    monkeypatch.setattr(tel._parts, "write", broken)
    tel.emit("samples", valid_columns(TABLES["samples"], 2))
    with pytest.raises(RuntimeError, match="telemetry writer failed: disk full"):
        tel.flush()
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="disk full"):
        tel.close()
    assert open_run(tmp_path / "run").execute("SELECT status FROM runs").fetchall() == [("failed",)]


def test_emit_after_close_and_idempotent_close(tmp_path):
    tel = sink(tmp_path)
    tel.close()
    tel.close()
    with pytest.raises(RuntimeError, match="closed"):
        tel.emit("samples", valid_columns(TABLES["samples"], 1))
    with pytest.raises(RuntimeError, match="closed"):
        tel.flush()


def test_runs_table_belongs_to_the_sink(tmp_path):
    tel = sink(tmp_path)
    with pytest.raises(ValueError, match="'runs' is written by the sink"):
        tel.emit("runs", {"status": "finished"})
    tel.close()


def test_close_compacts_on_rank_zero(tmp_path):
    tel = sink(tmp_path, config=TelemetryConfig(flush_seconds=0.05))
    tel.emit("samples", valid_columns(TABLES["samples"], 3))
    tel.close()
    assert (tmp_path / "run" / "telemetry.duckdb").is_file()
    assert open_run(tmp_path / "run").execute("SELECT count(*) FROM samples").fetchall() == [(3,)]

"""The background writer: round trips, flush triggers, backpressure, bad input, close."""

import json
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from observability import DuckDBTelemetry, TelemetryConfig, open_run
from observability.parts import list_parts, parquet_options
from observability.records import build_table
from observability.schema import TABLES
from observability.writer import RejectedBatch
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


def wait_for_parts(run, table, n=1, timeout=30.0):
    """Poll until ``table`` has ``n`` parts (the writer works asynchronously); no timing asserted."""
    deadline = time.monotonic() + timeout
    while len(list_parts(run, table)) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return list_parts(run, table)


def test_flush_on_rows_timer_and_step_end(tmp_path):
    rows = sink(tmp_path, name="rows", config=TelemetryConfig(flush_rows=10, flush_seconds=60))
    for i in range(2):
        rows.emit("samples", valid_columns(TABLES["samples"], 6, start_id=6 * i))
    # 12 rows reach flush_rows (10): written without a step end or flush()
    (part,) = wait_for_parts(tmp_path / "rows", "samples")
    assert pq.read_metadata(part).num_rows == 12
    rows.close()
    timed = sink(tmp_path, name="timed", config=TelemetryConfig(flush_seconds=0.1))
    timed.emit("samples", valid_columns(TABLES["samples"], 3))
    assert len(wait_for_parts(tmp_path / "timed", "samples")) == 1  # the writer's timer alone
    timed.close()
    stepped = sink(tmp_path, name="stepped", config=TelemetryConfig(flush_seconds=60))
    stepped.emit("samples", valid_columns(TABLES["samples"], 3))
    stepped._last_write -= 61  # the previous write is flush_seconds old: step_end writes
    stepped.step_end(0)
    assert len(wait_for_parts(tmp_path / "stepped", "samples")) == 1
    stepped.close()


def test_step_end_within_flush_seconds_of_a_write_leaves_rows_queued(tmp_path):
    tel = sink(tmp_path, config=TelemetryConfig(flush_seconds=60, compact_on_close=False))
    tel.emit("samples", valid_columns(TABLES["samples"], 3))
    tel.step_end(0)  # the sink started < 60 s ago: no write requested
    assert tel._control.qsize() == 1  # only the writer's timer start ("oldest")
    tel.close()
    assert len(list_parts(tmp_path / "run", "samples")) == 1  # written at close


class _Progress:
    """The sink's progress queue, flagging when ``emit`` waits on it (backpressure)."""

    def __init__(self, real):
        self.real, self.waiting = real, threading.Event()

    def get(self, timeout=None):
        self.waiting.set()
        return self.real.get(timeout=timeout)

    def put(self, item):
        self.real.put(item)


def test_backpressure_blocks_emit_until_the_writer_drains(tmp_path, monkeypatch):
    from observability import writer

    monkeypatch.setattr(writer, "MAX_QUEUED_BYTES", 1)  # any queued batch fills the queue
    tel = sink(tmp_path, config=TelemetryConfig(flush_seconds=60, compact_on_close=False))
    entered, release = threading.Event(), threading.Event()
    real_write = tel._parts.write

    def held_write(table, spec, **kw):
        entered.set()
        assert release.wait(30)
        return real_write(table, spec, **kw)

    monkeypatch.setattr(tel._parts, "write", held_write)
    tel._progress = _Progress(tel._progress)
    tel.emit("samples", valid_columns(TABLES["samples"], 2))  # queued: the queue is now full
    emitter = threading.Thread(
        target=tel.emit, args=("samples", valid_columns(TABLES["samples"], 2, start_id=2))
    )
    emitter.start()
    assert tel._progress.waiting.wait(30) and entered.wait(30)
    assert emitter.is_alive()  # blocked: the writer holds the first batch, nothing was dropped
    release.set()
    emitter.join(30)
    assert not emitter.is_alive()
    tel.close()
    assert open_run(tmp_path / "run").execute("SELECT count(*) FROM samples").fetchall() == [(4,)]


def test_rejected_batch_keeps_earlier_data_and_the_writer_working(tmp_path):
    tel = sink(tmp_path, config=TelemetryConfig(flush_seconds=60))
    good = valid_columns(TABLES["tokens"], 4)
    tel.emit("tokens", good)
    bad = dict(good, train_logp=np.array([-1, np.nan, -1, -1], dtype=np.float32))
    message = r"'tokens' column 'train_logp': not finite at row 1 \(sample_id 1\)"
    tel.emit("tokens", bad)  # queued; the writer rejects it (alone), the next call reports it
    tel.emit("tokens", valid_columns(TABLES["tokens"], 4, start_id=8))
    with pytest.raises(RejectedBatch, match=message + ".*background writer"):
        tel.flush()
    tel.flush()  # reported once
    tel.emit("tokens", valid_columns(TABLES["tokens"], 4, start_id=4))
    tel.close()
    con = open_run(tmp_path / "run")
    assert con.execute("SELECT count(*), count(DISTINCT sample_id) FROM tokens").fetchall() == [
        (12, 12)
    ]
    assert con.execute("SELECT status FROM runs").fetchall() == [("finished",)]


def test_unreported_rejection_fails_the_run_at_close(tmp_path):
    tel = sink(tmp_path, config=TelemetryConfig(flush_seconds=60, compact_on_close=False))
    good = valid_columns(TABLES["tokens"], 4)
    tel.emit("tokens", good)
    tel.emit("tokens", dict(good, token_id=np.array([0, 1, VOCAB, 2]), sample_id=np.arange(4, 8)))
    with pytest.raises(RejectedBatch, match=r"'token_id'.*sample_id 6"):
        tel.close()
    con = open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM tokens").fetchall() == [(4,)]
    assert con.execute("SELECT status FROM runs").fetchall() == [("failed",)]


def test_structural_errors_raise_at_emit(tmp_path):
    tel = sink(tmp_path)
    good = valid_columns(TABLES["tokens"], 4)
    with pytest.raises(ValueError, match="unknown columns \\['tokn_id'\\]"):
        tel.emit("tokens", dict(good, tokn_id=good["token_id"]))
    with pytest.raises(ValueError, match="different lengths"):
        tel.emit("tokens", dict(good, pos=np.arange(3)))
    with pytest.raises(ValueError, match="missing required columns \\['token_id'\\]"):
        tel.emit("tokens", {k: v for k, v in good.items() if k != "token_id"})
    with pytest.raises(ValueError, match="column 'pos': 2-D, expected 1-D"):
        tel.emit("tokens", dict(good, pos=np.zeros((4, 2))))
    tel.close()


def test_caller_may_reuse_its_buffers_after_emit(tmp_path):
    import torch

    tel = sink(tmp_path, config=TelemetryConfig(flush_seconds=60, compact_on_close=False))
    cols = valid_columns(TABLES["tokens"], 4)
    expected = cols["train_logp"].copy()
    cols["rollout_logp"] = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    cols["entropy"] = np.ma.MaskedArray([1.0, 2.0, 3.0, 4.0], mask=[0, 1, 0, 0])
    tel.emit("tokens", cols)
    cols["train_logp"][:] = np.nan  # the caller reuses its buffers for the next step
    cols["rollout_logp"][:] = 0.5
    cols["entropy"][:] = 9.0
    cols["role"][0] = "not-a-role"
    tel.close()
    got = open_run(tmp_path / "run").execute(
        "SELECT train_logp, rollout_logp, entropy FROM tokens ORDER BY sample_id"
    )
    train, rollout, entropy = zip(*got.fetchall(), strict=True)
    np.testing.assert_allclose(train, expected, rtol=1e-6)
    assert rollout == (-1.0, -2.0, -3.0, -4.0) and entropy == (1.0, None, 3.0, 4.0)


def test_background_failure_surfaces_and_marks_the_run_failed(tmp_path, monkeypatch):
    tel = sink(tmp_path)

    def broken(table, spec, **kw):
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


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"token_sample_rate": 1.5}, "token_sample_rate must be in \\[0, 1\\]"),
        ({"flush_rows": 0}, "flush_rows must be an int >= 1"),
        ({"flush_seconds": 0}, "flush_seconds must be > 0"),
    ],
)
def test_config_errors_name_the_field_and_range(kw, message):
    with pytest.raises(ValueError, match=message):
        TelemetryConfig(**kw)
    with pytest.raises(ValueError, match="unknown telemetry config keys \\['flush_row'\\]"):
        TelemetryConfig.from_dict({"flush_row": 3})
    assert len(TelemetryConfig.__dataclass_fields__) <= 4  # the sink has four knobs


def test_writer_cpu_seconds_counts_the_writer_thread_only(tmp_path):
    import time

    tel = sink(tmp_path)
    before = tel.writer_cpu_seconds()
    assert before is not None and before >= 0
    busy = time.thread_time() + 0.05
    while time.thread_time() < busy:  # CPU on the calling thread is not the writer's
        pass
    idle = tel.writer_cpu_seconds()
    assert idle - before < 0.04
    for _ in range(20):
        tel.emit("tokens", valid_columns(TABLES["tokens"], 2000))
    tel.flush()
    assert tel.writer_cpu_seconds() > idle  # converting and writing ran on the writer thread
    tel.close()
    assert tel.writer_cpu_seconds() is None  # the thread has ended


def test_parts_carry_statistics_for_integer_and_time_columns_only_and_no_dictionaries(tmp_path):
    """Readers prune parts on steps, ids, versions and times; string and float statistics cost
    ~15% of the encoding and are not written."""
    import pyarrow.parquet as pq

    tel = sink(tmp_path)
    for table in ("tokens", "memory_events"):
        tel.emit(table, valid_columns(TABLES[table], 5))
    tel.close()
    for table, with_stats, without in (
        ("tokens", {"step", "sample_id", "pos", "token_id"}, {"train_logp", "role", "run_id"}),
        ("memory_events", {"ts", "step", "bytes"}, {"object", "category", "persistent"}),
    ):
        (part,) = list_parts(tmp_path / "run", table)
        rg = pq.read_metadata(part).row_group(0)
        stats = {
            rg.column(i).path_in_schema: rg.column(i).is_stats_set for i in range(rg.num_columns)
        }
        assert all(stats[c] for c in with_stats), stats
        assert not any(stats[c] for c in without), stats
        # a live part is small: no dictionary pages; large parts dictionary-encode the
        # schema's low-cardinality columns
        assert not any(rg.column(i).has_dictionary_page for i in range(rg.num_columns))
        assert parquet_options(TABLES[table], 10**6)["use_dictionary"] == (
            TABLES[table].dictionary_columns
        )


def test_a_failed_part_write_leaves_no_tmp_file(tmp_path, monkeypatch):
    from observability import parts
    from observability.parts import PartWriter
    from observability.schema import table_spec

    def half_written(table, out, spec):
        out.write(b"PAR1 partial")
        raise OSError(28, "No space left on device")

    real_write = parts._write_parquet
    monkeypatch.setattr(parts, "_write_parquet", half_written)
    writer = PartWriter(tmp_path, rank=0)
    spec = table_spec("steps")
    with pytest.raises(OSError, match="No space left"):
        writer.write(spec.empty_table(), spec)
    assert list((tmp_path / "telemetry" / "steps").iterdir()) == []
    monkeypatch.setattr(parts, "_write_parquet", real_write)
    assert writer.write(spec.empty_table(), spec)[0].exists()  # the writer still works

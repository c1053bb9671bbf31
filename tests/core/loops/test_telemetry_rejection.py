"""A record the background writer rejects fails the run, names the field and keeps earlier rows."""

import numpy as np
import pytest

import core.driver as driver
from observability import open_run
from observability.writer import RejectedBatch


class _Corrupting:
    """Forwards to the real sink; step 1's ``tokens`` batch gets a NaN train log-prob."""

    def __init__(self, sink) -> None:
        self.sink, self.run_id, self.run_dir, self.step = sink, sink.run_id, sink.run_dir, 0

    def emit(self, table, columns) -> None:
        if table == "tokens" and self.step == 1:
            logp = columns["train_logp"]  # numpy.ma, null (masked) off the action tokens
            values = logp.copy()
            values[np.flatnonzero(~np.ma.getmaskarray(logp))[0]] = np.nan  # sample 64's first
            columns = dict(columns, train_logp=values)
        self.sink.emit(table, columns)

    def step_end(self, step: int) -> None:
        self.sink.step_end(step)
        self.step = step + 1

    def close(self, status: str = "finished") -> None:
        self.sink.close(status)


def test_rejected_record_fails_the_run_and_keeps_other_rows(tmp_path, monkeypatch):
    real_open = driver.open_telemetry
    monkeypatch.setattr(driver, "open_telemetry", lambda *a, **kw: _Corrupting(real_open(*a, **kw)))
    cfg = driver.resolve_config(None, ["train.eval_every=0", "train.eval_size=8"], steps=3)
    with pytest.raises(
        RejectedBatch, match=r"'tokens' column 'train_logp': not finite at row \d+ \(sample_id 64\)"
    ):
        driver.run_training(cfg, runs_root=tmp_path, telemetry="duckdb", progress=False)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    con = open_run(run_dir)
    assert con.execute("SELECT status FROM runs").fetchall() == [("failed",)]
    by_step = dict(con.execute("SELECT step, count(*) FROM tokens GROUP BY step").fetchall())
    assert by_step.get(0, 0) > 0 and 1 not in by_step  # only the bad batch is missing
    steps = [r[0] for r in con.execute("SELECT step FROM steps ORDER BY step").fetchall()]
    assert steps[:2] == [0, 1]

"""Two-rank telemetry is one run: both ranks in ``steps`` and the memory tables, one ``runs`` row
covering both, and the gate's ``parallel`` contract over all ranks and against a TP = 1 run."""

from __future__ import annotations

import polars as pl
import pytest

from contracts import run_gate
from observability import open_run
from tests.contracts.store_edit import copy_run, edit_rows
from tests.core.parallel.conftest import STEPS


def _rows(run_dir, sql: str) -> list[tuple]:
    con = open_run(run_dir)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _status(gate, check_id: str) -> str:
    (result,) = [r for r in gate.results if r.id == check_id]
    return result.status


@pytest.fixture(scope="module")
def runs(tp2, tp1, tp_runs):
    """(TP = 2 run, TP = 1 run) of the base model, both finished."""
    return tp_runs / "base-tp2", tp_runs / "base-tp1"


def test_two_ranks_read_as_one_run(runs):
    tp2_run, tp1_run = runs
    assert _rows(tp2_run, "SELECT status, world_size FROM runs") == [("finished", 2)]
    per_step = _rows(
        tp2_run, "SELECT step, list(rank ORDER BY rank) FROM steps GROUP BY 1 ORDER BY 1"
    )
    assert per_step == [(s, [0, 1]) for s in range(STEPS)]
    for table in ("memory_events", "memory_peaks", "train_logprobs"):
        assert _rows(tp2_run, f"SELECT DISTINCT rank FROM {table} ORDER BY 1") == [(0,), (1,)]
    # each rank's ledger holds its own shard of the model state: about half of TP = 1's
    sql = (
        "SELECT rank, max(bytes) FROM (SELECT step, rank, sum(bytes) AS bytes FROM memory_peaks "
        "WHERE category = 'model_state' GROUP BY ALL) GROUP BY rank ORDER BY rank"
    )
    (r0, b0), (r1, b1) = _rows(tp2_run, sql)
    [(_, full)] = _rows(tp1_run, sql)
    assert b0 == b1 and 0.5 * full < b0 < 0.6 * full  # norms are replicated, the rest split


def test_gate_covers_all_ranks_and_compares_tp_sizes(runs, tmp_path):
    tp2_run, tp1_run = runs
    gate = run_gate(tp2_run, baseline=tp1_run, record=False)
    assert gate.exit_code == 0, [(r.id, r.status, r.message) for r in gate.results]
    assert _status(gate, "parallel.ranks_complete") == "pass"
    assert _status(gate, "parallel.ranks_agree") == "pass"
    assert _status(gate, "parallel.tp_logprobs") == "pass"
    # a baseline whose TP = 1 log-probs moved by 1e-3 at one target fails the TP comparison
    moved = copy_run(tp1_run, tmp_path, "moved")
    where = (pl.col("step") == 0) & (pl.col("sample_id") == 3) & (pl.col("pos") == 9)
    [(logp,)] = _rows(
        moved, "SELECT logp FROM train_logprobs WHERE step = 0 AND sample_id = 3 AND pos = 9"
    )
    assert edit_rows(moved, "train_logprobs", where, {"logp": logp - 1e-3}) == 1
    assert (
        _status(run_gate(tp2_run, baseline=moved, record=False), "parallel.tp_logprobs") == "fail"
    )


def test_a_missing_or_disagreeing_rank_fails_the_gate(runs, tmp_path):
    tp2_run, _ = runs
    lost = copy_run(tp2_run, tmp_path, "lost")
    assert edit_rows(lost, "steps", (pl.col("rank") == 1) & (pl.col("step") == 2), drop=True) == 1
    assert _status(run_gate(lost, record=False), "parallel.ranks_complete") == "fail"
    split = copy_run(tp2_run, tmp_path, "split")
    where = (pl.col("rank") == 1) & (pl.col("step") == 1) & (pl.col("sample_id") == 0)
    assert edit_rows(split, "train_logprobs", where, {"logsumexp": 99.0}) > 0
    assert _status(run_gate(split, record=False), "parallel.ranks_agree") == "fail"


def test_dashboard_shows_step_time_and_memory_per_rank(runs, monkeypatch):
    from tests.dashboards.apptest import figures, run_page

    tp2_run, _ = runs
    at = run_page(monkeypatch, tp2_run.parent, [tp2_run.name], "Memory")
    assert not at.exception, [e.value for e in at.exception]
    figs = figures(at)
    for title in ("Step time per rank", "Peak memory per rank"):
        assert figs[title]["traces"] == 2 and figs[title]["points"] == 2 * STEPS, figs[title]
        assert [n.endswith(f"rank {r}") for r, n in enumerate(figs[title]["names"])] == [True] * 2

"""RunHandle: results memoised per snapshot, new parts picked up, steps read incrementally."""

from __future__ import annotations

import shutil

import pandas as pd

from dashboards import queries
from dashboards.store import RunHandle, snapshot_key
from tests.dashboards.apptest import append_steps


def test_memo_refresh_and_incremental_steps(tiny, tmp_path, monkeypatch):
    run = tmp_path / tiny.name
    shutil.copytree(tiny, run)
    calls = []
    real_steps = queries.steps
    monkeypatch.setattr(
        queries,
        "steps",
        lambda con, from_step=0: calls.append(from_step) or real_steps(con, from_step=from_step),
    )
    h = RunHandle(run)
    first = h.steps()
    assert first["step"].tolist() == [0, 1, 2] and calls == [0]
    assert h.steps()["step"].tolist() == [0, 1, 2] and calls == [0]  # unchanged: no query
    n_tokens = h.query(queries.run_info)
    assert h.query(queries.run_info) is not n_tokens  # memo hands out copies

    key = snapshot_key(run)
    append_steps(run, [2, 3, 4])
    assert snapshot_key(run) != key
    after = h.steps()
    assert calls == [0, 2]  # only steps >= the last one seen are read again
    assert after["step"].tolist() == [0, 1, 2, 3, 4]
    # step 2 now has two ranks: re-aggregated, not duplicated
    assert after.set_index("step").loc[2, "n_ranks"] == 2
    assert h.query(queries.last_step) == 4
    pd.testing.assert_frame_equal(after, real_steps(h.con), check_dtype=False)

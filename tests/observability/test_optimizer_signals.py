"""Optimizer suspects (``observability.optimizer_signals``) on hand-written ``steps`` rows: each
level derived by hand in the comments, and the suspects table names the step size."""

from __future__ import annotations

import numpy as np
import pytest

from observability import DuckDBTelemetry, TelemetryConfig, open_run
from observability import analysis as A
from observability.optimizer_signals import optimizer_levels


def _run(path, **cols):
    """One ``steps`` row per element of the per-step ``cols`` (lists of equal length)."""
    tel = DuckDBTelemetry(path, config=TelemetryConfig(compact_on_close=False))
    n = len(next(iter(cols.values())))
    for step in range(n):
        row = {k: v[step] for k, v in cols.items()}
        tel.emit("steps", {"step": step, "policy_version": step, **row})
    tel.close()
    return open_run(path)


def test_levels_golden(tmp_path):
    con = _run(
        tmp_path / "r",
        update_norm=[0.1, 0.1, 0.1, 0.8, 0.1, 0.1],
        param_norm=[100.0] * 6,  # ratio 1e-3, ×8 once (the step after the reset)
        lr=[1e-4, 1e-4, 1e-4, 1e-4, 2e-4, 4e-4],  # log2(lr / 1e-4) = 0, 0, 0, 0, 1, 2
        grad_norm=[1.0, 2.0, 3.0, 30.0, 30.0, 30.0],
        optimizer_reset=[False, False, True, False, False, False],
    )
    lv = optimizer_levels(con, A.resolve_run_id(con, None))
    np.testing.assert_allclose(lv["update_size"], [1e-3, 1e-3, 1e-3, 8e-3, 1e-3, 1e-3])
    np.testing.assert_allclose(lv["learning_rate"], [0, 0, 0, 0, 1, 2])
    # start median over the first max(3, 6 // 10) = 3 steps: median(1, 2, 3) = 2; trailing 3:
    # [1, 1.5, 2, 35/3, 21, 30] / 2
    np.testing.assert_allclose(lv["grad_norm"], np.array([1, 1.5, 2, 35 / 3, 21, 30]) / 2)
    # step 3 follows the reset: 8e-3 / median(1e-3 of the others) = 8; other steps NaN
    assert lv["adam_reset"][3] == pytest.approx(8.0) and lv["adam_reset"].drop(3).isna().all()
    t = A.rank_suspects(A.suspect_levels(con)).set_index("suspect")
    # update_size (τ 4e-3): excess [0.25 ×3, 2, 0.25 ×2], only step 3 ≥ 1: strength
    # (5·0.25 + 2)/6, earliness 1 − 3/6
    assert t.loc["update_size", "first_step"] == 3
    assert t.loc["update_size", "score"] == pytest.approx(np.log2(1 + 3.25 / 6) * 0.75)
    # grad_norm: excess max(level − 3, 0)/2 = [0, 0, 0, (35/6 − 3)/2 = 17/12, 3.75, 6]
    assert t.loc["grad_norm", "score"] == pytest.approx(np.log2(1 + (17 / 12 + 9.75) / 6) * 0.75)
    # adam_reset: (8 − 2)/2 = 3 at step 3 → strength 0.5
    assert t.loc["adam_reset", "score"] == pytest.approx(np.log2(1.5) * 0.75)
    # learning_rate: excess [0 ×4, 1, 2] → strength 0.5, first index 4 → earliness 1/3
    assert t.loc["learning_rate", "score"] == pytest.approx(np.log2(1.5) * (0.5 + 0.5 / 3))


def test_quiet_without_step_size_columns(tmp_path):
    # an imported run records no update or parameter norms: every level null, nothing moved
    con = _run(tmp_path / "r", loss=[1.0, 0.5, 0.2, 0.1])
    lv = optimizer_levels(con, A.resolve_run_id(con, None))
    assert lv[["update_size", "learning_rate", "grad_norm", "adam_reset"]].isna().all().all()
    t = A.rank_suspects(A.suspect_levels(con))
    assert not t["moved"].any()

"""Health alarms: one golden case per alarm, quiet runs stay quiet, config validation."""

from __future__ import annotations

import pandas as pd
import pytest

from dashboards.alarms import AlarmConfig, health_alarms


def steps(n=10, **cols) -> pd.DataFrame:
    base = {
        "step": range(n),
        "mismatch_abs_mean": [1e-4] * n,
        "masked_fraction": [0.0] * n,
        "degenerate_group_fraction": [0.1] * n,
        "staleness_max": [0] * n,
        "entropy": [1.0] * n,
    }
    base.update(cols)
    return pd.DataFrame(base)


def kinds(frame, **kw):
    return [a.kind for a in health_alarms(frame, **kw)]


def test_quiet_run():
    assert kinds(steps(), staleness_limit=4) == []
    assert kinds(steps().iloc[:0]) == []


def test_mismatch_rising():
    # baseline mean (steps 0-4) 1e-3, recent mean (steps 5-9) 3e-3 > 2 x 1e-3 and > floor 1e-3.
    frame = steps(mismatch_abs_mean=[1e-3] * 5 + [3e-3] * 5)
    assert kinds(frame) == ["mismatch_rising"]
    # the same 3x rise at fp32-noise level (1e-6 -> 3e-6) stays under the floor: no alarm.
    assert kinds(steps(mismatch_abs_mean=[1e-6] * 5 + [3e-6] * 5)) == []
    # fewer than 2 windows of steps: no trend alarm.
    assert kinds(frame.tail(9)) == []


def test_masked_fraction_degenerate_and_staleness():
    # recent masked mean = (0 + 0 + 0.1 + 0.1 + 0.1) / 5 = 0.06 > 0.05
    assert kinds(steps(masked_fraction=[0.0] * 7 + [0.1] * 3)) == ["masked_fraction"]
    assert kinds(steps(degenerate_group_fraction=[0.75] * 10)) == ["degenerate_groups"]
    assert kinds(steps(staleness_max=[0] * 9 + [4]), staleness_limit=4) == ["staleness_limit"]
    assert kinds(steps(staleness_max=[0] * 9 + [3]), staleness_limit=4) == []
    assert kinds(steps(staleness_max=[0] * 9 + [4])) == []  # no declared limit


def test_entropy_collapse():
    # baseline 1.0, recent 0.2 < 0.25 x 1.0
    assert kinds(steps(entropy=[1.0] * 5 + [0.2] * 5)) == ["entropy_collapse"]
    assert kinds(steps(n=3, entropy=[0.01] * 3)) == ["entropy_collapse"]  # absolute floor


def test_nan_steps_ignored():
    frame = steps(masked_fraction=[float("nan")] * 10, entropy=[float("nan")] * 10)
    assert kinds(frame) == []


@pytest.mark.parametrize(
    "field,value",
    [
        ("window", 0),
        ("mismatch_rise_factor", 1.0),
        ("masked_fraction_max", 1.5),
        ("entropy_collapse_factor", 0.0),
        ("entropy_floor", -1.0),
    ],
)
def test_config_rejects(field, value):
    with pytest.raises(ValueError, match=f"AlarmConfig.{field} must be"):
        AlarmConfig(**{field: value})

"""``FlushPacer``: hand-derived intervals, its fixed point, bounds, and the sink's use of it."""

import math
import time

import pytest

from observability import TelemetryConfig
from observability.pacing import FlushPacer
from observability.parts import list_parts
from observability.schema import TABLES
from tests.observability.fakes import valid_columns
from tests.observability.test_writer import sink


def test_interval_is_cpu_over_budget_clamped_to_base_and_ceiling():
    pacer = FlushPacer(2.0, budget=0.01, ceiling=10.0, smoothing=1.0)
    assert pacer.interval == 2.0 and pacer.stretch == 1.0 and pacer.cpu_per_flush is None
    assert pacer.record(0.005) == 2.0  # 0.5 s of budget: never below the configured interval
    assert pacer.record(0.035) == pytest.approx(3.5)  # 35 ms / 0.01
    assert pacer.stretch == pytest.approx(1.75)
    assert pacer.record(0.5) == 10.0  # 50 s: capped


def test_smoothing_is_an_exponential_average_of_cpu_per_flush():
    pacer = FlushPacer(1.0, budget=0.02, ceiling=100.0, smoothing=0.5)
    pacer.record(0.04)
    pacer.record(0.08)  # 0.5 * 0.08 + 0.5 * 0.04 = 0.06
    assert pacer.cpu_per_flush == pytest.approx(0.06) and pacer.interval == pytest.approx(3.0)
    pacer.record(float("nan"))  # an unreadable clock keeps the pace
    pacer.record(-1.0)
    assert pacer.cpu_per_flush == pytest.approx(0.06) and pacer.interval == pytest.approx(3.0)


@pytest.mark.parametrize(("fixed", "per_second"), [(0.025, 0.005), (0.010, 0.0), (0.03, 0.009)])
def test_settles_at_the_fixed_point_of_a_linear_flush_cost(fixed, per_second):
    """A flush after T seconds costs fixed + per_second * T: the interval converges to
    fixed / (budget - per_second), where the writer spends exactly its budget."""
    budget = 0.01
    pacer = FlushPacer(2.0, budget=budget, ceiling=1e9, smoothing=0.5)
    for _ in range(2000):  # contraction factor per_second / budget: up to 0.9 here
        pacer.record(fixed + per_second * pacer.interval)
    expected = max(2.0, fixed / (budget - per_second))
    assert pacer.interval == pytest.approx(expected, rel=1e-6)
    cost_share = (fixed + per_second * pacer.interval) / pacer.interval
    assert cost_share == pytest.approx(budget) if per_second else cost_share <= budget


def test_rows_costing_more_than_the_budget_stay_at_the_ceiling():
    pacer = FlushPacer(2.0, budget=0.01, ceiling=10.0)
    for _ in range(50):
        pacer.record(0.02 * pacer.interval)  # 2% per second of rows alone: no interval helps
    assert pacer.interval == 10.0


def test_zero_budget_disables_pacing_and_bad_arguments_are_named():
    pacer = FlushPacer(2.0, budget=0.0, ceiling=10.0)
    assert pacer.record(5.0) == 2.0 and pacer.cpu_per_flush == 5.0
    assert FlushPacer(5.0, budget=0.01, ceiling=1.0).ceiling == 5.0  # never below base
    with pytest.raises(ValueError, match="base must be > 0"):
        FlushPacer(0.0, budget=0.01, ceiling=1.0)
    with pytest.raises(ValueError, match=r"budget must be in \[0, 1\]"):
        FlushPacer(1.0, budget=math.nan, ceiling=1.0)
    with pytest.raises(ValueError, match=r"smoothing must be in \(0, 1\]"):
        FlushPacer(1.0, budget=0.1, ceiling=1.0, smoothing=0.0)


def test_config_names_the_pacing_fields():
    with pytest.raises(ValueError, match=r"writer_cpu_budget must be in \[0, 1\], got 1.5"):
        TelemetryConfig(writer_cpu_budget=1.5)
    with pytest.raises(ValueError, match=r"max_flush_seconds must be > 0, got nan"):
        TelemetryConfig(max_flush_seconds=math.nan)
    assert TelemetryConfig(flush_seconds=60).max_flush_seconds == 10.0  # ceiling: the larger


def test_the_sink_stretches_its_step_end_flushes_by_the_pacer(tmp_path):
    """A budget so small that any flush exceeds it: after the first flush the interval is the
    ceiling, so a step end 0.3 s later (past the unpaced 0.2 s) does not flush, and a blocking
    flush() still writes at once."""
    cfg = TelemetryConfig(
        flush_seconds=0.2,
        step_flush_min_seconds=0.2,
        writer_cpu_budget=1e-9,
        max_flush_seconds=60.0,
        compact_on_close=False,
    )
    tel = sink(tmp_path, config=cfg)
    assert tel.flush_interval_s == 0.2
    tel.emit("samples", valid_columns(TABLES["samples"], 3))
    tel.step_end(0)
    deadline = time.monotonic() + 5
    while tel.flush_interval_s == 0.2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tel.flush_interval_s == 60.0 and tel.step_flushes == 1
    tel.emit("samples", valid_columns(TABLES["samples"], 3, start_id=3))
    time.sleep(0.3)
    tel.step_end(1)
    assert tel.step_flushes == 1  # paced: the next step-end flush waits up to 60 s
    time.sleep(0.2)
    assert len(list_parts(tmp_path / "run", "samples")) == 1  # and so does the writer's own timer
    tel.flush()
    assert len(list_parts(tmp_path / "run", "samples")) == 2
    tel.close()

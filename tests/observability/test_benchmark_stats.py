"""The step-time benchmark's paired-block interval (``benchmarks/telemetry.py``)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "telemetry.py"
_spec = importlib.util.spec_from_file_location("bench_telemetry", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_identical_ratios_give_a_zero_width_interval():
    off = np.array([0.10, 0.11, 0.12, 0.09])
    ratio, low, high, share = bench.paired_ratio_ci(off * 1.05, off)
    assert ratio == pytest.approx(1.05)
    assert low == pytest.approx(1.05) and high == pytest.approx(1.05)
    assert share == 0.0  # every resample is above the 1.02 goal


def test_two_pairs_match_the_hand_derived_bootstrap_distribution():
    # pairs (1.0, 1.0) and (1.2, 1.0): a resample of two pairs has ratio 1.0, 1.1 or 1.2 with
    # probabilities 1/4, 1/2, 1/4, so 1/4 of resamples meet the goal and the 90% interval is the
    # full range
    ratio, low, high, share = bench.paired_ratio_ci([1.0, 1.2], [1.0, 1.0], n_boot=20_000)
    assert ratio == pytest.approx(1.1)
    assert (low, high) == (pytest.approx(1.0), pytest.approx(1.2))
    assert share == pytest.approx(0.25, abs=0.015)  # 20k resamples: sd 0.003


def test_the_interval_is_deterministic_for_a_seed():
    rng = np.random.default_rng(3)
    off = rng.uniform(0.1, 0.12, 10)
    on = off * rng.uniform(1.0, 1.04, 10)
    assert bench.paired_ratio_ci(on, off) == bench.paired_ratio_ci(on, off)


@pytest.mark.parametrize("on, off", [([1.0], [1.0]), ([1.0, 1.1], [1.0]), ([[1.0]], [[1.0]])])
def test_bad_block_lists_are_rejected(on, off):
    with pytest.raises(ValueError, match="paired blocks"):
        bench.paired_ratio_ci(on, off)


def test_writer_and_process_cpu_per_step_from_block_end_readings():
    from types import SimpleNamespace

    s = bench._AlternatingSink(SimpleNamespace(run_id="r", run_dir="d"), block=10)
    # writer CPU read at the end of blocks 0..4 (on, off, on, off, on); block 0 is excluded
    s.writer_cpu = {0: 1.0, 1: 1.1, 2: 2.1, 3: 2.1, 4: 3.6}
    assert s.writer_cpu_per_on_step() == pytest.approx((1.0 + 1.5) / 20)
    s.writer_cpu[3] = None  # an unreadable clock drops the on-block after it
    assert s.writer_cpu_per_on_step() == pytest.approx(1.0 / 10)
    # process CPU at each step's end: 0.2 s per on-step, 0.3 s per off-step (steps 10..19)
    t, s.process_cpu = 0.0, {}
    for i in range(30):
        t += 0.3 if (i // 10) % 2 == 1 else 0.2
        s.process_cpu[i] = t
    assert s.process_cpu_per_off_step(warm=12) == pytest.approx(0.3)  # steps 12..19

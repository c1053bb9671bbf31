"""The step-time benchmark's blocks and paired-block interval (``benchmarks/telemetry_step_time.py``)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "telemetry_step_time.py"
_spec = importlib.util.spec_from_file_location("bench_step_time", _PATH)
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


class _FakeSink:
    """Counts the wrapper's calls; its flush clock is in steps: a step end flushes when at least
    ``every`` steps have passed since the last one that did (a start at step 0)."""

    def __init__(self, every: int) -> None:
        self.run_id, self.run_dir, self.every, self.last = "r", "d", every, 0
        self.step_ends, self.step_flushes, self.emits, self.flushes = [], 0, 0, []

    def emit(self, table, columns):
        self.emits += 1

    def step_end(self, step):
        self.step_ends.append(step)
        if step - self.last >= self.every:
            self.step_flushes, self.last = self.step_flushes + 1, step

    def flush(self):
        self.flushes.append(len(self.step_ends))

    def writer_cpu_seconds(self):
        return 0.0


def _drive(s, steps):
    for step in range(steps):
        s.emit("steps", {})
        s.step_end(step)


def test_fixed_blocks_end_with_an_extra_flush_every_block():
    fake = _FakeSink(every=7)
    s = bench.AlternatingSink(fake, block=5, overlap=True)
    _drive(s, 20)
    assert [s.block_of[i] for i in range(20)] == [i // 5 for i in range(20)]
    assert fake.emits == 10  # on-blocks 0 and 2 only
    assert fake.step_ends == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]  # forwarded in on-blocks
    assert len(fake.flushes) == 2  # one blocking flush per on-block, whatever the sink did
    # flushes charged to on-steps: its own at step 10, and the two block-end ones
    assert {i for i, f in s.flushes.items() if f} == {4, 10, 14}


def test_aligned_blocks_end_at_the_sinks_own_flush():
    fake = _FakeSink(every=4)
    s = bench.AlternatingSink(fake, block=5, aligned=True)
    _drive(s, 30)
    # on 0-4 (its own flush at step 4), off 5-9 (step 9 restarts the sink's clock), on 10-17
    # (own flushes at 13, too early, and 17), off 18-22 (restart at 22), on 23-29 (flush at 26)
    assert [s.block_of[i] for i in range(30)] == [0] * 5 + [1] * 5 + [2] * 8 + [3] * 5 + [4] * 7
    assert fake.step_ends == [*range(5), 9, *range(10, 18), 22, *range(23, 30)]
    assert fake.last == 26 and fake.step_flushes == 6  # at 4, 9, 13, 17, 22, 26
    assert fake.flushes == [5, 14]  # one blocking flush each, right after the block's own flush
    assert fake.emits == 5 + 8 + 7
    assert {i for i, f in s.flushes.items() if f} == {4, 13, 17, 26}  # no extra ones


def test_writer_and_process_cpu_per_step_from_block_end_readings():
    from types import SimpleNamespace

    s = bench.AlternatingSink(SimpleNamespace(run_id="r", run_dir="d"), block=10)
    s.block_of = {i: i // 10 for i in range(50)}
    # writer CPU read at the end of blocks 0..4 (on, off, on, off, on); block 0 is excluded
    s.writer_cpu = {0: 1.0, 1: 1.1, 2: 2.1, 3: 2.1, 4: 3.6}
    assert s.writer_cpu_per_on_step() == pytest.approx((1.0 + 1.5) / 20)
    s.writer_cpu[3] = None  # an unreadable clock drops the on-block after it
    assert s.writer_cpu_per_on_step() == pytest.approx(1.0 / 10)
    s.block_of = {i: 0 if i < 10 else 1 if i < 20 else 2 for i in range(35)}  # on-block 2: 15
    s.writer_cpu = {0: 1.0, 1: 1.1, 2: 2.6}
    assert s.writer_cpu_per_on_step() == pytest.approx(1.5 / 15)
    # process CPU at each step's end: 0.2 s per on-step, 0.3 s per off-step (steps 10..19)
    s.block_of = {i: i // 10 for i in range(30)}
    t, s.process_cpu = 0.0, {}
    for i in range(30):
        t += 0.3 if (i // 10) % 2 == 1 else 0.2
        s.process_cpu[i] = t
    assert s.process_cpu_per_off_step(warm=12) == pytest.approx(0.3)  # steps 12..19


def test_cold_start_section_prints_one_line_per_pause(monkeypatch, capsys):
    path = _PATH.with_name("telemetry_cold.py")
    spec = importlib.util.spec_from_file_location("bench_cold", path)
    cold = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cold)
    monkeypatch.setattr(cold, "GAPS_S", (0.0, 0.01))
    cold.section_cold_start(type("Args", (), {"repeats": 2})())
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        f"cold_start, {mode} pause {gap:4.2f} s" for mode in ("idle", "busy") for gap in (0, 0.01)
    ]
    assert all("ms wall" in line and "warm" in line for line in lines)

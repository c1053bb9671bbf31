"""Step-time sections of ``benchmarks/telemetry.py``: the sink on vs off, on the default tiny config.

``step_time``: one run per sink, back to back, in pairs. ``step_time_ab``: the sink on and off in
alternating blocks of steps of the same runs (drift-free; see ``AlternatingSink``). Goal <= 1.02.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import tempfile
import time
import warnings

import numpy as np

STEP_TIME_GOAL = 1.02


def paired_ratio_ci(
    on_blocks, off_blocks, *, level: float = 0.9, n_boot: int = 4000, seed: int = 0
) -> tuple[float, float, float, float]:
    """Ratio of mean step times over paired on/off blocks, with a bootstrap interval.

    Args:
        on_blocks, off_blocks: [P] mean step time of each on-block and of the off-block paired
            with it (the ratio is of the means of block means).
        level: two-sided interval level; n_boot, seed: bootstrap resamples of the P pairs.
    Returns:
        (ratio, low, high, share of resamples with a ratio <= ``STEP_TIME_GOAL``): how reliably
        the goal is met given the block-to-block noise.
    """
    on, off = np.asarray(on_blocks, dtype=float), np.asarray(off_blocks, dtype=float)
    if on.ndim != 1 or on.shape != off.shape or len(on) < 2:
        raise ValueError(f"need >= 2 paired blocks of equal count, got {on.shape} and {off.shape}")
    idx = np.random.default_rng(seed).integers(0, len(on), size=(n_boot, len(on)))
    ratios = on[idx].mean(axis=1) / off[idx].mean(axis=1)
    low, high = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    share = float(np.mean(ratios <= STEP_TIME_GOAL))
    return float(on.mean() / off.mean()), float(low), float(high), share


def section_step_time(args: argparse.Namespace) -> None:
    """Training step time with ``--telemetry duckdb`` vs ``none`` on the default tiny config.

    Paired design, because run-to-run load drift on a shared machine is larger than the effect:
    each repeat trains one run per sink back to back (order alternating: none first, then duckdb
    first), the first 3 steps of each run are warm-up and excluded, and the pair's ratio is
    mean(duckdb) / mean(none) (means: a flush step's cost counts). Prints the median pair ratio
    and the pairs' spread, the pooled means, and the same with medians (flush steps hidden).
    """
    import warnings

    warnings.filterwarnings("ignore")
    from core.train.driver import resolve_config, run_training

    cfg = resolve_config(None, ["train.eval_every=0", "train.eval_size=16"], steps=args.train_steps)
    times: dict[str, list[float]] = {"none": [], "duckdb": []}
    ratios, median_ratios = [], []
    for rep in range(args.repeats):
        pair: dict[str, list[float]] = {}
        for sink in ("none", "duckdb") if rep % 2 == 0 else ("duckdb", "none"):
            with tempfile.TemporaryDirectory() as root:
                _, summary = run_training(cfg, runs_root=root, telemetry=sink, progress=False)
            pair[sink] = [m["wall_step_s"] for m in summary["steps"][3:]]
            times[sink] += pair[sink]
        ratios.append(float(np.mean(pair["duckdb"]) / np.mean(pair["none"])))
        median_ratios.append(float(np.median(pair["duckdb"]) / np.median(pair["none"])))
    mean = {k: float(np.mean(v)) for k, v in times.items()}
    q1, q3 = np.percentile(ratios, [25, 75])
    print(
        f"step time, {args.repeats} pairs x {args.train_steps - 3} steps: mean ratio, median over "
        f"pairs duckdb/none {float(np.median(ratios)):.3f}x (IQR {q1:.3f}-{q3:.3f}, "
        f"min {min(ratios):.3f}, max {max(ratios):.3f}; goal <= 1.02x)"
    )
    print(
        f"pooled means: none {mean['none'] * 1e3:.1f} ms, duckdb {mean['duckdb'] * 1e3:.1f} ms "
        f"-> {mean['duckdb'] / mean['none']:.3f}x; medians (flush steps hidden): "
        f"{float(np.median(median_ratios)):.3f}x per pair, pooled "
        f"{np.median(times['duckdb']) / np.median(times['none']):.3f}x"
    )


class AlternatingSink:
    """Forwards to the real sink in on-blocks of steps and drops records in off-blocks.

    Blocks alternate on, off, on, ... (block ids 0, 1, 2, ...: even ids are on-blocks); off-blocks
    are ``block`` steps long. Both halves share one process, one model and one load history, so
    machine drift cancels. Three designs:

    - serial (default): on-blocks are ``block`` steps and end with one blocking ``flush``; the
      sink's own step-end flushes are not forwarded. Every row of the block is converted,
      validated and in a committed part before the off-block starts, so all of the writer's work
      is charged to the on-steps, serially: an upper bound.
    - ``overlap``: on-blocks also forward ``step_end``, so the sink flushes itself every ~2 s
      concurrently with training, as in a real run. The blocking ``flush`` at the block end
      writes the remainder: one more flush (a part per table) per on-block than a real run makes.
    - ``aligned`` (implies ``overlap``): an on-block ends at its first step after ``block``
      steps whose ``step_end`` made the sink flush, and the blocking ``flush`` only waits for
      that flush. The last step of each off-block also forwards ``step_end`` (nothing is
      pending: nothing is written), which restarts the sink's flush clock at the block boundary
      when the off-block lasts at least ``step_flush_min_seconds``. So every flush of an on-block
      holds ~2 s of rows, and on-blocks make exactly a real run's flushes; only the last of each
      block is serialized (still an upper bound).
    """

    def __init__(self, sink, block: int, overlap: bool = False, aligned: bool = False) -> None:
        self.sink, self.run_id, self.run_dir = sink, sink.run_id, sink.run_dir
        self.block, self.overlap, self.aligned = block, overlap or aligned, aligned
        self.on, self.step, self.block_id, self.in_block = True, 0, 0, 0
        self.block_of: dict[int, int] = {}  # step -> block id
        self.inside_s: dict[int, float] = {}  # step -> wall time inside the real sink
        self.writer_cpu: dict[int, float | None] = {}  # block id -> writer thread CPU at its end
        self.process_cpu: dict[int, float] = {}  # step -> process CPU time at its end
        self.flushes: dict[int, int] = {}  # step -> flushes of on-step ``step`` (own + block end)

    def emit(self, table, columns) -> None:
        if self.on:
            t0 = time.perf_counter()
            self.sink.emit(table, columns)
            self._charge(time.perf_counter() - t0)

    def _charge(self, seconds: float) -> None:
        self.inside_s[self.step] = self.inside_s.get(self.step, 0.0) + seconds

    def step_end(self, step: int) -> None:
        self.block_of[step] = self.block_id
        self.in_block += 1
        flushed = False
        last_off = not self.on and self.in_block >= self.block
        if (self.on and self.overlap) or (self.aligned and last_off):  # the sink's own flushes
            before = self.sink.step_flushes
            t0 = time.perf_counter()
            self.sink.step_end(step)
            if self.on:
                self._charge(time.perf_counter() - t0)
            flushed = self.sink.step_flushes != before
        if self.on:
            self.flushes[step] = int(flushed)
        if self.in_block >= self.block and (flushed or not (self.on and self.aligned)):
            if self.on:
                t0 = time.perf_counter()
                self.sink.flush()
                self._charge(time.perf_counter() - t0)
                self.flushes[step] = 1  # one flush either way: the block-end one writes the rest
            self.writer_cpu[self.block_id] = self.sink.writer_cpu_seconds()
            self.on, self.block_id, self.in_block = not self.on, self.block_id + 1, 0
        self.process_cpu[step] = time.process_time()
        self.step = step + 1

    def close(self, status: str = "finished") -> None:
        self.sink.close(status)

    def writer_cpu_per_on_step(self) -> float | None:
        """Writer thread CPU seconds per on-step, over the complete on-blocks after the first (an
        on-block's work ends with its blocking flush; off-blocks hand the writer nothing)."""
        cpu = self.writer_cpu
        on = [b for b in cpu if b % 2 == 0 and b > 0 and None not in (cpu[b], cpu.get(b - 1))]
        size = collections.Counter(self.block_of.values())  # block id -> its steps
        steps = sum(size[b] for b in on)
        return sum(cpu[b] - cpu[b - 1] for b in on) / steps if steps else None

    def process_cpu_per_off_step(self, warm: int) -> float | None:
        """Process CPU seconds (every thread) per off-step after ``warm``."""
        cpu, of = self.process_cpu, self.block_of
        off = [cpu[i] - cpu[i - 1] for i in cpu if i >= warm and i - 1 in cpu and of[i] % 2 == 1]
        return sum(off) / len(off) if off else None


def section_step_time_ab(args: argparse.Namespace) -> None:
    """Step time with the sink on vs off in alternating blocks of steps inside the same runs.

    Per run: mean wall time of the on-steps (their blocking end-of-block flush included) / mean
    of the off-steps, the first 2 x --block steps (or --warmup-steps) excluded as warm-up; prints the
    median over runs, the pooled ratio, the same with medians (which ignore the flush steps), and
    the ratio over on/off block pairs with a bootstrap interval (``paired_ratio_ci``). Eval is
    off, so every step is a GRPO step.
    """
    warnings.filterwarnings("ignore")
    import core.train.driver as driver

    real_open = driver.open_telemetry
    block = args.block
    warm = 2 * block if args.warmup_steps is None else args.warmup_steps
    sinks: list[AlternatingSink] = []

    def alternating(*a, **kw):
        sink = AlternatingSink(
            real_open(*a, **kw), block, overlap=args.overlap, aligned=args.aligned
        )
        sinks.append(sink)
        return sink

    overrides = [
        "train.eval_every=0",
        "train.eval_size=16",
        f'telemetry.writer_priority="{args.writer_priority}"',
        f"telemetry.flush_seconds={args.flush_seconds}",
        f"telemetry.step_flush_min_seconds={args.flush_seconds}",
        f"telemetry.writer_cpu_budget={args.writer_cpu_budget}",
    ]
    cfg = driver.resolve_config(None, overrides, steps=args.train_steps)
    on_all, off_all, ratios, median_ratios = [], [], [], []
    on_flushes = 0  # flushes made in the on-steps counted in on_all
    on_blocks, off_blocks = [], []  # mean step time of each on-block and the off-block after it
    with contextlib.ExitStack() as stack:
        driver.open_telemetry = alternating  # benchmark-only wrapper around our own factory
        stack.callback(setattr, driver, "open_telemetry", real_open)
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as root:
                _, summary = driver.run_training(
                    cfg, runs_root=root, telemetry="duckdb", progress=False
                )
            block_of = sinks[-1].block_of
            by_block: dict[int, list[float]] = {}
            for i, m in enumerate(summary["steps"]):
                if i >= warm:
                    by_block.setdefault(block_of[i], []).append(m["wall_step_s"])
            on = [w for b, steps in by_block.items() if b % 2 == 0 for w in steps]
            off = [w for b, steps in by_block.items() if b % 2 == 1 for w in steps]
            on_all += on
            on_flushes += sum(f for i, f in sinks[-1].flushes.items() if i >= warm)
            off_all += off
            for b, steps in by_block.items():  # an on-block and the off-block after it
                if b % 2 == 0 and b + 1 in by_block:
                    on_blocks.append(np.mean(steps))
                    off_blocks.append(np.mean(by_block[b + 1]))
            ratios.append(float(np.mean(on) / np.mean(off)))
            median_ratios.append(float(np.median(on) / np.median(off)))
    inside = sum(v for x in sinks for k, v in x.inside_s.items() if k >= warm) / len(on_all)
    design = (
        "aligned to the sink's own flushes"
        if args.aligned
        else "the sink flushes itself inside a block"
        if args.overlap
        else "serial"
    )
    q1, q3 = np.percentile(ratios, [25, 75])
    print(
        f"step time, writer priority {args.writer_priority}, flushes every {args.flush_seconds} s "
        f"paced to a writer CPU budget of {args.writer_cpu_budget}, "
        f"sink on/off in blocks of {block} steps ({design}), {args.repeats} runs x "
        f"{args.train_steps - warm} steps: mean ratio, median over runs "
        f"{float(np.median(ratios)):.3f}x (IQR {q1:.3f}-{q3:.3f}; goal <= {STEP_TIME_GOAL}x)"
    )
    print(
        f"pooled means: off {np.mean(off_all) * 1e3:.1f} ms, on {np.mean(on_all) * 1e3:.1f} ms "
        f"-> {np.mean(on_all) / np.mean(off_all):.3f}x over {len(on_all)} on- and {len(off_all)} "
        f"off-steps; medians (flush steps hidden): {float(np.median(median_ratios)):.3f}x per "
        f"run, pooled {np.median(on_all) / np.median(off_all):.3f}x"
    )
    if len(on_blocks) >= 2:
        ratio, low, high, share = paired_ratio_ci(on_blocks, off_blocks)
        print(
            f"paired blocks: {ratio:.3f}x, 90% bootstrap interval {low:.3f}-{high:.3f} over "
            f"{len(on_blocks)} on/off block pairs; {share:.0%} of resamples <= {STEP_TIME_GOAL}x"
        )
    print(
        f"flushes in on-steps: one per {np.sum(on_all) / max(on_flushes, 1):.2f} s of on-steps "
        f"(the sink's own pace: {np.mean([x.sink.flush_interval_s for x in sinks]):.2f} s at the "
        f"runs' ends; {args.flush_seconds} s unpaced)"
    )
    print(
        f"time inside the sink per on-step (emit + step_end + block-end flush): "
        f"{inside * 1e3:.2f} ms = {inside / np.mean(off_all):.3f} of a mean off-step"
    )
    writer = [w for x in sinks if (w := x.writer_cpu_per_on_step()) is not None]
    process = [c for x in sinks if (c := x.process_cpu_per_off_step(warm)) is not None]
    if writer and process:
        w, c = float(np.mean(writer)), float(np.mean(process))
        print(
            f"writer thread CPU per on-step: {w * 1e3:.2f} ms = {w / np.mean(off_all):.3f} of a "
            f"mean off-step's wall time; process CPU per off-step {c * 1e3:.1f} ms "
            f"({c / np.mean(off_all):.2f} cores busy)"
        )

"""Telemetry benchmarks, measured side by side in one process.

Section ``ingest``: ``DuckDBTelemetry`` ingest from loop-native numpy columns (convert + validate
on the calling thread, atomic zstd parts with fsync on the background thread) vs raw
``pyarrow.parquet.write_table`` (no fsync) of the same Arrow batches with the same file settings;
prints absolute rows/s and the ratio (goal >= 0.8). ``os.sync()`` runs between timed sections.
Section ``step_time``: training step time with ``--telemetry duckdb`` vs ``none`` on the default
tiny config, in paired runs. Section ``step_time_ab``: the sink on and off on alternating steps
of the same runs (drift-free; see its docstring). Goal for both <= 1.02.
Usage: ``python benchmarks/telemetry.py [--section NAME] [--repeats N] [--train-steps N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from observability import DuckDBTelemetry, TelemetryConfig
from observability.parts import parquet_options
from observability.records import build_table
from observability.schema import table_spec

VOCAB = 32_000
STEP_TIME_GOAL = 1.02


def paired_ratio_ci(
    on_blocks, off_blocks, *, level: float = 0.9, n_boot: int = 4000, seed: int = 0
) -> tuple[float, float, float, float]:
    """Ratio of mean step times over paired on/off blocks, with a bootstrap interval.

    Args:
        on_blocks, off_blocks: [P] mean step time of each on-block and of the off-block paired
            with it (equal-length blocks, so the mean of block means is the mean of steps).
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


def token_batches(n_batches: int, rows: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Per-step ``tokens`` batches shaped like the loop's: samples of 512 tokens, fp32 log-probs."""
    rng = np.random.default_rng(seed)
    batches = []
    for b in range(n_batches):
        pos = np.arange(rows, dtype=np.int32) % 512
        rollout = -rng.exponential(1.0, rows).astype(np.float32)
        train = np.minimum(rollout + rng.normal(0, 0.01, rows).astype(np.float32), 0.0)
        batches.append(
            {
                "step": np.full(rows, b, dtype=np.int64),
                "sample_id": (b * rows + np.arange(rows)) // 512,
                "pos": pos,
                "token_id": rng.integers(0, VOCAB, rows, dtype=np.int32),
                "role": np.where(pos < 128, 0, 1).astype(np.int8),  # codes: prompt, action
                "loss_mask": pos >= 128,
                "rollout_logp": rollout,
                "train_logp": train,
                "ratio": np.exp(train - rollout),
                "advantage": np.repeat(rng.normal(size=rows // 512 + 1), 512)[:rows].astype(
                    np.float32
                ),
                "entropy": rng.exponential(1.0, rows).astype(np.float32),
                "policy_version_rollout": np.full(rows, b, dtype=np.int64),
            }
        )
    return batches


def _raw(tables: list, out: Path) -> float:
    out.mkdir()
    opts = parquet_options(table_spec("tokens"))
    t0 = time.perf_counter()
    for i, t in enumerate(tables):
        pq.write_table(t, out / f"{i}.parquet", **opts)
    return time.perf_counter() - t0


def _writer(batches: list, rows: int, out: Path) -> tuple[float, float]:
    config = TelemetryConfig(flush_rows=rows, flush_seconds=3600, compact_on_close=False)
    tel = DuckDBTelemetry(out, run_info={"vocab_size": VOCAB}, config=config)
    emit_s = 0.0
    t0 = time.perf_counter()
    for b in batches:
        e0 = time.perf_counter()
        tel.emit("tokens", b)
        emit_s += time.perf_counter() - e0
    tel.close()
    return time.perf_counter() - t0, emit_s


def section_ingest(args: argparse.Namespace) -> None:
    batches = token_batches(args.batches, args.rows)
    tables = [build_table("tokens", b, run_id="bench", rank=0, vocab_size=VOCAB) for b in batches]
    total = args.batches * args.rows
    raw_s, writer_s, emit_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):  # interleaved, so both see the same machine load
            os.sync()  # start clean: the writer's fsyncs must not pay for raw's dirty pages
            raw_s.append(_raw(tables, Path(tmp) / f"raw{r}"))
            os.sync()
            w, e = _writer(batches, args.rows, Path(tmp) / f"run{r}")
            writer_s.append(w)
            emit_s.append(e)
    raw, writer, emit = (statistics.median(x) for x in (raw_s, writer_s, emit_s))
    print(f"## ingest: {args.batches} x {args.rows:,} token rows, zstd, median of {args.repeats}")
    print(f"raw pyarrow.parquet.write_table : {total / raw / 1e6:6.2f} M rows/s")
    print(f"DuckDBTelemetry (emit..close)   : {total / writer / 1e6:6.2f} M rows/s")
    print(f"ratio writer / raw              : {raw / writer:6.2f}x   (goal >= 0.8)")
    print(f"emit() on the calling thread    : {1e3 * emit / args.batches:6.1f} ms per batch")


def section_step_time(args: argparse.Namespace) -> None:
    """Training step time with ``--telemetry duckdb`` vs ``none`` on the default tiny config.

    Paired design, because run-to-run load drift on a shared machine is larger than the effect:
    each repeat trains one run per sink back to back (order alternating: none first, then duckdb
    first), the first 3 steps of each run are warm-up and excluded, and the pair's ratio is
    mean(duckdb) / mean(none) (means: a flush step's cost counts). Prints the median pair ratio
    and the pairs' spread, the pooled means, and the same with medians (flush steps hidden).
    """
    import tempfile
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


class _AlternatingSink:
    """Forwards to the real sink for ``block`` steps, then drops records for ``block`` steps.

    Each on-block ends with one blocking ``flush`` (in place of the sink's own step-end flushes,
    so parts are written once per block, about the default 2 s cadence at 12 steps): every row
    emitted in the block is converted, validated and in a committed part before the off-block
    starts, so all of the background writer's work is charged to the on-steps, serially — an
    upper bound, since in a real run the writer overlaps training on otherwise idle CPU. With
    ``overlap`` the on-blocks also forward ``step_end``, so the sink flushes itself every ~2 s
    concurrently with training, as in a real run, and the blocking flush at the block end only
    writes the remainder (at most ~2 s of rows: with 48-step blocks, about a fifth of the
    writer's work stays serialized). Both halves share one process, one model and one load
    history, so machine drift cancels.
    """

    def __init__(self, sink, block: int, overlap: bool = False) -> None:
        self.sink, self.run_id, self.run_dir = sink, sink.run_id, sink.run_dir
        self.block, self.overlap, self.on, self.step = block, overlap, True, 0
        self.inside_s: dict[int, float] = {}  # step -> wall time inside the real sink
        self.writer_cpu: dict[int, float | None] = {}  # block -> writer thread CPU at its end
        self.process_cpu: dict[int, float] = {}  # step -> process CPU time at its end

    def emit(self, table, columns) -> None:
        if self.on:
            t0 = time.perf_counter()
            self.sink.emit(table, columns)
            self._charge(time.perf_counter() - t0)

    def _charge(self, seconds: float) -> None:
        self.inside_s[self.step] = self.inside_s.get(self.step, 0.0) + seconds

    def step_end(self, step: int) -> None:
        if self.on and self.overlap:  # the sink's own ~2 s flushes, concurrent with training
            t0 = time.perf_counter()
            self.sink.step_end(step)
            self._charge(time.perf_counter() - t0)
        if self.on and (step + 1) % self.block == 0:
            t0 = time.perf_counter()
            self.sink.flush()
            self._charge(time.perf_counter() - t0)
        if (step + 1) % self.block == 0:
            self.writer_cpu[step // self.block] = self.sink.writer_cpu_seconds()
        self.process_cpu[step] = time.process_time()
        self.on = ((step + 1) // self.block) % 2 == 0
        self.step = step + 1

    def close(self, status: str = "finished") -> None:
        self.sink.close(status)

    def writer_cpu_per_on_step(self) -> float | None:
        """Writer thread CPU seconds per on-step, over the on-blocks after the first (an
        on-block's work ends with its blocking flush; off-blocks hand the writer nothing)."""
        cpu = self.writer_cpu
        on = [
            cpu[b] - cpu[b - 1]
            for b in cpu
            if b % 2 == 0 and b > 0 and None not in (cpu[b], cpu.get(b - 1))
        ]
        return sum(on) / (len(on) * self.block) if on else None

    def process_cpu_per_off_step(self, warm: int) -> float | None:
        """Process CPU seconds (every thread) per off-step after ``warm``."""
        off = [
            self.process_cpu[i] - self.process_cpu[i - 1]
            for i in self.process_cpu
            if i >= warm and i - 1 in self.process_cpu and (i // self.block) % 2 == 1
        ]
        return sum(off) / len(off) if off else None


def section_step_time_ab(args: argparse.Namespace) -> None:
    """Step time with the sink on vs off in alternating blocks of steps inside the same runs.

    Per run: mean wall time of the on-steps (their blocking end-of-block flush included) / mean
    of the off-steps, the first two blocks (or --warmup-steps) excluded as warm-up; prints the
    median over runs, the pooled ratio, the same with medians (which ignore the flush steps), and
    the ratio over on/off block pairs with a bootstrap interval (``paired_ratio_ci``). Eval is
    off, so every step is a GRPO step.
    """
    import contextlib
    import warnings

    warnings.filterwarnings("ignore")
    import core.train.driver as driver

    real_open = driver.open_telemetry
    block = args.block
    warm = 2 * block if args.warmup_steps is None else args.warmup_steps

    sinks: list[_AlternatingSink] = []

    def alternating(*a, **kw):
        sinks.append(_AlternatingSink(real_open(*a, **kw), block, overlap=args.overlap))
        return sinks[-1]

    overrides = [
        "train.eval_every=0",
        "train.eval_size=16",
        f'telemetry.writer_priority="{args.writer_priority}"',
        f"telemetry.flush_seconds={args.flush_seconds}",
        f"telemetry.step_flush_min_seconds={args.flush_seconds}",
    ]
    cfg = driver.resolve_config(None, overrides, steps=args.train_steps)
    on_all, off_all, ratios, median_ratios = [], [], [], []
    on_blocks, off_blocks = [], []  # mean step time of each on-block and the off-block after it
    with contextlib.ExitStack() as stack:
        driver.open_telemetry = alternating  # benchmark-only wrapper around our own factory
        stack.callback(setattr, driver, "open_telemetry", real_open)
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as root:
                _, summary = driver.run_training(
                    cfg, runs_root=root, telemetry="duckdb", progress=False
                )
            walls = [m["wall_step_s"] for m in summary["steps"]][warm:]
            by_block: dict[int, list[float]] = {}
            for i, w in enumerate(walls, warm):
                by_block.setdefault(i // block, []).append(w)
            on = [w for b, steps in by_block.items() if b % 2 == 0 for w in steps]
            off = [w for b, steps in by_block.items() if b % 2 == 1 for w in steps]
            on_all += on
            off_all += off
            for b, steps in by_block.items():  # an on-block and the off-block after it
                if b % 2 == 0 and b + 1 in by_block:
                    on_blocks.append(np.mean(steps))
                    off_blocks.append(np.mean(by_block[b + 1]))
            ratios.append(float(np.mean(on) / np.mean(off)))
            median_ratios.append(float(np.median(on) / np.median(off)))
    inside = sum(v for x in sinks for k, v in x.inside_s.items() if k >= warm) / len(on_all)
    q1, q3 = np.percentile(ratios, [25, 75])
    print(
        f"step time, writer priority {args.writer_priority}, flushes every {args.flush_seconds} s, "
        f"sink on/off in blocks of {block} steps"
        f"{' (sink flushes itself inside a block)' if args.overlap else ''}, {args.repeats} runs x "
        f"{args.train_steps - warm} steps: mean ratio, median over runs "
        f"{float(np.median(ratios)):.3f}x (IQR {q1:.3f}-{q3:.3f}; goal <= {STEP_TIME_GOAL}x)"
    )
    print(
        f"pooled means: off {np.mean(off_all) * 1e3:.1f} ms, on {np.mean(on_all) * 1e3:.1f} ms "
        f"-> {np.mean(on_all) / np.mean(off_all):.3f}x; medians (flush steps hidden): "
        f"{float(np.median(median_ratios)):.3f}x per run, pooled "
        f"{np.median(on_all) / np.median(off_all):.3f}x"
    )
    if len(on_blocks) >= 2:
        ratio, low, high, share = paired_ratio_ci(on_blocks, off_blocks)
        print(
            f"paired blocks: {ratio:.3f}x, 90% bootstrap interval {low:.3f}-{high:.3f} over "
            f"{len(on_blocks)} on/off block pairs; {share:.0%} of resamples <= {STEP_TIME_GOAL}x"
        )
    print(
        f"time inside the sink per on-step (emit + block-end flush): {inside * 1e3:.2f} ms = "
        f"{inside / np.mean(off_all):.3f} of a mean off-step"
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


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {
    "ingest": section_ingest,
    "step_time": section_step_time,
    "step_time_ab": section_step_time_ab,
}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=262_144, help="token rows per batch (one step)")
    p.add_argument("--batches", type=int, default=8, help="batches (steps)")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--train-steps", type=int, default=20, help="steps per run (step_time section)")
    p.add_argument("--block", type=int, default=12, help="steps per on/off block (step_time_ab)")
    p.add_argument(
        "--overlap",
        action="store_true",
        help="step_time_ab: the sink flushes itself inside on-blocks (use with --block 48)",
    )
    p.add_argument(
        "--warmup-steps", type=int, default=None, help="step_time_ab: steps excluded (2 blocks)"
    )
    p.add_argument(
        "--writer-priority",
        choices=["idle", "normal"],
        default=TelemetryConfig.writer_priority,
        help="TelemetryConfig.writer_priority for the step_time_ab section",
    )
    p.add_argument(
        "--flush-seconds",
        type=float,
        default=TelemetryConfig.flush_seconds,
        help="step_time_ab: TelemetryConfig.flush_seconds and step_flush_min_seconds (the cadence)",
    )
    p.add_argument("--section", choices=sorted(SECTIONS), action="append")
    args = p.parse_args(argv)
    for name in args.section or list(SECTIONS):
        SECTIONS[name](args)


if __name__ == "__main__":
    main()

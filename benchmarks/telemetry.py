"""Telemetry benchmarks, measured side by side in one process.

Section ``ingest``: ``DuckDBTelemetry`` ingest from loop-native numpy columns (convert + validate
on the calling thread, atomic zstd parts with fsync on the background thread) vs raw
``pyarrow.parquet.write_table`` (no fsync) of the same Arrow batches with the same file settings;
prints absolute rows/s and the ratio (goal >= 0.8). ``os.sync()`` runs between timed sections.
Section ``step_time``: training step time with ``--telemetry duckdb`` vs ``none`` on the default
tiny config, in paired runs. Section ``step_time_ab``: the sink on and off in alternating blocks
of steps of the same runs (drift-free; ``telemetry_step_time.AlternatingSink``). Goal for both
<= 1.02. Section ``cold_start``: a small flush's encode after idle and busy pauses vs warm
(``telemetry_cold``: why a flush costs the loop several times its warm cost on this machine).
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
from telemetry_cold import section_cold_start  # benchmarks/, on sys.path
from telemetry_step_time import section_step_time, section_step_time_ab

from observability import DuckDBTelemetry, TelemetryConfig
from observability.parts import parquet_options
from observability.records import build_table
from observability.schema import table_spec

VOCAB = 32_000


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


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {
    "ingest": section_ingest,
    "step_time": section_step_time,
    "step_time_ab": section_step_time_ab,
    "cold_start": section_cold_start,
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
        "--aligned",
        action="store_true",
        help="step_time_ab: as --overlap, and on-blocks end at one of the sink's own flushes "
        "(no extra block-end flush)",
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
    p.add_argument(
        "--writer-cpu-budget",
        type=float,
        default=TelemetryConfig.writer_cpu_budget,
        help="step_time_ab: TelemetryConfig.writer_cpu_budget (0: no pacing, flushes every "
        "--flush-seconds)",
    )
    p.add_argument("--section", choices=sorted(SECTIONS), action="append")
    args = p.parse_args(argv)
    for name in args.section or list(SECTIONS):
        SECTIONS[name](args)


if __name__ == "__main__":
    main()

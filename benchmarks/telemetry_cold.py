"""Section ``cold_start`` of ``benchmarks/telemetry.py``: what a flush costs after a pause.

The writer encodes a flush every ~2 s; in between, its code and data are not touched. This
section encodes the same small Parquet flush (two tables with the schema's file settings, in
memory: no file system) back to back and after pauses of growing length, and prints the first
encode's wall and thread-CPU time after each pause against the warm cost. The pause is either
idle (``sleep``) or busy with other work on the same thread (an in-place torch multiply streaming
a 64 MiB buffer, as the training loop keeps the CPU busy between flushes).
"""

from __future__ import annotations

import argparse
import io
import time

import numpy as np
import pyarrow.parquet as pq

from observability.parts import parquet_options
from observability.records import build_table
from observability.schema import table_spec

GAPS_S = (0.0, 0.05, 0.2, 1.0, 2.0, 4.0, 8.0)


def _flush_tables():
    rng = np.random.default_rng(0)
    n = 1024
    tokens = build_table(
        "tokens",
        {
            "step": 1,
            "sample_id": np.repeat(np.arange(16), n // 16),
            "pos": np.tile(np.arange(n // 16), 16),
            "token_id": rng.integers(0, 256, n),
            "role": "action",
            "loss_mask": np.ones(n, dtype=bool),
            "rollout_logp": -rng.random(n).astype(np.float32),
            "train_logp": -rng.random(n).astype(np.float32),
        },
        run_id="cold",
        rank=0,
    )
    samples = build_table(
        "samples",
        {"sample_id": np.arange(16), "step": 1, "reward": rng.random(16), "status": "trained"},
        run_id="cold",
        rank=0,
    )
    return [(t, table_spec(name)) for name, t in (("tokens", tokens), ("samples", samples))]


def _encode(tables) -> None:
    for table, spec in tables:
        pq.write_table(table, io.BytesIO(), **parquet_options(spec, table.num_rows))


def section_cold_start(args: argparse.Namespace) -> None:
    """First encode after a pause vs warm encodes, for idle and busy pauses."""
    import torch

    tables = _flush_tables()
    buf = torch.ones(16 << 20)  # 64 MiB: the busy pause streams it through the caches
    for _ in range(50):
        _encode(tables)

    def pause(seconds: float, busy: bool) -> None:
        if not busy:
            time.sleep(seconds)
            return
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            buf.mul_(1.0)

    repeats = max(2, min(args.repeats, 5))
    for busy in (False, True):
        for gap in GAPS_S:
            wall, cpu, warm = [], [], []
            for _ in range(repeats):
                pause(gap, busy)
                w, c = time.perf_counter(), time.thread_time()
                _encode(tables)
                wall.append(time.perf_counter() - w)
                cpu.append(time.thread_time() - c)
                for _ in range(5):
                    c = time.thread_time()
                    _encode(tables)
                    warm.append(time.thread_time() - c)
            print(
                f"cold_start, {'busy' if busy else 'idle'} pause {gap:4.2f} s: first encode "
                f"{np.median(wall) * 1e3:6.2f} ms wall, {np.median(cpu) * 1e3:6.2f} ms CPU; "
                f"warm {np.median(warm) * 1e3:.2f} ms ({repeats} repeats)"
            )

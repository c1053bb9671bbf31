"""Tensor parallelism on the CPU: TP = 2 (two gloo processes) vs TP = 1, step time and memory.

Runs ``core.parallel.worker`` under ``torchrun`` three times on the same seeded ``bench`` model
(vocab 4096, hidden 512, 4 layers, 8 heads / 4 KV heads, SwiGLU 1408; 16 M parameters) and the
same batch (8 x 64 tokens), GRPO steps with AdamW: TP = 1 with one thread, TP = 1 with two
threads (the same cores as TP = 2), and TP = 2 with one thread per rank. Prints, side by side,
the median wall time and CPU time (the process's, all threads) of a step per rank (after
``--warmup`` steps), the peak RSS per rank, the bytes of parameters + gradients + AdamW state per
rank, and TP = 2's ratios to each TP = 1 run; checks that the grad norms agree (rel. 1e-4). On a
shared host the CPU times are the steadier reading.
Usage: python benchmarks/tp.py [--steps 12] [--warmup 2] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def launch(tp: int, threads: int, args, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(tp),
        "-m",
        "core.parallel.worker",
        "--tp",
        str(tp),
        "--models",
        "bench",
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(threads),
        "--out",
        str(out),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(REPO))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"TP={tp} worker failed:\n{done.stderr[-3000:]}")
    return torch.load(out)["results"]["bench"]


def summarize(rec: dict, warmup: int) -> dict:
    per_step = rec["step_time_s_per_rank"][warmup:]  # [steps][ranks]
    cpu = rec["step_cpu_s_per_rank"][warmup:]
    ranks = len(per_step[0])
    return {
        "step_s": [statistics.median(s[r] for s in per_step) for r in range(ranks)],
        "cpu_s": [statistics.median(s[r] for s in cpu) for r in range(ranks)],
        "rss": rec["peak_rss_bytes_per_rank"],
        "state": rec["state_bytes_per_rank"],
        "grad_norm": rec["grad_norm"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    runs = {}
    with tempfile.TemporaryDirectory() as d:
        for label, tp, threads in (
            ("TP=1, 1 thread", 1, 1),
            ("TP=1, 2 threads", 1, 2),
            ("TP=2, 1 thread/rank", 2, 1),
        ):
            runs[label] = summarize(
                launch(tp, threads, args, Path(d) / f"{tp}-{threads}.pt"), args.warmup
            )
    mib = 1 / 2**20
    print(
        f"{'run':<22} {'wall per step, per rank':<26} {'CPU per step, per rank':<26} "
        f"{'peak RSS per rank':<22} params+grads+AdamW per rank"
    )
    for label, r in runs.items():
        step = ", ".join(f"{s * 1e3:.0f} ms" for s in r["step_s"])
        cpu = ", ".join(f"{s * 1e3:.0f} ms" for s in r["cpu_s"])
        rss = ", ".join(f"{b * mib:.0f} MiB" for b in r["rss"])
        state = ", ".join(f"{b * mib:.1f} MiB" for b in r["state"])
        print(f"{label:<22} {step:<26} {cpu:<26} {rss:<22} {state}")
    tp2 = runs["TP=2, 1 thread/rank"]
    for label in ("TP=1, 1 thread", "TP=1, 2 threads"):
        ref = runs[label]
        print(
            f"TP=2 / {label}: step time {max(tp2['step_s']) / ref['step_s'][0]:.2f}x, "
            f"CPU per rank {max(tp2['cpu_s']) / ref['cpu_s'][0]:.2f}x, "
            f"peak RSS per rank {max(tp2['rss']) / ref['rss'][0]:.2f}x, "
            f"model state per rank {max(tp2['state']) / ref['state'][0]:.2f}x"
        )
        rel = ((tp2["grad_norm"] - ref["grad_norm"]).abs() / ref["grad_norm"]).max()
        assert float(rel) <= 1e-4, f"grad norms differ from {label} by {float(rel):.1e}"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

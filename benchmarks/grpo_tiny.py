"""GRPO tiny benchmark: train the default config on the CPU and measure held-out greedy accuracy.

Prints the base model's and the trained policy's greedy accuracy on the fixed held-out set, side
by side, plus per-step time (and Top-k agreement when DSA is on). Goal (issue 2): ≥ +10 points
in ≤ 10 minutes on 2 cores. The default config's own ``train.steps`` (40) is the demo length;
the benchmark trains 300 steps unless told otherwise.
Usage: python benchmarks/grpo_tiny.py [--steps N (300)] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import torch

warnings.filterwarnings("ignore")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--telemetry", default="none", choices=["none", "duckdb"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from core.driver import resolve_config, run_training

    cfg = resolve_config(None, ["train.eval_size=256", *args.set], steps=args.steps)
    with tempfile.TemporaryDirectory() as root:
        t0 = time.time()
        _, summary = run_training(
            cfg, runs_root=root, telemetry=args.telemetry, name="bench", progress=False
        )
        wall = time.time() - t0
    steps = summary["steps"]
    step_time = sum(m["step_time_s"] for m in steps) / max(len(steps), 1)
    a0, a1 = summary["eval_accuracy_start"], summary["eval_accuracy_end"]
    print(f"steps: {len(steps)}  wall: {wall:.0f}s  mean step time: {step_time:.2f}s")
    print(
        f"held-out greedy accuracy (n=256): base {a0:.3f} -> trained {a1:.3f} "
        f"({100 * (a1 - a0):+.1f} points)"
    )
    print(
        f"reward (sampled, T=1): first 5 steps {sum(m['reward_mean'] for m in steps[:5]) / 5:.3f} "
        f"-> last 5 steps {sum(m['reward_mean'] for m in steps[-5:]) / 5:.3f}"
    )
    print(
        f"mean |train-rollout logp|: {_mean(steps, 'mismatch_abs_mean'):.2e}  "
        f"IcePop-masked: {_mean(steps, 'icepop_masked_fraction'):.2%}"
    )
    if "topk_agreement" in steps[0]:
        print(
            f"DSA Top-k agreement (train vs rollout): mean {_mean(steps, 'topk_agreement'):.3f}, "
            f"min {min(m['topk_agreement'] for m in steps):.3f}"
        )


def _mean(steps: list[dict], key: str) -> float:
    return sum(m[key] for m in steps) / max(len(steps), 1)


if __name__ == "__main__":
    main()

"""SAO vs GRPO+DIS on the multi-turn calculator environment, at equal trained samples, side by
side in one run.

Both run the async orchestrator (``rollout.mode = "async"``, the same workers, environment
latencies and failure rates, DIS on the rollout log-prob ratio, the same actor learning rate):
- ``GRPO+DIS``: ``configs/agentic_tiny.toml`` — groups of G = 8, B = 8 groups per step (64
  trained samples), group-normalised advantages, no critic;
- ``SAO``: ``configs/sao_tiny.toml`` — single trajectories, 16 per step, a critic (frozen
  attention, K = 2), skip-observation GAE; it runs 4× the steps, so both train on the same number
  of samples.
Prints held-out greedy accuracy (n = ``--eval-size``) before and after, trained samples, and
trained samples per second of training-loop wall time (evaluation excluded). The seed reports
SWE-bench Verified 27.0 (GRPO+DIS) vs 29.8 (SAO) on Qwen3-30B-A3B.
Usage: python benchmarks/sao.py [--samples N (1920)] [--seed S] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
VARIANTS = {  # name -> (config, trained samples per step)
    "GRPO+DIS": ("agentic_tiny.toml", 64),
    "SAO": ("sao_tiny.toml", 16),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1920, help="trained samples per variant")
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--telemetry", default="none", choices=["none", "duckdb"])
    ap.add_argument("--run-dir", default=None, help="keep the runs here (default: a temp dir)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config, per_step) in VARIANTS.items():
            steps = args.samples // per_step
            r = isolated(
                train_once,
                config,
                [f"train.eval_size={args.eval_size}", "train.eval_every=0", *args.set],
                steps=steps,
                seed=args.seed,
                root=args.run_dir or tmp,
                telemetry=args.telemetry,
                threads=args.threads,
            )
            sps = r["trained"] / max(r["loop_s"], 1e-9)
            rows.append((name, steps, r["trained"], r["start"], r["end"], sps, r["loop_s"]))
            print(
                f"{name}: {r['start']:.3f} -> {r['end']:.3f} after {r['trained']} samples, "
                f"{r['loop_s']:.0f}s",
                flush=True,
            )
    print(f"\nheld-out greedy accuracy (n={args.eval_size}), seed {args.seed}")
    print("| variant | steps | trained samples | start | end | trained samples/s | loop wall |")
    print("|---|---|---|---|---|---|---|")
    for name, steps, trained, a0, a1, sps, wall in rows:
        print(f"| {name} | {steps} | {trained} | {a0:.3f} | {a1:.3f} | {sps:.1f} | {wall:.0f} s |")
    g, s = rows
    print(f"SAO / GRPO+DIS trained samples/s: {s[5] / g[5]:.2f}x")


def train_once(config: str, overrides, *, steps, seed, root, telemetry, threads) -> dict:
    """One training run (in its own process): start/end accuracy, trained samples, loop time."""
    torch.set_num_threads(threads)
    from core.driver import resolve_config, run_training

    cfg = resolve_config(CONFIGS / config, overrides, steps=steps, seed=seed)
    _, summary = run_training(
        cfg, runs_root=root, telemetry=telemetry, name="bench", progress=False
    )
    ms = summary["steps"]
    return {
        "start": summary["eval_accuracy_start"],
        "end": summary["eval_accuracy_end"],
        "trained": sum(m.get("trained_samples", m.get("n_trajectories", 0)) for m in ms),
        "loop_s": sum(m["wall_step_s"] for m in ms),
    }


def isolated(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a fresh spawned process (runs share no allocator state)."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(fn, *args, **kwargs).result()


if __name__ == "__main__":
    main()

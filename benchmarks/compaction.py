"""CompactionRL ablations on the long-horizon recall environment, side by side in one run.

Variants (the seed's table, GLM-4.5-Air on SWE-bench Verified: base 59.8, ordinary RL 62.5,
CompactionRL 66.8, without token-level loss 60.0, without cross-trajectory GAE 63.0):
- ``no-compaction RL``: trained on full histories (no compaction, ``model.max_seq_len``), its
  summaries never trained; evaluated like the others, with compaction at the budget C;
- ``CompactionRL``: ``configs/compaction_tiny.toml``;
- ``w/o token-level loss``: the mean of per-segment token means (``seq-mean-token-mean``);
- ``w/o cross-trajectory GAE``: local segment advantages, no (γλ)^{N_{>s}}.
Each starts from the shipped base (``core/assets/longhorizon_model``) with the same seed and
steps; held-out greedy success with compaction (n = ``--eval-size``) before and after, wall time
and trained trajectories per second. Goal (issue 27): CompactionRL ≥ +10 points over its start
within 20 minutes on 2 cores.
Usage: python benchmarks/compaction.py [--steps N (60)] [--seeds S ...] [--only NAME] [--set k=v]
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
CONFIG = Path(__file__).resolve().parent.parent / "configs" / "compaction_tiny.toml"
VARIANTS = {
    "no-compaction RL": ["compaction.enabled=false"],
    "CompactionRL": [],
    "w/o token-level loss": ['algorithm.loss_agg_mode="seq-mean-token-mean"'],
    "w/o cross-trajectory GAE": ["compaction.cross_segment_discount=false"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", action="append", default=[], choices=list(VARIANTS))
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--telemetry", default="none", choices=["none", "duckdb"])
    ap.add_argument("--run-dir", default=None, help="keep the runs here (default: a temp dir)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in VARIANTS.items():
            if args.only and name not in args.only:
                continue
            ends, walls, tps = [], [], []
            for seed in args.seeds:
                overrides = [f"train.eval_size={args.eval_size}", "train.eval_every=0"]
                r = isolated(
                    train_once,
                    [*overrides, *extra, *args.set],
                    steps=args.steps,
                    seed=seed,
                    root=args.run_dir or tmp,
                    telemetry=args.telemetry,
                    threads=args.threads,
                )
                a0 = r["start"]
                ends.append(r["end"])
                walls.append(r["wall"])
                tps.append(r["trajectories"] / max(r["train_s"], 1e-9))
                print(
                    f"{name} seed {seed}: {a0:.3f} -> {r['end']:.3f} in {r['wall']:.0f}s",
                    flush=True,
                )
            rows.append((name, a0, ends, sum(walls) / len(walls), sum(tps) / len(tps)))
    print(
        f"\nsteps {args.steps}, seeds {args.seeds}: held-out greedy success with compaction "
        f"(n={args.eval_size}), end = mean over seeds (each seed)"
    )
    print("| variant | start | end | Δ points | wall per run | trajectories/s |")
    print("|---|---|---|---|---|---|")
    for name, a0, ends, wall, tps in rows:
        mean = sum(ends) / len(ends)
        each = " / ".join(f"{e:.3f}" for e in ends)
        print(
            f"| {name} | {a0:.3f} | {mean:.3f} ({each}) | {100 * (mean - a0):+.1f} | "
            f"{wall:.0f} s | {tps:.1f} |"
        )


def train_once(overrides, *, steps, seed, root, telemetry, threads) -> dict:
    """One training run (in its own process, see ``isolated``): start/end accuracy, timings."""
    torch.set_num_threads(threads)
    from core.driver import resolve_config, run_training

    cfg = resolve_config(CONFIG, overrides, steps=steps, seed=seed)
    t0 = time.time()
    _, summary = run_training(
        cfg, runs_root=root, telemetry=telemetry, name="bench", progress=False
    )
    ms = summary["steps"]
    return {
        "start": summary["eval_accuracy_start"],
        "end": summary["eval_accuracy_end"],
        "wall": time.time() - t0,
        "trajectories": sum(m["n_trajectories"] for m in ms),
        "train_s": sum(m["step_time_s"] for m in ms),
    }


def isolated(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a fresh spawned process: runs share no allocator state (a
    process that trains several runs in turn keeps hundreds of MB per run alive)."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(fn, *args, **kwargs).result()


if __name__ == "__main__":
    main()

"""SAO vs GRPO+DIS on the multi-turn calculator environment, at equal trained samples, side by
side, over seeds.

Both run the async orchestrator (``rollout.mode = "async"``, the same workers, environment
latencies and failure rates, DIS on the rollout log-prob ratio, the same actor learning rate):
- ``GRPO+DIS``: ``configs/agentic_tiny.toml`` — groups of G = 8, B = 8 groups per step (64
  trained samples), group-normalised advantages, no critic;
- ``SAO``: ``configs/sao_tiny.toml`` — single trajectories, 16 per step, a critic (frozen
  attention, K = 2), skip-observation GAE; it runs 4× the steps, so both train on the same number
  of samples.
Each seed (``train.seed``: prompts, sampling, environment draws) runs both variants one after the
other, each in a fresh process with ``--threads`` torch threads. Prints per seed held-out greedy
accuracy (n = ``--eval-size``, the same problems for every run) before and after, trained samples,
training-loop wall time (evaluation excluded) and whole-run process CPU time; then each variant's
end accuracy as mean ± sd over seeds and SAO − GRPO+DIS as the paired difference (same seeds) with
its 95% interval (``benchmarks/stats.py``). The seed reports SWE-bench Verified 27.0 (GRPO+DIS) vs
29.8 (SAO) on Qwen3-30B-A3B.
Usage: python benchmarks/sao.py [--samples N (1920)] [--seeds 0 1 2] [--set key=value ...]
       [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402

warnings.filterwarnings("ignore")
CONFIGS = Path(__file__).resolve().parent.parent / "configs"
VARIANTS = {  # name -> (config, trained samples per step)
    "GRPO+DIS": ("agentic_tiny.toml", 64),
    "SAO": ("sao_tiny.toml", 16),
}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1920, help="trained samples per variant")
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1, help="torch threads per training process")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--telemetry", default="none", choices=["none", "duckdb"])
    ap.add_argument("--run-dir", default=None, help="keep the runs here (default: a temp dir)")
    ap.add_argument("--json", default=None, help="write the per-seed record here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for name, (config, per_step) in VARIANTS.items():
                steps = args.samples // per_step
                r = isolated(
                    train_once,
                    config,
                    [f"train.eval_size={args.eval_size}", "train.eval_every=0", *args.set],
                    steps=steps,
                    seed=seed,
                    root=args.run_dir or tmp,
                    telemetry=args.telemetry,
                    threads=args.threads,
                )
                rows.append({"seed": seed, "variant": name, "steps": steps, **r})
                print(
                    f"seed {seed} {name}: {r['start']:.3f} -> {r['end']:.3f} after "
                    f"{r['trained']} samples, loop {r['loop_s']:.0f}s, CPU {r['cpu_s']:.0f}s",
                    flush=True,
                )
    print(f"\nheld-out greedy accuracy (n={args.eval_size}), seeds {args.seeds}")
    print("| seed | variant | steps | trained samples | start | end | loop wall | run CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['seed']} | {r['variant']} | {r['steps']} | {r['trained']} | {r['start']:.3f} | "
            f"{r['end']:.3f} | {r['loop_s']:.0f} s | {r['cpu_s']:.0f} s |"
        )
    end = {v: [r["end"] for r in rows if r["variant"] == v] for v in VARIANTS}
    for v, xs in end.items():
        print(f"{v} end accuracy: {stats.summary(xs).fmt(3)}")
    diff = stats.paired(end["SAO"], end["GRPO+DIS"])
    print(diff.fmt("SAO", "GRPO+DIS", 1, scale=100) + " (points)")
    ratio = [
        (s["trained"] / s["loop_s"]) / (g["trained"] / g["loop_s"])
        for g, s in zip(rows[0::2], rows[1::2], strict=True)
    ]
    cpu = [
        (g["cpu_s"] / g["trained"]) / (s["cpu_s"] / s["trained"])
        for g, s in zip(rows[0::2], rows[1::2], strict=True)
    ]
    print(
        "SAO / GRPO+DIS trained samples per loop-wall second, per seed: "
        + ", ".join(f"{x:.2f}x" for x in ratio)
        + "; per run-CPU second (evaluation included): "
        + ", ".join(f"{x:.2f}x" for x in cpu)
    )
    out = {"rows": rows, "paired_points": [100 * diff.diff.mean, *(100 * x for x in diff.interval)]}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


def train_once(config: str, overrides, *, steps, seed, root, telemetry, threads) -> dict:
    """One training run (in its own process): start/end accuracy, trained samples, loop wall
    time and the process's CPU time for the whole run."""
    torch.set_num_threads(threads)
    from core.driver import resolve_config, run_training

    cfg = resolve_config(CONFIGS / config, overrides, steps=steps, seed=seed)
    c0 = time.process_time()
    _, summary = run_training(
        cfg, runs_root=root, telemetry=telemetry, name="bench", progress=False
    )
    ms = summary["steps"]
    return {
        "start": summary["eval_accuracy_start"],
        "end": summary["eval_accuracy_end"],
        "trained": sum(m.get("trained_samples", m.get("n_trajectories", 0)) for m in ms),
        "loop_s": sum(m["wall_step_s"] for m in ms),
        "cpu_s": time.process_time() - c0,
    }


def isolated(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in a fresh spawned process (runs share no allocator state)."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(fn, *args, **kwargs).result()


if __name__ == "__main__":
    main()

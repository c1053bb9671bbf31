"""CompactionRL against baselines that show the method's share, and its two ablations, over seeds.

Arms (each starts from the shipped base ``core/assets/longhorizon_model`` with the same seed,
steps and episode stream; ``configs/compaction_tiny.toml`` unless stated):
- ``no-compaction RL``: trained on full histories (``compaction.enabled=false``, up to
  ``model.max_seq_len`` = 96), its summaries never trained. Evaluated twice: with its full history
  (**the ceiling**: the facts are all in context) and compacted at the budget C = 64 (the seed's
  "ordinary RL" row: a model that never learned to summarise, deployed with compaction);
- ``untrained summaries``: compaction on in training, the summary tokens out of the loss
  (``compaction.train_summaries=false``)
  (only the actions train; the summaries stay the base's). What RL gets from compacted rollouts
  without learning to summarise;
- ``CompactionRL``: summaries are trained actions, (γλ)^{N_{>s}}, global-token loss;
- ``w/o token-level loss``: the mean of per-segment token means (``seq-mean-token-mean``);
- ``w/o cross-trajectory GAE``: local segment advantages (``cross_segment_discount=false``).
(The seed's table, GLM-4.5-Air on SWE-bench Verified: base 59.8, ordinary RL 62.5, CompactionRL
66.8, without token-level loss 60.0, without cross-trajectory GAE 63.0.)
Held-out greedy success (n = ``--eval-size``, a fixed eval set) compacted and with the full history,
before and after; per arm mean ± sd over seeds; each arm against CompactionRL as the paired
difference (same seed) with its 95% interval (``benchmarks/stats.py``), a tie when it spans 0.
Runs go to ``--jobs`` spawned processes (one torch thread each by default); wall and CPU seconds.
Usage: python benchmarks/compaction.py [--steps N (60)] [--seeds S ...] [--only ARM] [--json F]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402

warnings.filterwarnings("ignore")
CONFIG = Path(__file__).resolve().parent.parent / "configs" / "compaction_tiny.toml"
REFERENCE = "CompactionRL"
ARMS = {  # name -> the one config setting it differs in from CompactionRL
    "no-compaction RL": ["compaction.enabled=false"],
    "untrained summaries": ["compaction.train_summaries=false"],
    "CompactionRL": [],
    "w/o token-level loss": ['algorithm.loss_agg_mode="seq-mean-token-mean"'],
    "w/o cross-trajectory GAE": ["compaction.cross_segment_discount=false"],
}
ORDER = ["CompactionRL", "untrained summaries", "no-compaction RL", *list(ARMS)[3:]]
"""Run order within a seed: the reference and its baselines first, then the ablations."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one process each)")
    ap.add_argument("--only", action="append", default=[], choices=list(ARMS))
    ap.add_argument("--set", action="append", default=[], help="config override section.key=value")
    ap.add_argument("--json", default=None, help="write every run's result here")
    ap.add_argument(
        "--report", nargs="+", default=None, help="only print the tables of --json files (merged)"
    )
    args = ap.parse_args()
    if args.report:
        runs = [r for f in args.report for r in json.loads(Path(f).read_text())]
    else:
        runs = measure(args)
    report(runs)


def measure(args) -> list[dict]:
    arms = [a for a in ORDER if not args.only or a in args.only]
    jobs = [(arm, seed) for seed in args.seeds for arm in arms]  # seed-major: pairs finish early
    ctx = multiprocessing.get_context("spawn")
    # spawned workers reused across runs (imports under load cost minutes); every run builds its
    # own session, so only allocator state carries over (memory is not measured here)
    with ProcessPoolExecutor(args.jobs, mp_context=ctx) as pool:
        futs = [
            pool.submit(
                train_once,
                arm,
                [f"train.eval_size={args.eval_size}", "train.eval_every=0", *args.set],
                steps=args.steps,
                seed=seed,
                threads=args.threads,
            )
            for arm, seed in jobs
        ]
        runs = []
        for f in as_completed(futs):
            r = f.result()
            runs.append(r)
            if args.json:  # after every run: a cut-short programme keeps what it measured
                Path(args.json).write_text(json.dumps(runs, indent=1))
            print(
                f"{r['arm']} seed {r['seed']}: compacted {r['start']:.3f} -> {r['end']:.3f}, "
                f"full history {r['full_start']:.3f} -> {r['full_end']:.3f}, "
                f"{r['wall']:.0f} s wall, {r['cpu']:.0f} s CPU, load {r['load']}",
                flush=True,
            )
    return runs


def train_once(arm: str, overrides: list[str], *, steps: int, seed: int, threads: int) -> dict:
    """One run (in its own process): compacted and full-history held-out success, timings."""
    torch.set_num_threads(threads)
    from core.driver import resolve_config
    from core.loops.compaction_rl import compaction_step
    from core.loops.evaluate import evaluate_compaction
    from core.loops.loop import run_steps
    from core.loops.session import Session
    from observability.telemetry import NullTelemetry

    extra = ARMS[arm]
    cfg = resolve_config(CONFIG, [*overrides, *extra], steps=steps, seed=seed)
    t0, c0 = time.time(), time.process_time()
    s = Session(cfg, NullTelemetry())
    full_start = full_history_accuracy(s)
    out = run_steps(s, compaction_step, steps=steps, evaluate_fn=evaluate_compaction)
    full_end = full_history_accuracy(s)
    ms = out["steps"]
    return {
        "arm": arm,
        "seed": seed,
        "steps": steps,
        "start": out["eval_accuracy_start"],
        "end": out["eval_accuracy_end"],
        "full_start": full_start,
        "full_end": full_end,
        "wall": time.time() - t0,
        "cpu": time.process_time() - c0,
        "trajectories": sum(m["n_trajectories"] for m in ms),
        "updates": s.version,  # policy optimizer steps taken
        "reward_last5": sum(m["reward_mean"] for m in ms[-5:]) / max(len(ms[-5:]), 1),
        "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def full_history_accuracy(s) -> float:
    """Held-out greedy success without compaction: the whole history in context (up to
    ``model.max_seq_len``), through the same rollout as the compacted evaluation."""
    from core.rollout.compaction import collect_compacted, counter_ids
    from core.rollout.sampling import SamplingParams

    envs = s.envs.eval_set(s.cfg.train.eval_size)
    params = SamplingParams(max_new_tokens=s.cfg.rollout.max_new_tokens)
    ok = 0
    for start in range(0, len(envs), 128):
        chunk = envs[start : start + 128]
        out = collect_compacted(
            s.engine,
            chunk,
            params,
            tok=s.tok,
            cfg=s.cfg.compaction,
            new_ids=counter_ids(),
            group_ids=torch.arange(len(chunk)),
            greedy=True,
            max_turns=s.cfg.rollout.max_turns,
            enabled=False,
        )
        ok += sum(r is None for r in out.traj.failure_reason)  # one row per trajectory
    return ok / len(envs)


def report(runs: list[dict]) -> None:
    by_arm: dict[str, dict[int, dict]] = {}
    for r in runs:
        by_arm.setdefault(r["arm"], {})[r["seed"]] = r
    seeds = sorted({r["seed"] for r in runs})
    steps = sorted({r["steps"] for r in runs})
    print(
        f"\nsteps {steps}, seeds {seeds}: held-out greedy success (points, mean ± sd (min–max)); "
        f"'compacted' at the budget C, 'full history' without compaction"
    )
    print("| arm | eval | start | end | Δ points | vs CompactionRL (paired, 95% CI) |")
    print("|---|---|---|---|---|---|")
    ref = by_arm.get(REFERENCE, {})
    for arm in ARMS:
        if arm not in by_arm:
            continue
        rows = [("compacted", "start", "end")]
        if arm == "no-compaction RL":
            rows.insert(0, ("full history (ceiling)", "full_start", "full_end"))
        for label, k0, k1 in rows:
            rs = [by_arm[arm][s] for s in seeds if s in by_arm[arm]]
            end = stats.summary([r[k1] for r in rs])
            delta = stats.summary([r[k1] - r[k0] for r in rs])
            start = stats.summary([r[k0] for r in rs])
            both = [s for s in seeds if s in by_arm[arm] and s in ref]
            vs = "—"
            if arm != REFERENCE and len(both) >= 2:
                p = stats.paired([by_arm[arm][s][k1] for s in both], [ref[s]["end"] for s in both])
                lo, hi = (100 * x for x in p.interval)
                vs = f"{100 * p.diff.mean:+.1f} [{lo:+.1f}, {hi:+.1f}]: {verdict(p, arm)}"
            print(
                f"| {arm} | {label} | {100 * start.mean:.1f} | {end.fmt(1, 100)} | "
                f"{delta.fmt(1, 100)} | {vs} |"
            )
    print(
        "\n| arm | full history at end | sampled reward, last 5 steps | policy updates | wall per "
        "run | CPU per run | trajectories/CPU s |"
    )
    print("|---|---|---|---|---|---|---|")
    for arm in ARMS:
        rs = list(by_arm.get(arm, {}).values())
        if not rs:
            continue
        full = stats.summary([r["full_end"] for r in rs])
        wall = stats.summary([r["wall"] for r in rs])
        cpu = stats.summary([r["cpu"] for r in rs])
        tps = sum(r["trajectories"] for r in rs) / sum(r["cpu"] for r in rs)
        have = [r for r in rs if "updates" in r]  # (recorded since 2026-12-04)
        reward = stats.summary([r["reward_last5"] for r in have]).fmt(2) if have else "—"
        updates = "/".join(str(r["updates"]) for r in have) or "—"
        print(
            f"| {arm} | {full.fmt(1, 100)} | {reward} | {updates} | {wall.mean:.0f} ± "
            f"{wall.sd:.0f} s | {cpu.mean:.0f} ± {cpu.sd:.0f} s | {tps:.2f} |"
        )
    print("load averages at the end of each run: " + "; ".join(r["load"] for r in runs))


def verdict(p: stats.Paired, arm: str) -> str:
    v = p.verdict(arm, REFERENCE)
    return "tie" if v == "tie" else ("ahead" if v.startswith(arm) else "behind")


if __name__ == "__main__":
    main()

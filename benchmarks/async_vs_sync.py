"""Async vs sync agentic RL on the multi-turn calculator, side by side in one run.

The same config (``configs/agentic_tiny.toml``: DIS, the seed's IS update, 8 prompts × 8 samples a
step), the same environment latencies (lognormal, median ``--latency`` s, σ 1.2: p99/p50 = 16),
no injected failures, the same number of steps — so the same number of trained samples — run as
``rollout.mode = "sync"`` (collect → train → sync; a turn's environment calls run concurrently, so
each turn waits for its slowest call) and as ``"async"`` on the ``threads`` executor and, with
``--ray``, on Ray actors. Reported per run: trained samples per second of training-loop wall time
(evaluations excluded), held-out greedy accuracy before and after, and the ratio to sync.

    python benchmarks/async_vs_sync.py [--steps 30] [--latency 0.05] [--ray] [--out FILE.json]
        [--engine vllm]   # every engine a vLLM one: the session's, and one per rollout worker
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "agentic_tiny.toml"


def run_one(
    mode: str, executor: str, *, steps: int, latency: float, seed: int, engine: str = "embedded"
) -> dict:
    from core.config import load_config
    from core.loops.async_grpo import run_async
    from core.loops.grpo import run_grpo
    from core.loops.session import Session
    from observability.telemetry import NullTelemetry

    overrides = [
        f'rollout.engine="{engine}"',
        f'rollout.mode="{mode}"',
        f'rollout.executor="{executor}"',
        f"tool.latency_median_s={latency}",
        "tool.latency_sigma=1.2",
        "tool.timeout_s=30.0",
        "tool.timeout_rate=0.0",
        "tool.crash_rate=0.0",
        "tool.malformed_rate=0.0",
        f"train.steps={steps}",
        f"train.seed={seed}",
        "train.eval_every=0",
    ]
    cfg = load_config(CONFIG, overrides)
    s = Session(cfg, NullTelemetry())
    loop = run_async if mode == "async" else run_grpo
    t0 = time.perf_counter()
    out = loop(s, steps=steps)
    total = time.perf_counter() - t0
    per_step = cfg.algorithm.prompts_per_step * cfg.algorithm.group_size
    trained = sum(round(per_step * (1.0 - m["stale_fraction"])) for m in out["steps"])
    wall = sum(m["wall_step_s"] for m in out["steps"])
    return {
        "mode": mode,
        "executor": executor if mode == "async" else "-",
        "steps": steps,
        "trained_samples": trained,
        "train_wall_s": wall,
        "total_s": total,
        "samples_per_s": trained / wall,
        "acc_start": out["eval_accuracy_start"],
        "acc_end": out["eval_accuracy_end"],
        "p99_over_p50": cfg.tool.p99_over_p50,
        "staleness_max": max(m["staleness_max"] for m in out["steps"]),
        "rollout_wait_s": sum(m.get("rollout_wait_s", m["rollout_time_s"]) for m in out["steps"]),
    }


def main(argv=None) -> int:
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--latency", type=float, default=0.05, help="median tool latency (s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ray", action="store_true", help="also run the async loop on Ray actors")
    p.add_argument("--out", default=None, help="write the rows as JSON")
    p.add_argument("--engine", default="embedded", help="rollout.engine: embedded | vllm")
    args = p.parse_args(argv)
    runs = [("sync", "threads"), ("async", "threads")] + ([("async", "ray")] if args.ray else [])
    rows = []
    for mode, executor in runs:
        row = run_one(
            mode,
            executor,
            steps=args.steps,
            latency=args.latency,
            seed=args.seed,
            engine=args.engine,
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = rows[0]["samples_per_s"]
    print(
        f"\n{'run':16s} {'samples/s':>10s} {'ratio':>6s} {'acc start':>9s} {'acc end':>8s} "
        f"{'wall s':>7s} {'stale max':>9s}"
    )
    for r in rows:
        name = r["mode"] + ("/" + r["executor"] if r["mode"] == "async" else "")
        print(
            f"{name:16s} {r['samples_per_s']:10.2f} {r['samples_per_s'] / base:6.2f} "
            f"{r['acc_start']:9.3f} {r['acc_end']:8.3f} {r['train_wall_s']:7.1f} "
            f"{r['staleness_max']:9d}"
        )
    print(
        f"latency p99/p50 = {rows[0]['p99_over_p50']:.1f}; trained samples each: "
        f"{[r['trained_samples'] for r in rows]}"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

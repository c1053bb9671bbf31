"""Async vs sync agentic RL on the multi-turn calculator, side by side in one run: the ratio of
trained samples per second (async / sync) as a curve over tool latency and group size.

The same config (``configs/agentic_tiny.toml``: DIS, the seed's IS update, 8 prompts a step), the
same environment latencies (lognormal, median ``--latencies`` s, σ 1.2: p99/p50 = 16), no
injected failures, the same number of steps — so the same number of trained samples — run as
``rollout.mode = "sync"`` (collect → train → sync; a turn's environment calls run concurrently, so
each turn waits for its slowest call) and as ``"async"`` on the ``threads`` executor and, with
``--ray``, on Ray actors. For every (latency, group size, seed) the arms run one after the other,
their order alternating with the seed, so the host's load falls on both alike. Reported per run:
trained samples per second of training-loop wall time (evaluations excluded), samples per CPU
second of the process, held-out greedy accuracy before and after, the load average; per point the
async/sync ratio over seeds (mean ± sd, 95% interval) and the held-out accuracy of each arm with
the paired difference async − sync (a tie when its interval spans 0).

    python benchmarks/async_vs_sync.py [--steps 10] [--latencies 0,0.005,0.02,0.05]
        [--group-sizes 4,8] [--seeds 0,1,2] [--ray] [--out FILE.json]
        [--engine vllm]   # every engine a vLLM one: the session's, and one per rollout worker
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "agentic_tiny.toml"


def run_one(
    mode: str,
    executor: str,
    *,
    steps: int,
    latency: float,
    seed: int,
    group_size: int = 8,
    engine: str = "embedded",
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
        f"algorithm.group_size={group_size}",
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
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    out = loop(s, steps=steps)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    per_step = cfg.algorithm.prompts_per_step * cfg.algorithm.group_size
    trained = sum(round(per_step * (1.0 - m["stale_fraction"])) for m in out["steps"])
    wall = sum(m["wall_step_s"] for m in out["steps"])
    return {
        "mode": mode,
        "executor": executor if mode == "async" else "-",
        "latency": latency,
        "group_size": group_size,
        "seed": seed,
        "steps": steps,
        "trained_samples": trained,
        "train_wall_s": wall,
        "total_s": total,
        "process_cpu_s": cpu,
        "samples_per_s": trained / wall,
        "acc_start": out["eval_accuracy_start"],
        "acc_end": out["eval_accuracy_end"],
        "p99_over_p50": cfg.tool.p99_over_p50,
        "staleness_max": max(m["staleness_max"] for m in out["steps"]),
        "rollout_wait_s": sum(m.get("rollout_wait_s", m["rollout_time_s"]) for m in out["steps"]),
        "load_avg_1m": load,
    }


def main(argv=None) -> int:
    warnings.filterwarnings("ignore")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--latencies", default="0,0.005,0.02,0.05", help="median tool latencies (s)")
    p.add_argument("--group-sizes", default="4,8")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--ray", action="store_true", help="also run the async loop on Ray actors")
    p.add_argument("--out", default=None, help="write the rows and the curve as JSON")
    p.add_argument("--engine", default="embedded", help="rollout.engine: embedded | vllm")
    args = p.parse_args(argv)
    arms = [("sync", "threads"), ("async", "threads")] + ([("async", "ray")] if args.ray else [])
    seeds = [int(x) for x in args.seeds.split(",")]
    rows, curve = [], []
    for latency in [float(x) for x in args.latencies.split(",")]:
        for g in [int(x) for x in args.group_sizes.split(",")]:
            point = []
            for seed in seeds:
                order = arms if seed % 2 == 0 else list(reversed(arms))
                by_arm = {}
                for mode, executor in order:
                    row = run_one(
                        mode,
                        executor,
                        steps=args.steps,
                        latency=latency,
                        seed=seed,
                        group_size=g,
                        engine=args.engine,
                    )
                    print(json.dumps(row), flush=True)
                    by_arm[arm_name(row)] = row
                    rows.append(row)
                point.append(by_arm)
            curve.append(summarize_point(latency, g, point))
            print_point(curve[-1], flush=True)
    print_curve(curve, steps=args.steps)
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows, "curve": curve}, indent=2))
    return 0


def arm_name(row: dict) -> str:
    return row["mode"] + ("/" + row["executor"] if row["mode"] == "async" else "")


def summarize_point(latency: float, g: int, point: list[dict]) -> dict:
    """One (latency, group size) point over seeds: ratios to sync, accuracies, paired Δ."""
    sync = [p["sync"] for p in point]
    out = {"latency": latency, "group_size": g, "seeds": len(point), "arms": {}}
    for name in point[0]:
        runs = [p[name] for p in point]
        ratio = stats.summary([r["samples_per_s"] / s["samples_per_s"] for r, s in zip(runs, sync)])
        cpu = stats.summary(
            [
                (r["trained_samples"] / r["process_cpu_s"])
                / (s["trained_samples"] / s["process_cpu_s"])
                for r, s in zip(runs, sync)
            ]
        )
        acc = stats.summary([r["acc_end"] for r in runs])
        diff = stats.paired([r["acc_end"] for r in runs], [s["acc_end"] for s in sync])
        out["arms"][name] = {
            "samples_per_s": stats.summary([r["samples_per_s"] for r in runs]).mean,
            "ratio": [ratio.mean, ratio.sd, *ratio.interval],
            "ratio_fmt": ratio.fmt(2),
            "cpu_ratio_fmt": cpu.fmt(2),
            "acc_start": stats.summary([r["acc_start"] for r in runs]).mean,
            "acc_end_fmt": acc.fmt(3),
            "acc_vs_sync": diff.fmt(name, "sync", 3),
            "load_avg": [r["load_avg_1m"] for r in runs],
            "staleness_max": max(r["staleness_max"] for r in runs),
        }
    return out


def print_point(c: dict, flush: bool = False) -> None:
    print(f"latency {1e3 * c['latency']:g} ms, G={c['group_size']}, {c['seeds']} seeds:")
    for name, a in c["arms"].items():
        print(
            f"  {name:14s} {a['samples_per_s']:7.1f} samples/s; / sync {a['ratio_fmt']} "
            f"(per CPU s {a['cpu_ratio_fmt']}); held-out {a['acc_start']:.3f} -> "
            f"{a['acc_end_fmt']}; load {', '.join(f'{x:.1f}' for x in a['load_avg'])}",
            flush=flush,
        )
        if name != "sync":
            print(f"    {a['acc_vs_sync']}", flush=flush)


def print_curve(curve: list[dict], *, steps: int) -> None:
    print(f"\nasync / sync trained samples/s ({steps} steps a run; mean ± sd over seeds):")
    names = [n for n in curve[0]["arms"] if n != "sync"]
    print(f"{'latency':>8s} {'G':>3s} " + " ".join(f"{n:>28s}" for n in names))
    for c in curve:
        cells = " ".join(
            f"{c['arms'][n]['ratio'][0]:>12.2f} ± {c['arms'][n]['ratio'][1]:.2f} "
            f"[{c['arms'][n]['ratio'][2]:.2f}, {c['arms'][n]['ratio'][3]:.2f}]"
            for n in names
        )
        print(f"{1e3 * c['latency']:6g}ms {c['group_size']:3d} {cells}")


if __name__ == "__main__":
    raise SystemExit(main())

"""Every fault-injection scenario at full length, diagnosed from its telemetry, against its control.

For each scenario in ``configs/scenarios/`` (its own ``train.steps``, default batch) and seed:
final reward (mean of the last ``--tail`` steps) and its start (mean of the first ``--tail``),
held-out greedy accuracy start → end, the collapse onset step and the top suspect of
``observability.analysis`` (given the run's telemetry only) next to the cause the scenario
injected. ``--controls`` also runs each fault's control: its one ``[scenario] control`` setting
switched, everything else — e.g. a raised learning rate or temperature — kept, which separates
what the fault does from what its strengthening does.

A control is **healthy** when it has no collapse onset, its held-out accuracy ends no more than
``EVAL_SLACK`` below its start (about one binomial standard error of 128 prompts at p = 0.5) and
its final reward keeps at least half of its starting reward. A control is **quiet** when no
suspect moved, or only one of ``EXPLAINED`` that is not the fault's own cause. A scenario is
**diagnosed** on a seed when the fault's top suspect is the injected cause and its control is
healthy and quiet. Prints one Markdown row per run, then per scenario the seeds' summary.
Usage: ``python benchmarks/scenarios.py --controls [--steps N] [--only a,b] [--seeds 0,1,2]
[--jobs 2] [--run-dir DIR]`` (each run in its own process with one torch thread);
``--report LOG...`` re-reports the rows that earlier invocations printed.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import stats  # noqa: E402  (benchmarks/stats.py)

EVAL_SLACK = 0.05
EXPLAINED = {
    "staleness": "an async run trains samples up to τ policy versions old by design "
    "(agentic_tiny: τ = 4, the rollout a step or two ahead)",
    "train_rollout_mismatch": "a 16-bit-activation engine (bf16, w4a16) differs from the fp32 "
    "trainer by ~4e-3–8e-3 nats per token, above the signal's τ = 1e-3",
}
"""Suspects a healthy control may show, with why, when the fault's cause is another one."""

COLUMNS = ("run", "seed", "reward", "eval acc", "onset", "top suspect", "injected", "verdict", "s")


def measure(job: tuple[str, int, bool], *, runs_root: str, steps: int | None, tail: int) -> dict:
    """Train one run — ``job`` = (scenario, seed, is its control) — and diagnose its telemetry."""
    import torch

    from core.scenario import load_scenario, run_scenario

    name, seed, control = job
    torch.set_num_threads(1)
    t0 = time.time()
    overrides = (f"train.seed={seed}", *(load_scenario(name).control if control else ()))
    run_dir, _ = run_scenario(name, runs_root=runs_root, steps=steps, overrides=overrides)
    return diagnose(run_dir, job, tail=tail) | {"s": time.time() - t0}


def diagnose(run_dir, job: tuple[str, int, bool], *, tail: int = 5) -> dict:
    """Reward start/end, held-out accuracy first/last eval, onset and top suspect of a run."""
    from core.scenario import load_scenario
    from observability import analysis as A
    from observability import open_run

    name, seed, control = job
    con = open_run(run_dir)
    m = A.step_metrics(con)
    onset = A.collapse_onset(con)
    evals = con.execute(
        "SELECT step, any_value(accuracy) FROM evals WHERE split = 'heldout' "
        "AND accuracy IS NOT NULL GROUP BY step ORDER BY step"
    ).fetchall()
    return {
        "name": name,
        "control": control,
        "run": f"{name} (control)" if control else name,
        "seed": seed,
        "reward0": float(m["reward_mean"].head(tail).mean()),
        "reward": float(m["reward_mean"].tail(tail).mean()),
        "eval0": float(evals[0][1]),
        "eval": float(evals[-1][1]),
        "onset": None if onset.step is None else f"{onset.step} ({onset.metric})",
        "top": A.top_suspect(con, onset=onset),
        "expect": load_scenario(name).expect_suspect,
        "run_dir": str(run_dir),
        "s": None,  # measure() adds the run's wall seconds
    }


def healthy(r: dict) -> bool:
    """No onset, held-out accuracy not down by more than EVAL_SLACK, reward not fallen to ~0."""
    return (
        r["onset"] is None
        and r["eval"] >= r["eval0"] - EVAL_SLACK
        and r["reward"] >= 0.5 * r["reward0"]
    )


def quiet(r: dict) -> bool:
    """No suspect moved, or only an EXPLAINED one that is not the fault's own cause."""
    return r["top"] is None or (r["top"] in EXPLAINED and r["top"] != r["expect"])


def verdict(r: dict) -> str:
    if not r["control"]:
        return "" if not r["expect"] else ("cause top" if r["top"] == r["expect"] else "NO")
    calm = "quiet" if r["top"] is None else ("explained" if quiet(r) else "NOT QUIET")
    return ("healthy" if healthy(r) else "NOT HEALTHY") + ", " + calm


def row(r: dict) -> str:
    cells = {
        "run": r["run"],
        "seed": r["seed"],
        "reward": f"{r['reward0']:.3f} → {r['reward']:.3f}",
        "eval acc": f"{r['eval0']:.2f} → {r['eval']:.2f}",
        "onset": r["onset"] or "none",
        "top suspect": r["top"] or "none",
        "injected": r["expect"] or "—",
        "verdict": verdict(r),
        "s": "—" if r["s"] is None else f"{r['s']:.0f}",
    }
    return "| " + " | ".join(str(cells[c]) for c in COLUMNS) + " |"


def diagnosed(rows: list[dict], name: str, seed: int) -> bool | None:
    """Fault's top suspect = its cause, control healthy and quiet (None: not both arms ran)."""
    arms = {r["control"]: r for r in rows if r["name"] == name and r["seed"] == seed}
    if set(arms) != {False, True}:
        return None
    f, c = arms[False], arms[True]
    return f["top"] == f["expect"] and healthy(c) and quiet(c)


def top_vs_control(rows: list[dict], name: str, seed: int) -> str:
    """The fault's top suspect with its control run as the baseline (``explain --baseline``)."""
    from observability import analysis as A
    from observability import open_run

    arms = {r["control"]: r.get("run_dir") for r in rows if r["name"] == name and r["seed"] == seed}
    if not (arms.get(False) and arms.get(True)):
        return "—"
    top = A.top_suspect(open_run(arms[False]), baseline=open_run(arms[True]))
    return top or "none"


def report(rows: list[dict]) -> tuple[str, int, int]:
    """The per-run table, the per-scenario summary over seeds, and (diagnosed, scenarios)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += [row(r) for r in sorted(rows, key=lambda r: (r["name"], r["seed"], r["control"]))]
    lines += [
        "",
        "| scenario | fault eval end | control eval end | control − fault (paired) "
        "| fault's top vs its control | diagnosed |",
        "|---|---|---|---|---|---|",
    ]
    n_ok = n_all = 0
    for name in dict.fromkeys(r["name"] for r in rows):
        seeds = sorted({r["seed"] for r in rows if r["name"] == name})
        verdicts = [diagnosed(rows, name, s) for s in seeds]
        if all(v is None for v in verdicts) or not any(
            r["expect"] for r in rows if r["name"] == name
        ):
            continue
        arm = {
            c: {r["seed"]: r["eval"] for r in rows if r["name"] == name and r["control"] is c}
            for c in (False, True)
        }
        both = sorted(set(arm[False]) & set(arm[True]))
        gap = stats.paired([arm[True][s] for s in both], [arm[False][s] for s in both])
        k = sum(bool(v) for v in verdicts)
        n_all += 1
        n_ok += k == len(verdicts)
        lines.append(
            f"| {name} | {stats.summary(list(arm[False].values())).fmt(2)} "
            f"| {stats.summary(list(arm[True].values())).fmt(2)} "
            f"| {gap.fmt('control', 'fault', 2) if len(both) > 1 else '—'} "
            f"| {', '.join(top_vs_control(rows, name, s) for s in seeds)} | {k}/{len(verdicts)} |"
        )
    return "\n".join(lines), n_ok, n_all


def main(argv: list[str] | None = None) -> int:
    from core.scenario import list_scenarios, load_scenario, scenario_config

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="override every scenario's train.steps")
    p.add_argument("--only", default=None, help="comma-separated scenario names")
    p.add_argument("--controls", action="store_true", help="also run each fault's control")
    p.add_argument("--seeds", default="0", help="comma-separated train.seed values")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (one process each)")
    p.add_argument("--tail", type=int, default=5, help="steps averaged for the final values")
    p.add_argument("--run-dir", default=None, help="keep the runs here (default: a temp dir)")
    p.add_argument("--report", nargs="+", default=None, help="only re-report these runs' logs")
    args = p.parse_args(argv)
    if args.report:  # the row dicts earlier invocations printed, one per line
        lines = [ln for f in args.report for ln in Path(f).read_text().splitlines()]
        rows = [ast.literal_eval(ln) for ln in lines if ln.startswith("{'name': ")]
        table, n_ok, n_all = report(rows)
        print(f"{table}\n\ndiagnosed on every seed: {n_ok}/{n_all} scenarios")
        return 0 if n_ok == n_all else 1
    names = list_scenarios()
    if args.only:
        wanted = set(args.only.split(","))
        names = [n for n in names if n in wanted]
    root = args.run_dir or tempfile.mkdtemp(prefix="closedloop-scenarios-")
    runnable = []
    for name in names:
        missing = load_scenario(name).missing(scenario_config(name))
        if missing:  # a teacher / judge scenario whose artifacts were not trained here
            print(f"skipped {name}: make {sorted(missing)} first: {list(missing.values())}")
            continue
        runnable.append(name)
    jobs = [  # seed-major: every scenario's first seed finishes first
        (name, int(seed), arm)
        for seed in args.seeds.split(",")
        for name in runnable
        for arm in ((False, True) if args.controls and load_scenario(name).control else (False,))
    ]
    rows = []
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
        futures = {
            pool.submit(measure, j, runs_root=root, steps=args.steps, tail=args.tail): j
            for j in jobs
        }
        for fut in as_completed(futures):
            try:
                rows.append(fut.result())
            except Exception as e:  # one broken run is reported, the others still count
                print(f"FAILED {futures[fut]}: {e!r}", flush=True)
                continue
            print(rows[-1], flush=True)
    table, n_ok, n_all = report(rows)
    print(f"\nruns under {root}\n\n{table}\n\ndiagnosed on every seed: {n_ok}/{n_all} scenarios")
    return 0 if n_ok == n_all else 1


if __name__ == "__main__":
    raise SystemExit(main())

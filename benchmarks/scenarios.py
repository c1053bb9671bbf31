"""Every fault-injection scenario at full length, diagnosed from its telemetry, against ``healthy``.

For each scenario in ``configs/scenarios/`` (its own ``train.steps``, default batch): final reward
and entropy (mean of the last ``--tail`` steps) and their difference from ``healthy``, held-out
greedy accuracy start → end, the collapse onset step and the top suspect of
``observability.analysis`` (given the run's telemetry only) next to the cause the scenario
injected. ``--controls`` also runs each fault's control (its ``[scenario] control`` overrides: the
fault switched off, everything else — e.g. a raised learning rate or temperature — kept), which
separates what the fault does from what its strengthening does. Prints a Markdown table.
Usage: ``python benchmarks/scenarios.py [--steps N] [--only a,b] [--controls] [--run-dir DIR]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from core.scenario import list_scenarios, load_scenario, run_scenario, scenario_config
from observability import analysis as A
from observability import open_run

COLUMNS = (
    "run",
    "reward",
    "Δ reward",
    "entropy",
    "Δ entropy",
    "eval acc",
    "onset",
    "top suspect",
    "injected",
    "ok",
    "s",
)


def measure(
    name: str,
    *,
    runs_root: str,
    steps: int | None,
    tail: int,
    overrides: tuple[str, ...] = (),
    label: str | None = None,
) -> dict:
    """Train one scenario (plus ``overrides``) and diagnose it from its telemetry."""
    t0 = time.time()
    run_dir, summary = run_scenario(name, runs_root=runs_root, steps=steps, overrides=overrides)
    con = open_run(run_dir)
    m = A.step_metrics(con)
    onset = A.collapse_onset(con)
    expect = None if overrides else load_scenario(name).expect_suspect
    top = A.top_suspect(con, onset=onset)
    return {
        "run": label or name,
        "reward": float(m["reward_mean"].tail(tail).mean()),
        "entropy": float(m["entropy"].tail(tail).mean()),
        "eval acc": f"{summary['eval_accuracy_start']:.2f} → {summary['eval_accuracy_end']:.2f}",
        "onset": "none" if onset.step is None else f"{onset.step} ({onset.metric})",
        "top suspect": top or "none",
        "injected": expect or ("—" if overrides else "none"),
        "ok": "" if overrides else ("yes" if top == expect else "NO"),
        "s": f"{time.time() - t0:.0f}",
    }


def markdown(rows: list[dict]) -> str:
    base = next(r for r in rows if r["run"] == "healthy")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = dict(
            r,
            **{
                "reward": f"{r['reward']:.3f}",
                "entropy": f"{r['entropy']:.3f}",
                "Δ reward": f"{r['reward'] - base['reward']:+.3f}",
                "Δ entropy": f"{r['entropy'] - base['entropy']:+.3f}",
            },
        )
        lines.append("| " + " | ".join(str(cells[c]) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=None, help="override every scenario's train.steps")
    p.add_argument("--only", default=None, help="comma-separated scenario names (healthy is added)")
    p.add_argument("--controls", action="store_true", help="also run each fault's control")
    p.add_argument("--tail", type=int, default=5, help="steps averaged for the final values")
    p.add_argument("--run-dir", default=None, help="keep the runs here (default: a temp dir)")
    args = p.parse_args(argv)
    names = list_scenarios()
    if args.only:
        wanted = {"healthy", *args.only.split(",")}
        names = [n for n in names if n in wanted]
    root = args.run_dir or tempfile.mkdtemp(prefix="closedloop-scenarios-")
    rows = []
    for name in names:
        missing = load_scenario(name).missing(scenario_config(name))
        if missing:  # a teacher / judge scenario whose artifacts were not trained here
            print(f"skipped {name}: make {sorted(missing)} first: {list(missing.values())}")
            continue
        rows.append(measure(name, runs_root=root, steps=args.steps, tail=args.tail))
        print(rows[-1], flush=True)
        control = load_scenario(name).control
        if args.controls and control:
            rows.append(
                measure(
                    name,
                    runs_root=root,
                    steps=args.steps,
                    tail=args.tail,
                    overrides=control,
                    label=f"{name} (control)",
                )
            )
            print(rows[-1], flush=True)
    print(f"\nruns under {root}\n")
    print(markdown(rows))
    return 0 if all(r["ok"] != "NO" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

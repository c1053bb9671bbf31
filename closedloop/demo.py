"""``closedloop demo``: the main job — a short GRPO run with telemetry, a DuckDB query over it,
then the release gate on the run (its exit code is the command's)."""

from __future__ import annotations

from core.driver import print_summary, resolve_config, run_training


def _demo(args) -> int:
    cfg = resolve_config(None, [], steps=args.steps)
    run_dir, summary = run_training(cfg, runs_root=args.run_dir, telemetry="duckdb", name="demo")
    print_summary(run_dir, summary)
    print("\nmean |train_logp - rollout_logp| per step (DuckDB over the run's telemetry):")
    from observability import open_run

    con = open_run(run_dir)
    rows = con.execute(
        "SELECT step, avg(abs(train_logp - rollout_logp)) AS mismatch, count(*) AS n "
        "FROM tokens WHERE role = 'action' GROUP BY step ORDER BY step"
    ).fetchall()
    for step, mismatch, n in rows[:5] + ([("...", None, None)] if len(rows) > 5 else []):
        print(f"  step {step}: {mismatch:.3e} over {n} tokens" if n else "  ...")
    print(f"\ngate: closedloop gate {run_dir}")
    from contracts import run_gate
    from contracts.report import format_table

    gate = run_gate(run_dir)
    print(format_table(gate))
    print(f"\nopen the dashboard: closedloop dashboard {args.run_dir}  (or: make dashboard)")
    return gate.exit_code


def register(sub) -> None:
    p = sub.add_parser("demo", help="the main job: a short GRPO run with telemetry, then the gate")
    p.add_argument("--run-dir", default="runs")
    p.add_argument("--steps", type=int, default=None)
    p.set_defaults(func=_demo)

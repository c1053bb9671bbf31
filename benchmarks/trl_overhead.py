"""Cost of closedloop's TRL integration per TRL step: benchmarks/vs_trl.py's TRL side (TRL 1.16
``GRPOTrainer``, the default config: 8 prompts x 8 completions per step, transformers
generation on the CPU) trained with and without ``closedloop.integrations.trl.record``,
interleaved run by run (off, on, then on, off, ...) so the machine's load falls on both alike.

A step is measured from one ``on_step_begin`` to the next (the last to ``on_train_end``), so it
holds everything the integration adds: the captures, the step's rows, the sink's ``emit`` and
the logged step; its CPU is the process CPU (every thread: the sink's writer thread included).
The first step of each run is left out (warm-up). Beside the side-by-side difference (noisy on
a loaded machine), the integration's own CPU: its hooks' training-thread CPU
(``TRLRecorder.cpu_s``) plus the sink's writer thread, per step. Both sides must train identically (the
integration reads and never changes TRL's numbers): the script checks the logged losses.
Live lag (``--live-steps N``, 0: off): one more recorded run, read while it trains by the
dashboard's own store (``dashboards.store.RunHandle``, polled every 0.1 s from a thread); a
step's lag is from its ``on_step_end`` to the poll that first shows its ``steps`` row.
Usage: python benchmarks/trl_overhead.py [--rounds 3] [--steps 8] [--threads 1]
[--live-steps 0] [--flush-seconds 2] [--json F]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")


def vs_trl():
    path = Path(__file__).resolve().parent / "vs_trl.py"
    spec = importlib.util.spec_from_file_location("bench_vs_trl", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_run(bench, cfg, base: Path, root: Path, *, recorded: bool, flush_s: float = 2.0) -> dict:
    """Train one TRL run; per-step wall and process-CPU seconds (the first step dropped)."""
    from transformers import TrainerCallback

    trainer = bench.make_trl_trainer(
        cfg, base, root / "trl", questions=bench.step_questions(cfg, cfg.train.steps)
    )
    marks: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            marks.append((time.perf_counter(), time.process_time()))

        def on_train_end(self, args, state, control, **kw):
            marks.append((time.perf_counter(), time.process_time()))

    trainer.add_callback(Clock())
    rec = None
    if recorded:
        from closedloop.integrations.trl import record
        from observability import TelemetryConfig

        telemetry = TelemetryConfig(flush_seconds=flush_s)
        rec = record(trainer, run_dir=root / "runs", name="overhead", telemetry=telemetry)
    trainer.train()
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(marks, marks[1:])]
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    own = None if rec is None else (rec.cpu_s / len(steps), (rec.writer_cpu_s or 0.0) / len(steps))
    return {"steps": steps[1:], "losses": losses, "own_cpu_s": own}


def live_lag(bench, cfg, base: Path, root: Path, *, steps: int) -> list[float]:
    """Seconds from each step's end to the dashboard store showing it (first step excluded)."""
    import threading

    from transformers import TrainerCallback

    from closedloop.integrations.trl import record
    from core.driver import resolve_config
    from dashboards import queries
    from dashboards.store import RunHandle

    cfg = resolve_config(None, [], steps=steps, seed=cfg.train.seed)
    trainer = bench.make_trl_trainer(
        cfg, base, root / "trl", questions=bench.step_questions(cfg, steps)
    )
    ended: dict[int, float] = {}
    seen: dict[int, float] = {}

    class Ends(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ended[state.global_step - 1] = time.time()

    trainer.add_callback(Ends())
    run_dir = record(trainer, run_dir=root / "runs", name="live").run_dir
    done = threading.Event()

    def poll() -> None:
        handle = None
        while not done.is_set():
            if handle is None and (run_dir / "telemetry").is_dir():
                handle = RunHandle(run_dir)
            last = None if handle is None else handle.query(queries.last_step)
            now = time.time()
            for k in range(0 if last is None else last + 1):
                seen.setdefault(k, now)
            time.sleep(0.1)

    reader = threading.Thread(target=poll, name="dashboard-reader")
    reader.start()
    try:
        trainer.train()
        time.sleep(0.5)
    finally:
        done.set()
        reader.join()
    return [seen[k] - ended[k] for k in sorted(ended)[1:] if k in seen]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--live-steps", type=int, default=0)
    ap.add_argument("--flush-seconds", type=float, default=2.0, help="the sink's flush_seconds")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from core.driver import resolve_config
    from core.model.hf_export import export_hf

    bench = vs_trl()
    cfg = resolve_config(None, [], steps=args.steps, seed=0)
    side: dict[bool, list] = {False: [], True: []}
    attributed: list[float] = []
    losses: dict[bool, list] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = export_hf(root / "base")
        for r in range(args.rounds):
            for recorded in (False, True) if r % 2 == 0 else (True, False):
                where = root / f"{r}-{int(recorded)}"
                out = one_run(
                    bench, cfg, base, where, recorded=recorded, flush_s=args.flush_seconds
                )
                side[recorded] += out["steps"]
                losses[recorded].append(out["losses"])
                if recorded:
                    attributed.append(out["own_cpu_s"])
        lags = (
            live_lag(bench, cfg, base, root / "live", steps=args.live_steps)
            if args.live_steps
            else []
        )
    if any(a != losses[False][0] for a in losses[True] + losses[False]):
        raise RuntimeError(f"the recorded runs trained differently: {losses}")
    result = {
        "rounds": args.rounds,
        "steps_per_run": args.steps,
        "threads": args.threads,
        "samples_per_step": cfg.algorithm.prompts_per_step * cfg.algorithm.group_size,
        **{
            f"{name}_{clock}": statistics.median(s[i] for s in side[rec])
            for name, rec in (("off", False), ("on", True))
            for i, clock in enumerate(("wall_s", "cpu_s"))
        },
    }
    for clock in ("wall_s", "cpu_s"):
        result[f"overhead_{clock}"] = result[f"on_{clock}"] / result[f"off_{clock}"] - 1
    result["hooks_cpu_s"] = statistics.fmean(a for a, _ in attributed)
    result["writer_cpu_s"] = statistics.fmean(w for _, w in attributed)
    result["attributed_cpu_s"] = result["hooks_cpu_s"] + result["writer_cpu_s"]
    result["attributed_overhead"] = result["attributed_cpu_s"] / result["off_cpu_s"]
    print(
        f"TRL step, median of {len(side[True])} steps per side ({args.rounds} interleaved "
        f"rounds, {result['samples_per_step']} completions a step, {args.threads} thread):\n"
        f"  without: wall {result['off_wall_s']:.3f} s, CPU {result['off_cpu_s']:.3f} s\n"
        f"  with closedloop: wall {result['on_wall_s']:.3f} s, CPU {result['on_cpu_s']:.3f} s\n"
        f"  overhead: wall {100 * result['overhead_wall_s']:+.1f}%, "
        f"CPU {100 * result['overhead_cpu_s']:+.1f}% (goal <= 5%); losses identical\n"
        f"  the integration's own CPU (its hooks + the sink's writer thread): "
        f"{1000 * result['attributed_cpu_s']:.1f} ms a step = "
        f"{100 * result['attributed_overhead']:.1f}% of the step without it (hooks "
        f"{1000 * result['hooks_cpu_s']:.1f} ms, writer {1000 * result['writer_cpu_s']:.1f} ms)"
    )
    if lags:
        result["live_lag_s"] = {"max": max(lags), "median": statistics.median(lags), "n": len(lags)}
        print(
            f"  live lag, step end -> shown by the dashboard store: max {max(lags):.2f} s, "
            f"median {statistics.median(lags):.2f} s over {len(lags)} steps"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()

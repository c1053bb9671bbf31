"""Peer comparison with TRL: the default GRPO config trained by TRL's ``GRPOTrainer`` and by
closedloop, side by side in one process, interleaved step by step (TRL's step k, then closedloop's
step k) so the machine's load falls on both alike.

Both start from the shipped base model, exported as a Hugging Face directory (``export-hf``).
TRL runs on the CPU with ``transformers`` generation (no vLLM); its reward function is our
arithmetic environment and verifier; its dataset holds, in order, the prompts closedloop draws
at each step (``shuffle_dataset=False``), as chat messages that the exported chat template turns
into exactly our prompt ids (checked for every prompt). closedloop runs with full DuckDB
telemetry. configs/grpo_tiny.toml → ``GRPOConfig``: num_generations = group_size,
per-device batch = prompts_per_step × group_size (one generation and one optimizer step per
step), lr / AdamW betas, eps, weight decay / grad clip as ours with a constant schedule,
beta = 0 (no KL term), loss_type "dapo" (token sum over the batch's completion tokens, our
token-mean), epsilon / epsilon_high = eps_low / eps_high, num_iterations = 1 (π_old = π_θ
detached, as our ``old_logp = "recompute"``), temperature / top-p / top-k and
max_completion_length = rollout.*, fp32, no gradient checkpointing. What cannot be mapped:
TRL's group std is unbiased plus 1e-4 (ours population plus 1e-6), and TRL has no rollout
engine apart from the policy, hence no trust mask (IcePop) to map.
Held-out greedy accuracy is measured for both by our engine and verifier on our eval set; over
``--seeds`` the gains are reported as mean ± sd and the paired difference with its 95% interval
(``benchmarks/stats.py``; a tie when it spans 0). Arms: TRL, closedloop and (``--ablation``, on
by default with the embedded engine) closedloop with ``train.shared_prefix = false``, stepped in
alternating order after TRL's step. Step time: wall and main-thread CPU per step, the first step
left out; the CPU of each closedloop arm's telemetry writer thread is charged to it. Step phases
(rollout, scoring, update, weight sync, telemetry; ``vs_trl_phases``) are timed around each
side's own functions, which run unchanged. ``--engine vllm``: closedloop on
``rollout.engine = "vllm"`` and TRL with ``use_vllm=True, vllm_mode="colocate"`` (both vLLM
engines in this process, both serving bf16: ``VLLM_TRL``).
With ``--record RUNS`` the TRL side is recorded by closedloop's TRL integration
(``closedloop.integrations.trl.record``) into a run under RUNS, which ``closedloop gate`` checks.
Usage: python benchmarks/vs_trl.py [--steps N (config)] [--eval-size 256] [--seeds 0,1,2,3,4]
[--engine embedded|vllm] [--no-ablation] [--threads 1] [--set key=value ...] [--record RUNS]
[--json FILE]    (needs ``pip install 'closedloop[peer]'``)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import vs_trl_phases as phases  # noqa: E402
import vs_trl_report  # noqa: E402
from vs_trl_trainer import check_prompt_ids, make_trl_trainer, trl_records  # noqa: E402

warnings.filterwarnings("ignore")

VLLM_TRL = dict(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=64)
"""TRL's vLLM settings for ``--engine vllm`` (colocate: vLLM in the trainer's process, as
closedloop's engine; TRL's default importance-sampling correction kept). TRL passes vLLM no dtype,
so vLLM's ``auto`` serves the fp32 checkpoint in bf16 on the CPU: closedloop's vLLM engine runs
at ``rollout.precision = "bf16"`` too (``VLLM_CL``), both actors train in fp32."""
VLLM_CL = ['rollout.engine="vllm"', 'rollout.precision="bf16"']


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=None, help="default: the config's train.steps")
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=None, help="one seed (default: the config's)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds, e.g. 0,1,2,3,4")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument(
        "--ablation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also step closedloop with train.shared_prefix=false (a third arm, embedded only)",
    )
    ap.add_argument("--engine", default="embedded", choices=("embedded", "vllm"))
    ap.add_argument("--json", default=None, help="also write the results as JSON here")
    ap.add_argument("--record", default=None, help="record the TRL side as a run under this dir")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from core.driver import resolve_config

    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    sets = list(args.set)
    trl_overrides = {}
    if args.engine == "vllm":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        sets += VLLM_CL
        trl_overrides = VLLM_TRL
    runs = []
    for seed in seeds:
        cfg = resolve_config(None, sets, steps=args.steps, seed=seed)
        with tempfile.TemporaryDirectory() as root:
            r = compare(
                cfg,
                Path(root),
                eval_size=args.eval_size,
                record_to=args.record,
                ablation=args.ablation and args.engine == "embedded",
                **trl_overrides,
            )
        r.update(threads=args.threads, engine=args.engine, load_avg=os.getloadavg())
        vs_trl_report.report_run(r)
        runs.append(r)
    result = {"runs": runs, "summary": vs_trl_report.summarize(runs)}
    vs_trl_report.report_summary(result["summary"])
    if args.json:
        out = {**result, "summary": vs_trl_report.to_json(result["summary"])}
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return result


def compare(
    cfg, root: Path, *, eval_size: int, record_to: str | None = None, ablation: bool = False, **trl
) -> dict:
    """Train the sides interleaved (TRL's step k, then each closedloop arm's step k, the arms'
    order alternating); returns accuracies, per-step timings and phases, and what each recorded.
    ``ablation``: a second closedloop arm with ``train.shared_prefix = false``; ``record_to``:
    record the TRL side with closedloop's TRL integration under this directory; ``trl``: other
    ``GRPOConfig`` values (``VLLM_TRL``)."""
    import dataclasses

    from transformers import TrainerCallback

    from core.model.hf_export import export_hf

    base = export_hf(root / "base")
    arms = {"closedloop": cfg}
    if ablation:
        arms["closedloop_noshare"] = dataclasses.replace(
            cfg, train=dataclasses.replace(cfg.train, shared_prefix=False)
        )
    sides, threads = {}, {}
    for name, arm_cfg in arms.items():
        before = set(other_threads_cpu())
        sides[name] = ClosedloopSide(arm_cfg, root / "runs" / name)
        threads[name] = [k for k in other_threads_cpu() if k not in before]
    cl = sides["closedloop"]
    clock = phases.PhaseClock()
    for side in sides.values():
        phases.time_closedloop_sync(side.s, clock)
    trl = make_trl_trainer(
        cfg,
        base,
        root / "trl",
        questions=cl.step_questions(cfg.train.steps),
        trainer_class=phases.timed_trl_class(clock),
        **trl,
    )
    phases.time_trl_vllm_sync(trl, clock)
    check_prompt_ids(trl.processing_class, cl)
    recorder = None
    if record_to is not None:
        from closedloop.integrations.trl import record

        recorder = record(trl, run_dir=record_to, name="vs-trl")
    acc = {"base": cl.accuracy(read_hf_tensors(base), eval_size)}
    acc["trl_start"] = cl.accuracy(trl.model.state_dict(), eval_size)
    if acc["trl_start"] != acc["base"]:
        raise RuntimeError(f"TRL's loaded model scores {acc['trl_start']} != base {acc['base']}")
    timings = {"trl": [], **{name: [] for name in sides}}
    parts = {name: [] for name in timings}
    windows, trl_raw = [], []

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = (time.perf_counter(), time.thread_time())

        def on_step_end(self, args, state, control, **kw):
            windows.append(since(self.t))
            k = state.global_step - 1
            trl_raw.append(clock.take("trl.generate", "trl.gen_score", "trl.sync"))
            order = list(sides) if k % 2 == 0 else list(reversed(sides))
            for name in order:
                took = sides[name].step(k)
                timings[name].append(took)
                t = clock.take(*phases.CL_TIMERS.values(), "cl.sync")
                parts[name].append(phases.closedloop_phases(took, t))

    trl.add_callback(Interleave())
    cpu0 = other_threads_cpu()
    t0, p0 = time.perf_counter(), time.process_time()
    with phases.timed_closedloop(clock):
        trl.train()
    total_wall, process_cpu = time.perf_counter() - t0, time.process_time() - p0
    cpu1 = other_threads_cpu()
    for k, (w, c) in enumerate(windows):  # TRL's logging of step k runs after on_step_end
        log = clock.trl_log.get(k + 1, (0.0, 0.0))
        timings["trl"].append((w + log[0], c + log[1]))
        parts["trl"].append(phases.trl_phases((w, c), trl_raw[k], log))
    other = {k: v - cpu0.get(k, 0.0) for k, v in cpu1.items()}
    acc["trl_end"] = cl.accuracy(trl.model.state_dict(), eval_size)
    for name, side in sides.items():
        acc[f"{name}_end"] = cl.accuracy(side.hf_tensors(), eval_size)
    recorded = {"closedloop": cl.finish(), "trl": trl_records(trl.state.log_history)}
    for side in sides.values():
        if side is not cl:
            side.finish()
    return {
        "seed": cfg.train.seed,
        "steps": cfg.train.steps,
        "samples_per_step": cfg.algorithm.prompts_per_step * cfg.algorithm.group_size,
        "eval_size": eval_size,
        "accuracy": acc,
        "timings": timings,
        "phases": parts,
        "threads_cpu_s": {
            name: {k: other[k] for k in ks if k in other} for name, ks in threads.items()
        },
        "other_threads_cpu_s": {k: v for k, v in other.items() if v > 0},
        "total_wall_s": total_wall,
        "process_cpu_s": process_cpu,
        "recorded": recorded,
        "trl_run_dir": None if recorder is None else str(recorder.run_dir),
    }


def other_threads_cpu() -> dict[str, float]:
    """CPU seconds of each live Python thread but the main one (by name; Linux clocks)."""
    import threading

    main = threading.main_thread()
    out = {}
    for t in threading.enumerate():
        if t is not main and t.ident is not None:
            try:
                cpu = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
                out[f"{t.name}#{t.ident}"] = cpu
            except OSError:  # the thread ended meanwhile
                pass
    return out


def since(t: tuple[float, float]) -> tuple[float, float]:
    """(wall s, main-thread CPU s) since ``t``."""
    return time.perf_counter() - t[0], time.thread_time() - t[1]


class ClosedloopSide:
    """A closedloop run with DuckDB telemetry, stepped from outside (``core.loops.grpo``)."""

    def __init__(self, cfg, runs_root: Path) -> None:
        from core.envs.registry import chat_template_rev
        from core.loops.session import Session
        from core.run import new_run_dir, open_telemetry, write_resolved_config, write_tokenizer
        from core.tokenizer.tokenizer import Tokenizer

        self.tok = Tokenizer.load()
        self.run_dir = new_run_dir(runs_root, "vs-trl")
        write_resolved_config(self.run_dir, cfg)
        write_tokenizer(self.run_dir, self.tok.path)
        self.sink = open_telemetry(
            "duckdb",
            self.run_dir,
            cfg,
            tokenizer_rev=self.tok.revision,
            chat_template_rev=chat_template_rev(cfg.env.name),
            vocab_size=self.tok.vocab_size,
        )
        self.s = Session(cfg, self.sink, tok=self.tok)

    def step_questions(self, steps: int) -> list[list]:
        """The problems each step draws (``core.loops.grpo.collect_step``'s seeds), in order."""
        return step_questions(self.s.cfg, steps, envs=self.s.envs)

    def seed(self, step: int) -> int:
        return self.s.cfg.train.seed * 1_000_003 + step

    def step(self, k: int) -> tuple[float, float]:
        """One ``train_step``: (wall s, main-thread CPU s)."""
        from core.loops.grpo import train_step

        t = (time.perf_counter(), time.thread_time())
        train_step(self.s, k)
        return since(t)

    def hf_tensors(self) -> dict[str, torch.Tensor]:
        from core.model.hf_weights import actor_to_hf

        return actor_to_hf(self.s.actor.named_weights(), self.s.model_cfg)

    def accuracy(self, hf: dict[str, torch.Tensor], n: int) -> float:
        """Greedy held-out accuracy of HF-named weights through our engine and verifier."""
        from core.loops.evaluate import greedy_accuracy
        from core.model.hf_weights import hf_to_rollout
        from core.rollout.engine import RolloutEngine

        engine = RolloutEngine(self.s.model_cfg)
        hf = {k: v.detach().to(torch.float32) for k, v in hf.items()}
        engine.load_weights(hf_to_rollout(hf, self.s.model_cfg), version=0)
        envs = self.s.envs.eval_set(n)
        mnt = self.s.cfg.rollout.max_new_tokens
        return greedy_accuracy(engine, envs, tok=self.tok, max_new_tokens=mnt)["accuracy"]

    def finish(self) -> dict:
        """Close the store; what it holds about train/rollout agreement."""
        from observability import open_run

        self.sink.close("finished")
        con = open_run(self.run_dir)
        tokens = con.execute(
            "SELECT count(*), count(train_logp), count(rollout_logp), "
            "avg(abs(train_logp - rollout_logp)), max(abs(train_logp - rollout_logp)) "
            "FROM tokens WHERE role = 'action'"
        ).fetchone()
        steps = con.execute(
            "SELECT avg(mismatch_abs_mean), max(mismatch_abs_p99), avg(masked_fraction) FROM steps"
        ).fetchone()
        syncs = con.execute("SELECT count(*) FROM weight_syncs").fetchone()[0]
        return {
            "action_token_rows": tokens[0],
            "with_train_and_rollout_logp": min(tokens[1], tokens[2]),
            "token_abs_dlogp_mean": tokens[3],
            "token_abs_dlogp_max": tokens[4],
            "step_mismatch_abs_mean": steps[0],
            "step_mismatch_abs_p99_max": steps[1],
            "masked_fraction_mean": steps[2],
            "weight_sync_rows": syncs,
            "tables": sorted(r[0] for r in con.execute("SHOW TABLES").fetchall()),
        }


def step_questions(cfg, steps: int, *, envs=None) -> list[list]:
    """The problems closedloop's step k draws (seed ``train.seed * 1_000_003 + k``), in order."""
    if envs is None:
        from core.envs.registry import make_env_source
        from core.tokenizer.tokenizer import Tokenizer

        envs = make_env_source(cfg, tok=Tokenizer.load())
    n, seed = cfg.algorithm.prompts_per_step, cfg.train.seed
    return [[e.problem for e in envs.sample(n, seed=seed * 1_000_003 + k)] for k in range(steps)]


def read_hf_tensors(path: Path) -> dict[str, torch.Tensor]:
    from core.model.hf_checkpoint import read_hf_dir

    return read_hf_dir(path)[0]


if __name__ == "__main__":
    main()

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
Held-out greedy accuracy is measured for both by our engine and verifier on our eval set.
Step time: wall and main-thread CPU per step; the CPU of every other thread (closedloop's
telemetry writer) is charged to closedloop.
With ``--record RUNS`` the TRL side is recorded by closedloop's TRL integration
(``closedloop.integrations.trl.record``) into a run under RUNS, which ``closedloop gate`` checks.
Usage: python benchmarks/vs_trl.py [--steps N (config)] [--eval-size 256] [--seed S]
[--threads 1] [--set key=value ...] [--record RUNS]    (needs ``pip install 'closedloop[peer]'``)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=None, help="default: the config's train.steps")
    ap.add_argument("--eval-size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (both sides)")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--json", default=None, help="also write the results as JSON here")
    ap.add_argument("--record", default=None, help="record the TRL side as a run under this dir")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from core.driver import resolve_config

    cfg = resolve_config(None, args.set, steps=args.steps, seed=args.seed)
    with tempfile.TemporaryDirectory() as root:
        result = compare(cfg, Path(root), eval_size=args.eval_size, record_to=args.record)
    result["threads"] = args.threads
    report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


def compare(cfg, root: Path, *, eval_size: int, record_to: str | None = None) -> dict:
    """Train both sides interleaved; returns accuracies, per-step timings and what each recorded
    (``record_to``: record the TRL side with closedloop's TRL integration under this directory)."""
    from transformers import TrainerCallback

    from core.model.hf_export import export_hf

    base = export_hf(root / "base")
    cl = ClosedloopSide(cfg, root / "runs")
    trl = make_trl_trainer(cfg, base, root / "trl", questions=cl.step_questions(cfg.train.steps))
    check_prompt_ids(trl.processing_class, cl)
    recorder = None
    if record_to is not None:
        from closedloop.integrations.trl import record

        recorder = record(trl, run_dir=record_to, name="vs-trl")
    acc = {"base": cl.accuracy(read_hf_tensors(base), eval_size)}
    acc["trl_start"] = cl.accuracy(trl.model.state_dict(), eval_size)
    if acc["trl_start"] != acc["base"]:
        raise RuntimeError(f"TRL's loaded model scores {acc['trl_start']} != base {acc['base']}")
    timings = {"trl": [], "closedloop": []}

    class Interleave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = (time.perf_counter(), time.thread_time())

        def on_step_end(self, args, state, control, **kw):
            timings["trl"].append(since(self.t))
            timings["closedloop"].append(cl.step(state.global_step - 1))

    trl.add_callback(Interleave())
    threads0, t0 = other_threads_cpu(), time.perf_counter()
    trl.train()
    total_wall = time.perf_counter() - t0
    threads = {k: v - threads0.get(k, 0.0) for k, v in other_threads_cpu().items()}
    acc["trl_end"] = cl.accuracy(trl.model.state_dict(), eval_size)
    acc["closedloop_end"] = cl.accuracy(cl.hf_tensors(), eval_size)
    recorded = {"closedloop": cl.finish(), "trl": trl_records(trl.state.log_history)}
    return {
        "steps": cfg.train.steps,
        "samples_per_step": cfg.algorithm.prompts_per_step * cfg.algorithm.group_size,
        "eval_size": eval_size,
        "accuracy": acc,
        "timings": timings,
        "other_threads_cpu_s": {k: v for k, v in threads.items() if v > 0},
        "closedloop_parts_s": cl.parts,
        "total_wall_s": total_wall,
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
                out[t.name] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
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
        self.parts: list[tuple[float, ...]] = []
        """Per step, wall s: rollout, score + update, weight sync + probe, telemetry records + emit."""

    def step_questions(self, steps: int) -> list[list]:
        """The problems each step draws (``core.loops.grpo.collect_step``'s seeds), in order."""
        return step_questions(self.s.cfg, steps, envs=self.s.envs)

    def seed(self, step: int) -> int:
        return self.s.cfg.train.seed * 1_000_003 + step

    def step(self, k: int) -> tuple[float, float]:
        from core.loops.grpo import train_step

        t = (time.perf_counter(), time.thread_time())
        m = train_step(self.s, k)
        took = since(t)
        ro, tr = m["rollout_time_s"], m["train_time_s"]
        sync = m["step_time_s"] - ro - tr  # weight sync + probe, step metrics
        self.parts.append((ro, tr, sync, took[0] - m["step_time_s"]))  # last: records + emit
        return took

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


def make_trl_trainer(cfg, base: Path, out: Path, *, questions: list[list], **overrides):
    """TRL's ``GRPOTrainer`` on the exported base model, configured as ``cfg`` (module docstring);
    ``overrides``: other ``GRPOConfig`` values (the benchmark passes none)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    alg, opt, ro = cfg.algorithm, cfg.optim, cfg.rollout
    rows = [
        {"prompt": [{"role": "user", "content": p.question}], "problem": json.dumps(vars(p))}
        for step in questions
        for p in step
    ]
    settings = dict(
        output_dir=str(out),
        max_steps=cfg.train.steps,
        per_device_train_batch_size=alg.prompts_per_step * alg.group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=alg.group_size,
        shuffle_dataset=False,
        learning_rate=opt.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        adam_beta1=opt.beta1,
        adam_beta2=opt.beta2,
        adam_epsilon=opt.eps,
        weight_decay=opt.weight_decay,
        max_grad_norm=opt.grad_clip,
        beta=0.0,
        num_iterations=1,
        loss_type="dapo",
        epsilon=alg.eps_low,
        epsilon_high=alg.eps_high,
        scale_rewards="group",
        importance_sampling_level="token",
        mask_truncated_completions=False,
        temperature=ro.temperature,
        top_p=ro.top_p,
        top_k=ro.top_k,
        max_completion_length=ro.max_new_tokens,
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        seed=cfg.train.seed,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        log_level="error",
        dataloader_num_workers=0,
    )
    args = GRPOConfig(**{**settings, **overrides})
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[verifier_reward()],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(base),
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def verifier_reward():
    """TRL's reward function: our arithmetic environment judges each completion's exact ids."""
    from core.envs.arithmetic import ArithmeticEnv
    from core.tasks.arithmetic import Problem
    from core.tokenizer.tokenizer import Tokenizer

    tok = Tokenizer.load()

    def arithmetic_verifier(prompts, completions, completion_ids, problem, **kw) -> list[float]:
        out = []
        for ids, p in zip(completion_ids, problem, strict=True):
            env = ArithmeticEnv(Problem(**json.loads(p)), tok)
            finished = bool(ids) and ids[-1] == tok.eos_id  # stopped on EOS
            out.append(env.step(list(ids), finished=finished).rewards["verifier"])
        return out

    return arithmetic_verifier


def check_prompt_ids(hf_tok, cl: ClosedloopSide) -> int:
    """Every dataset prompt, through TRL's tokenization path (the exported chat template with a
    generation prompt), equals our ``encode_prompt`` ids; returns how many were checked."""
    from core.tokenizer.chat_template import encode_prompt

    problems = [p for step in cl.step_questions(cl.s.cfg.train.steps) for p in step]
    msgs = [[{"role": "user", "content": p.question}] for p in problems]
    theirs = hf_tok.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    for p, ids in zip(problems, theirs, strict=True):
        if list(ids) != encode_prompt(p.question, tok=cl.tok):
            raise RuntimeError(f"TRL tokenizes {p.question!r} as {ids}, not our prompt ids")
    return len(problems)


AGREEMENT_KEYS = ("clip_ratio", "sampling/", "kl", "entropy")


def trl_records(log_history: list[dict]) -> dict:
    """TRL's per-step logged metrics: their names, and the means of those about the policy ratio,
    train/sampling agreement or entropy."""
    steps = [h for h in log_history if "loss" in h and "step" in h]
    keys = sorted({k for h in steps for k in h})
    agree = {
        k: statistics.fmean(h[k] for h in steps if k in h)
        for k in keys
        if any(a in k for a in AGREEMENT_KEYS)
    }
    return {"logged_keys": keys, "agreement_means": agree, "logged_steps": len(steps)}


def report(r: dict) -> None:
    a, t, steps = r["accuracy"], r["timings"], r["steps"]
    n = steps * r["samples_per_step"]
    print(
        f"steps: {steps} x {r['samples_per_step']} samples ({n} per side), threads {r['threads']}"
    )
    print(f"held-out greedy accuracy (our engine + verifier, n={r['eval_size']}):")
    for side in ("trl", "closedloop"):
        end = a[f"{side}_end"]
        print(f"  {side:10s} {a['base']:.3f} -> {end:.3f} ({100 * (end - a['base']):+.1f} points)")
    other = sum(r["other_threads_cpu_s"].values()) / max(steps, 1)
    wall = {s: [w for w, _ in v] for s, v in t.items()}
    cpu = {s: [c for _, c in v] for s, v in t.items()}
    print("step time, interleaved (s): wall median / mean, main-thread CPU mean")
    for s in ("trl", "closedloop"):
        w = wall[s]
        print(
            f"  {s:10s} {statistics.median(w):.3f} / {statistics.fmean(w):.3f}, "
            f"CPU {statistics.fmean(cpu[s]):.3f}"
        )
    print(
        f"  other threads' CPU per step, charged to closedloop: {other:.3f} "
        f"({', '.join(f'{k} {v:.1f}s' for k, v in r['other_threads_cpu_s'].items())})"
    )
    parts = [statistics.fmean(p[i] for p in r["closedloop_parts_s"]) for i in range(4)]
    print(
        "  closedloop step parts (mean wall s): rollout {:.3f}, score+update {:.3f}, "
        "sync+probe {:.3f}, telemetry records+emit {:.3f}".format(*parts)
    )
    paired = [c / x for c, x in zip(wall["closedloop"], wall["trl"], strict=True)]
    cl_cpu = statistics.fmean(cpu["closedloop"]) + other
    print(
        f"  closedloop / TRL: wall {statistics.median(paired):.2f}x (median of paired steps), "
        f"{statistics.fmean(wall['closedloop']) / statistics.fmean(wall['trl']):.2f}x (means); "
        f"CPU {cl_cpu / statistics.fmean(cpu['trl']):.2f}x (means, with other threads)"
    )
    c, tr = r["recorded"]["closedloop"], r["recorded"]["trl"]
    print("train/rollout agreement, as each records it:")
    print(
        f"  closedloop: {c['action_token_rows']} action-token rows, "
        f"{c['with_train_and_rollout_logp']} with train and rollout log-probs; |dlogp| mean "
        f"{c['token_abs_dlogp_mean']:.2e}, max {c['token_abs_dlogp_max']:.2e}; IcePop-masked "
        f"{c['masked_fraction_mean']:.2%}; {c['weight_sync_rows']} weight-sync rows"
    )
    print(f"  TRL: {tr['logged_steps']} logged steps; keys: {', '.join(tr['logged_keys'])}")
    means = {k: round(v, 6) for k, v in tr["agreement_means"].items()}
    print(f"  TRL ratio/sampling/entropy means: {json.dumps(means)}")
    if r.get("trl_run_dir"):
        print(f"TRL side recorded by closedloop: {r['trl_run_dir']} (closedloop gate RUN)")


if __name__ == "__main__":
    main()

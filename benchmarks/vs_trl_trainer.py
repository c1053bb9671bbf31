"""TRL's side of benchmarks/vs_trl.py: its ``GRPOTrainer`` configured as closedloop's config
(the mapping is in vs_trl.py's docstring), its reward function (our environment and verifier on
the exact completion ids), the check that its prompt ids are ours, and what it logs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch


def make_trl_trainer(
    cfg, base: Path, out: Path, *, questions: list[list], trainer_class=None, **overrides
):
    """TRL's ``GRPOTrainer`` (or ``trainer_class``, a timed subclass) on the exported base model,
    configured as ``cfg`` (module docstring); ``overrides``: other ``GRPOConfig`` values
    (``VLLM_TRL`` with ``--engine vllm``)."""
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
    trainer = (trainer_class or GRPOTrainer)(
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


def check_prompt_ids(hf_tok, cl) -> int:
    """Every dataset prompt, through TRL's tokenization path (the exported chat template with a
    generation prompt), equals our ``encode_prompt`` ids (``cl``: vs_trl.ClosedloopSide); returns
    how many were checked."""
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

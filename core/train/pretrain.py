"""``closedloop pretrain``: seeded SFT of the tiny base model on the task corpus.

Trains the megatron actor with next-token cross-entropy on response tokens (EOS included). The
base model must stay imperfect (greedy held-out accuracy between 20% and 80%) so RL has room,
and the imperfection must be one RL can fix: the demonstrations come from a flawed teacher
that drops carries and borrows in ``TEACHER_ERROR_RATE`` of its answers
(``core.tasks.arithmetic.flawed_answer``). The model learns both the correct and the flawed
column algorithm; greedy decoding follows the majority (flawed) one on the ~41% of 2-digit
problems that need a carry or borrow, while sampling still finds the correct one ~30% of the
time there — the exploration signal a verifier reward turns into accuracy. (Stopping a clean
SFT early instead leaves a model whose errors are unsystematic; RL does not improve it: see
benchmarks/README.md, GRPO tiny.) Writes the checkpoint that ships in the repo.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from core.envs.arithmetic import ArithmeticSource
from core.model.actor import Actor
from core.model.checkpoint import save_checkpoint
from core.model.config import ModelConfig
from core.rollout.engine import RolloutEngine, left_pad
from core.sync.convert import actor_to_rollout
from core.tasks.arithmetic import ArithmeticConfig, sft_corpus
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV, encode_prompt, encode_response
from core.tokenizer.tokenizer import Tokenizer
from core.train.evaluate import greedy_accuracy

TEACHER_ERROR_RATE = 0.7
"""Fraction of SFT demonstrations written by the flawed (no carry / no borrow) teacher."""


def pretrain(
    out_dir: str | Path,
    *,
    model_cfg: ModelConfig,
    task_cfg: ArithmeticConfig,
    tok: Tokenizer,
    steps: int = 600,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 1234,
    teacher_error_rate: float = TEACHER_ERROR_RATE,
    log=print,
) -> dict:
    """Run SFT and write the checkpoint; returns a summary with the greedy accuracy.

    Runs on one CPU thread so that the float summation order, and with it the checkpoint's
    sha256, does not depend on the machine's core count.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _pretrain(
            out_dir,
            model_cfg=model_cfg,
            task_cfg=task_cfg,
            tok=tok,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            teacher_error_rate=teacher_error_rate,
            log=log,
        )
    finally:
        torch.set_num_threads(threads)


def _pretrain(
    out_dir, *, model_cfg, task_cfg, tok, steps, batch_size, lr, seed, teacher_error_rate, log
) -> dict:
    torch.manual_seed(seed)
    actor = Actor(model_cfg, seed=seed)
    opt = torch.optim.AdamW(actor.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(steps, 1), pct_start=0.1
    )
    pairs = list(
        sft_corpus(steps * batch_size, seed, task_cfg, teacher_error_rate=teacher_error_rate)
    )
    t0 = time.time()
    for step in range(steps):
        chunk = pairs[step * batch_size : (step + 1) * batch_size]
        seqs, n_resp = [], []
        for q, a in chunk:
            p, r = encode_prompt(q, tok=tok), encode_response(a, tok=tok)
            seqs.append(p + r)
            n_resp.append(len(r))
        ids, valid = left_pad(seqs, tok.pad_id)  # [B, T]
        t = ids.shape[1]
        is_resp = torch.arange(t)[None, :] >= (t - torch.tensor(n_resp))[:, None]  # [B, T]
        logits = actor.logits(ids, valid)[:, :-1]  # [B, T-1, V]
        loss_tok = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        ).view_as(ids[:, 1:])
        m = is_resp[:, 1:].float()
        loss = (loss_tok * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(actor.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log(
                f"pretrain step {step:4d} loss {loss.detach().item():.4f} ({time.time() - t0:.0f}s)"
            )
    engine = RolloutEngine(model_cfg)
    engine.load_weights(actor_to_rollout(actor.named_weights(), model_cfg), version=0)
    acc = greedy_accuracy(engine, ArithmeticSource(task_cfg, tok).eval_set(256), tok=tok)[
        "accuracy"
    ]
    meta = {
        "produced_by": "closedloop pretrain",
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "teacher_error_rate": teacher_error_rate,
        "task": {
            "min_digits": task_cfg.min_digits,
            "max_digits": task_cfg.max_digits,
            "ops": list(task_cfg.ops),
        },
        "tokenizer_rev": tok.revision,
        "chat_template_rev": CHAT_TEMPLATE_REV,
        "greedy_eval_accuracy": acc,
    }
    sha = save_checkpoint(out_dir, actor.named_weights(), model_cfg, meta)
    log(f"pretrain: greedy held-out accuracy {acc:.3f}; wrote {out_dir} (sha256 {sha[:12]})")
    return {**meta, "weights_sha256": sha, "seconds": time.time() - t0}

"""``closedloop pretrain``: seeded SFT of the tiny base model on the task corpus.

Trains the megatron actor with next-token cross-entropy on response tokens (EOS included). The
base model must stay imperfect (greedy held-out accuracy between 20% and 80%) so RL has room,
and the imperfection must be one RL can fix: the demonstrations come from a flawed teacher
that drops carries and borrows in ``TEACHER_ERROR_RATE`` of its answers
(``core.pretrain.corpus.flawed_answer``). The model learns both the correct and the flawed
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
from core.loops.evaluate import greedy_accuracy
from core.model.actor import Actor
from core.model.config import ModelConfig
from core.pretrain.corpus import sft_corpus
from core.pretrain.sft import Demo, one_thread, rollout_engine, sft, write_checkpoint
from core.tasks.arithmetic import ArithmeticConfig
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV, encode_prompt, encode_response
from core.tokenizer.tokenizer import Tokenizer

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
    """Run SFT (``core.pretrain.sft``, one CPU thread) and write the checkpoint; returns a summary
    with the greedy accuracy."""
    with one_thread():
        t0 = time.time()
        torch.manual_seed(seed)
        actor = Actor(model_cfg, seed=seed)
        pairs = list(
            sft_corpus(steps * batch_size, seed, task_cfg, teacher_error_rate=teacher_error_rate)
        )
        demos = [_demonstration(q, a, tok=tok) for q, a in pairs]
        batches = (demos[i * batch_size : (i + 1) * batch_size] for i in range(steps))
        sft(actor, batches, steps=steps, lr=lr, pad_id=tok.pad_id, log=log)
        engine = rollout_engine(actor, model_cfg)
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
            "vocab_hash": tok.vocab_hash,
            "chat_template_rev": CHAT_TEMPLATE_REV,
            "greedy_eval_accuracy": acc,
        }
        return write_checkpoint(out_dir, actor, model_cfg, meta, t0=t0, log=log)


def _demonstration(question: str, answer: str, *, tok: Tokenizer) -> Demo:
    """(prompt + response ids, mask True on the response tokens, EOS included)."""
    p, r = encode_prompt(question, tok=tok), encode_response(answer, tok=tok)
    return list(p) + list(r), [False] * len(p) + [True] * len(r)

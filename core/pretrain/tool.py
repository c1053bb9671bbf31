"""``closedloop pretrain --env tool``: SFT of the tool-use base model from a flawed teacher.

Starts from the shipped single-turn base (``core/assets/base_model``: it already reads the chat
template and does 2-digit column arithmetic) and imitates multi-turn demonstrations of
``(a op b) op c`` problems with next-token cross-entropy on the action tokens only (observations
and prompts carry no loss). The teacher always calls the calculator for the inner operation; for
the outer one it calls it again in ``1 − TOOL_TEACHER_ERROR_RATE`` of the demonstrations and
otherwise answers from memory with the no-carry/no-borrow column bug
(``core.pretrain.corpus.flawed_answer``). The student learns both habits; greedy decoding follows
the majority (answering from memory), which is right only where the outer operation needs no
carry or borrow, while sampling still calls the tool ~30% of the time: a verifier reward turns that
into accuracy. One CPU thread (the checkpoint's bytes do not depend on the core count).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch

from core.envs.tool import ToolConfig, ToolProblem, ToolSource, make_tool_problems
from core.envs.tool_protocol import (
    TOOL_TEMPLATE_REV,
    encode_observation,
    encode_turn,
    render_call,
)
from core.loops.evaluate import greedy_accuracy
from core.model.actor import Actor
from core.model.checkpoint import load_checkpoint
from core.pretrain.corpus import flawed_answer
from core.pretrain.sft import Demo, one_thread, rollout_engine, sft, write_checkpoint
from core.tokenizer.chat_template import encode_prompt
from core.tokenizer.tokenizer import Tokenizer

TOOL_TEACHER_ERROR_RATE = 0.6
"""Fraction of demonstrations whose outer operation is answered from memory (with the bug)."""
TOOL_MAX_NEW_TOKENS = 10
"""Per-turn token budget of the tool runs (``[99-10]`` + EOS is 8)."""
TOOL_MAX_TURNS = 4
"""Turn budget of the tool runs (two calls and an answer, one turn to spare)."""
BASE = Path(__file__).resolve().parent.parent / "assets" / "base_model"
TOOL_MODEL = Path(__file__).resolve().parent.parent / "assets" / "tool_model"
"""Where ``closedloop pretrain --env tool`` writes the shipped tool-use base."""


def demonstration(p: ToolProblem, *, flawed: bool, tok: Tokenizer) -> Demo:
    """(ids, loss mask) of one demonstrated episode: the mask is True on action tokens."""
    ids = list(encode_prompt(p.question, tok=tok))
    mask = [False] * len(ids)

    def add(part: list[int], trained: bool) -> None:
        ids.extend(part)
        mask.extend([trained] * len(part))

    add(encode_turn(render_call(p.a, p.op1, p.b), tok=tok), True)
    add(encode_observation(str(p.inner), tok=tok), False)
    if flawed:
        add(encode_turn(flawed_answer(p.outer()), tok=tok), True)
        return ids, mask
    add(encode_turn(render_call(p.inner, p.op2, p.c), tok=tok), True)
    add(encode_observation(str(p.answer), tok=tok), False)
    add(encode_turn(str(p.answer), tok=tok), True)
    return ids, mask


def pretrain_tool(
    out_dir: str | Path,
    *,
    tok: Tokenizer,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 4321,
    teacher_error_rate: float = TOOL_TEACHER_ERROR_RATE,
    base: str | Path = BASE,
    eval_size: int = 256,
    log=print,
) -> dict:
    """SFT from ``base`` and write the checkpoint; returns its meta (greedy held-out accuracy)."""
    with one_thread():
        t0 = time.time()
        torch.manual_seed(seed)
        weights, model_cfg, base_meta = load_checkpoint(base)
        actor = Actor(model_cfg, seed=seed)
        actor.load_weights(weights)
        problems = make_tool_problems(steps * batch_size, seed=seed, cfg=ToolConfig())
        teacher = random.Random(f"tool-teacher:{seed}")
        batches = (
            [
                demonstration(p, flawed=teacher.random() < teacher_error_rate, tok=tok)
                for p in problems[step * batch_size : (step + 1) * batch_size]
            ]
            for step in range(steps)
        )
        sft(actor, batches, steps=steps, lr=lr, pad_id=tok.pad_id, log=log, label="pretrain tool")
        engine = rollout_engine(actor, model_cfg)
        acc = greedy_accuracy(
            engine,
            ToolSource(ToolConfig(), tok).eval_set(eval_size),
            tok=tok,
            max_new_tokens=TOOL_MAX_NEW_TOKENS,
            max_turns=TOOL_MAX_TURNS,
        )["accuracy"]
        meta = {
            "produced_by": "closedloop pretrain --env tool",
            "base_weights_sha256": base_meta["weights_sha256"],
            "seed": seed,
            "steps": steps,
            "batch_size": batch_size,
            "lr": lr,
            "teacher_error_rate": teacher_error_rate,
            "tokenizer_rev": tok.revision,
            "chat_template_rev": TOOL_TEMPLATE_REV,
            "greedy_eval_accuracy": acc,
        }
        return write_checkpoint(
            out_dir, actor, model_cfg, meta, t0=t0, log=log, label="pretrain tool"
        )

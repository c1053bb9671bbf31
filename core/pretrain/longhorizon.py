"""``closedloop pretrain --env longhorizon``: SFT of the long-horizon base policy from a flawed
teacher's demonstrations, summaries included.

Demonstrations run through the compaction rollout itself (``core.rollout.compaction`` with the
scripted ``TeacherEngine``): three quarters compacted at the budget C, one quarter with the full
history (so the policy also acts when compaction is off). Next-token cross-entropy on every
trainable token of every segment row (actions, summaries, answers). The teacher drops the second
fact from ``FLAW_RATE`` of its summaries, so greedy decoding inherits the flawed summary while
sampling still writes the complete one often enough for RL to find. Runs on one CPU thread (the
float summation order, hence the checkpoint's sha256, does not depend on the core count).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from core.envs.longhorizon import LongHorizonConfig, LongHorizonSource
from core.loops.evaluate import compaction_accuracy
from core.model.actor import Actor
from core.model.config import ModelConfig
from core.pretrain.longhorizon_teacher import TeacherEngine
from core.pretrain.sft import one_thread, rollout_engine, sft, write_checkpoint
from core.rollout.compaction import CompactionConfig, collect_compacted, counter_ids
from core.rollout.sampling import SamplingParams
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV
from core.tokenizer.tokenizer import Tokenizer

LONGHORIZON_MODEL = Path(__file__).resolve().parent.parent / "assets" / "longhorizon_model"
FLAW_RATE = 0.6
"""Fraction of the teacher's summaries that keep only the first fact."""
MODEL = ModelConfig(vocab_size=320, max_seq_len=96)
"""The base policy's architecture: the arithmetic base's, with room for a full history."""
MAX_NEW_TOKENS = 4
"""Action length limit (``ok`` / a two-digit answer, plus EOS)."""
MAX_TURNS = 24


def demonstrations(n: int, *, seed: int, tok: Tokenizer, env_cfg, comp: CompactionConfig):
    """(ids [N, T], valid, loss_mask) rows of ``n`` teacher episodes (3/4 compacted)."""
    src = LongHorizonSource(env_cfg, tok)
    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS)
    rows = []
    for part, compact in ((0, True), (1, False)):
        k = n * 3 // 4 if compact else n - n * 3 // 4
        envs = src.sample(k, seed=seed * 2 + part)
        teacher = TeacherEngine(MODEL, tok, comp.summary_prompt, FLAW_RATE, seed=seed * 2 + part)
        out = collect_compacted(
            teacher,
            envs,
            params,
            tok=tok,
            cfg=comp,
            new_ids=counter_ids(),
            group_ids=torch.arange(k),
            max_turns=MAX_TURNS,
            enabled=compact,
        )
        tr = out.traj
        for i in range(tr.size):
            v = tr.valid[i]
            rows.append((tr.ids[i][v], tr.loss_mask[i][v]))
    return rows


def pretrain_longhorizon(
    out_dir: str | Path = LONGHORIZON_MODEL,
    *,
    tok: Tokenizer,
    steps: int = 1500,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 4321,
    eval_size: int = 256,
    log=print,
) -> dict:
    """SFT (``core.pretrain.sft``, one CPU thread) and write the checkpoint; returns its metadata
    (greedy held-out success included)."""
    with one_thread():
        return _pretrain(
            out_dir,
            tok=tok,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            seed=seed,
            eval_size=eval_size,
            log=log,
        )


def _pretrain(out_dir, *, tok, steps, batch_size, lr, seed, eval_size, log) -> dict:
    env_cfg, comp = LongHorizonConfig(), CompactionConfig()
    torch.manual_seed(seed)
    actor = Actor(MODEL, seed=seed)
    t0 = time.time()
    rows = demonstrations(steps * batch_size // 2, seed=seed, tok=tok, env_cfg=env_cfg, comp=comp)
    demos = [(ids.tolist(), mask.tolist()) for ids, mask in rows]
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    log(f"pretrain-longhorizon: {len(rows)} demonstration rows ({time.time() - t0:.0f}s)")
    batches = (
        [demos[order[(step * batch_size + j) % len(order)]] for j in range(batch_size)]
        for step in range(steps)
    )
    sft(
        actor, batches, steps=steps, lr=lr, pad_id=tok.pad_id, log=log, label="pretrain-longhorizon"
    )
    engine = rollout_engine(actor, MODEL)
    acc = compaction_accuracy(
        engine,
        LongHorizonSource(env_cfg, tok).eval_set(eval_size),
        tok=tok,
        cfg=comp,
        max_new_tokens=MAX_NEW_TOKENS,
        max_turns=MAX_TURNS,
    )
    meta = {
        "produced_by": "closedloop pretrain --env longhorizon",
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "flaw_rate": FLAW_RATE,
        "tokenizer_rev": tok.revision,
        "chat_template_rev": CHAT_TEMPLATE_REV,
        "greedy_eval_accuracy": acc["accuracy"],
        "compactions_per_episode": acc["compactions_per_episode"],
    }
    return write_checkpoint(
        out_dir, actor, MODEL, meta, t0=t0, log=log, label="pretrain-longhorizon"
    )

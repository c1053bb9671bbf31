"""Supervised fine-tuning on demonstrations: the loop every ``closedloop pretrain`` runs.

A demonstration is (token ids, trained mask): next-token cross-entropy is averaged over the target
tokens the mask marks (a response, or a multi-turn episode's action tokens — prompts and
observations carry no loss). AdamW (β 0.9 / 0.98, weight decay 0.01), a one-cycle learning-rate
schedule, grad-norm clip 1.0. ``one_thread`` pins torch to one CPU thread, so the float summation
order, and with it the checkpoint's sha256, does not depend on the machine's core count.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from core.model.actor import Actor
from core.model.checkpoint import save_checkpoint
from core.model.config import ModelConfig
from core.rollout.engine import RolloutEngine, left_pad
from core.sync.convert import actor_to_rollout

Demo = tuple[list[int], list[bool]]
"""(token ids, trained mask): the mask is True on the tokens the loss trains."""


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block on one torch thread (restored afterwards)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def sft_loss(actor: Actor, demos: list[Demo], *, pad_id: int) -> torch.Tensor:
    """Mean next-token NLL over the demonstrations' trained tokens (left-padded batch)."""
    ids, valid = left_pad([d[0] for d in demos], pad_id)  # [B, T]
    masks, _ = left_pad([[int(m) for m in d[1]] for d in demos], 0)
    trained = masks[:, 1:].bool()  # [B, T-1]: targets the loss trains
    logits = actor.logits(ids, valid)[:, :-1]  # [B, T-1, V]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view_as(trained)
    return (nll * trained).sum() / trained.sum()


def sft(
    actor: Actor,
    batches: Iterable[list[Demo]],
    *,
    steps: int,
    lr: float,
    pad_id: int,
    log=print,
    label: str = "pretrain",
) -> None:
    """Train ``actor`` on ``steps`` batches of demonstrations (logs every 100 steps and the last)."""
    opt = torch.optim.AdamW(actor.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=lr, total_steps=max(steps, 1), pct_start=0.1
    )
    t0 = time.time()
    for step, demos in enumerate(batches):
        loss = sft_loss(actor, demos, pad_id=pad_id)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(actor.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            log(f"{label} step {step:4d} loss {loss.item():.4f} ({time.time() - t0:.0f}s)")


def rollout_engine(actor: Actor, model_cfg: ModelConfig) -> RolloutEngine:
    """An fp32 rollout engine holding ``actor``'s weights (version 0), for the greedy eval."""
    engine = RolloutEngine(model_cfg)
    engine.load_weights(actor_to_rollout(actor.named_weights(), model_cfg), version=0)
    return engine


def write_checkpoint(
    out_dir: str | Path,
    actor: Actor,
    model_cfg: ModelConfig,
    meta: dict,
    *,
    t0: float,
    log=print,
    label: str = "pretrain",
) -> dict:
    """Save ``actor`` with ``meta`` (its ``greedy_eval_accuracy`` logged); returns ``meta`` with
    the weights' sha256 and the seconds since ``t0``."""
    sha = save_checkpoint(out_dir, actor.named_weights(), model_cfg, meta)
    acc = meta["greedy_eval_accuracy"]
    log(f"{label}: greedy held-out accuracy {acc:.3f}; wrote {out_dir} (sha256 {sha[:12]})")
    return {**meta, "weights_sha256": sha, "seconds": time.time() - t0}

"""One policy-gradient optimizer step of a tensor-parallel actor (works at TP = 1 as well).

The step is the GRPO update of ``core.loops.grpo`` on a given batch: vocab-parallel log-probs
(``core.parallel.logprobs``), the clipped surrogate ``clipped_policy_loss`` (token-mean over the
action mask), backward through megatron's parallel layers, then the two things a TP step adds:
- gradient sync: megatron's ``finalize_model_grads`` rule, SUM over the TP group of the
  q/k layernorm gradients (each rank's covers only its own heads); every other replicated
  parameter already has the full, identical gradient (its consumers all-reduce in backward).
  (megatron's function itself needs its DDP wrapper, which allocates CUDA buffers.)
- grad-norm clipping over the whole model: squares of TP-sharded gradients are summed across
  ranks, replicated ones counted once (megatron's ``param_is_not_tensor_parallel_duplicate``),
  with ``torch.nn.utils.clip_grad_norm_``'s coefficient max_norm / (norm + 1e-6), capped at 1.
Simplification: no trust mask (IcePop) here; the batch's mask is the trusted set.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from core.algorithms.policy import clipped_policy_loss
from core.parallel.group import tp_group, tp_size
from core.parallel.logprobs import vocab_parallel_logprobs


@dataclass(frozen=True)
class PolicyBatch:
    """A training batch of sampled sequences, identical on every TP rank."""

    input_ids: torch.Tensor
    """[B, T] int64, left-padded prompt + response."""
    valid: torch.Tensor
    """[B, T] bool, False on padding."""
    action_mask: torch.Tensor
    """[B, T-1] bool, True where target t+1 is a response token."""
    advantages: torch.Tensor
    """[B] fp32 group-normalized advantages."""


def sync_replicated_grads(actor) -> None:
    """SUM-all-reduce the q/k layernorm gradients over the TP group (no-op at TP = 1)."""
    if tp_size() == 1:
        return
    for name, p in actor.gpt.named_parameters():
        if p.grad is not None and ("q_layernorm" in name or "k_layernorm" in name):
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=tp_group())


def clip_grad_norm_tp(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip gradients in place by the global norm over all TP ranks; returns that norm (0-d)."""
    sharded = torch.zeros((), dtype=torch.float64)
    replicated = torch.zeros((), dtype=torch.float64)
    for p in params:
        if p.grad is None:
            continue
        sq = p.grad.detach().double().pow(2).sum()
        if getattr(p, "tensor_model_parallel", False):
            sharded += sq
        else:
            replicated += sq
    if tp_size() > 1:
        dist.all_reduce(sharded, op=dist.ReduceOp.SUM, group=tp_group())
    norm = (sharded + replicated).sqrt().float()
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(coef)
    return norm


def policy_step(
    actor,
    optimizer: torch.optim.Optimizer,
    batch: PolicyBatch,
    *,
    temperature: float = 1.0,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    grad_clip: float = 1.0,
) -> dict[str, torch.Tensor]:
    """One GRPO step; returns detached ``loss`` (0-d), ``grad_norm`` (0-d), the step-start
    ``logp`` and ``logsumexp`` [B, T-1] of the targets (identical on every TP rank)."""
    actor.train()
    targets = batch.input_ids[:, 1:]  # [B, T-1]
    logits = actor.logits(batch.input_ids, batch.valid)[:, :-1]  # [B, T-1, V / TP]
    logp, lse = vocab_parallel_logprobs(logits, targets, temperature=temperature)
    loss, _ = clipped_policy_loss(
        logp,
        logp.detach(),
        batch.advantages,
        batch.action_mask,
        eps_low=eps_low,
        eps_high=eps_high,
        agg_mode="token-mean",
        denominator=batch.action_mask.sum(),
    )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    sync_replicated_grads(actor)
    params = [p for p in actor.parameters() if p.requires_grad]
    norm = clip_grad_norm_tp(params, grad_clip if grad_clip > 0 else float("inf"))
    optimizer.step()
    return {"loss": loss.detach(), "grad_norm": norm, "logp": logp.detach(), "logsumexp": lse}

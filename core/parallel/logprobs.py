"""Sampled-token log-probs and logsumexp over a vocabulary split across tensor-parallel ranks.

Design: each rank holds logits for its contiguous vocabulary slice [B, T, V / TP] (megatron's
``parallel_output``). The log-prob of a target token is minus megatron-core's
``vocab_parallel_cross_entropy`` of the tempered logits (its autograd function: all-reduce MAX of
the row maxima, all-reduce SUM of the target logit and of sum(exp(logit - max)), and the matching
backward), so training gradients are megatron's. The logsumexp, a no-grad diagnostic, is composed
from the same megatron building blocks (``VocabParallelCrossEntropy.calculate_logits_max`` /
``calculate_predicted_logits``) and the same two all-reduces: lse = max + log(sum exp(l - max)).
All math in fp32. With TP = 1 both reduce to the local log-softmax (the all-reduces are over one
rank). The vocabulary-parallel contract: TP = 2 equals TP = 1 within 1e-6 on the same weights.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core.tensor_parallel import vocab_parallel_cross_entropy
from megatron.core.tensor_parallel.cross_entropy import VocabParallelCrossEntropy
from megatron.core.tensor_parallel.utils import VocabUtility

from core.parallel.group import tp_group, tp_rank, tp_size


def vocab_parallel_logprobs(
    local_logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each target and the logsumexp of its tempered logits, vocabulary-parallel.

    Args:
        local_logits: [B, T, V / TP] this rank's vocabulary slice of the logits.
        targets: [B, T] int64 global token IDs.
        temperature: the sampling temperature (> 0) the logits are divided by.
    Returns:
        (logp [B, T] fp32 with megatron's gradient, logsumexp [B, T] fp32 detached); identical
        on every TP rank.
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    scaled = local_logits.float() / temperature  # [B, T, V / TP]
    lse = _logsumexp(scaled.detach(), targets)  # first: megatron's forward edits its input
    return -vocab_parallel_cross_entropy(scaled, targets), lse


@torch.no_grad()
def _logsumexp(scaled: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, T] logsumexp of the full tempered rows from their [B, T, V / TP] slices."""
    group = tp_group() if tp_size() > 1 else None
    logits, row_max = VocabParallelCrossEntropy.calculate_logits_max(scaled.clone())
    if group is not None:
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
    lo, hi = VocabUtility.vocab_range_from_per_partition_vocab_size(
        logits.shape[-1], tp_rank(), tp_size()
    )
    _, _, _, sum_exp, _ = VocabParallelCrossEntropy.calculate_predicted_logits(
        logits, targets, row_max, lo, hi
    )
    if group is not None:
        dist.all_reduce(sum_exp, op=dist.ReduceOp.SUM, group=group)
    return row_max + sum_exp.log()

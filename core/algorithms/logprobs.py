"""Token log-probs and entropy from logits, with the rollout's temperature.

The trainer must score tokens under the same distribution the rollout sampled from: logits are
divided by the sampling temperature before the log-softmax (vLLM's ``processed`` log-prob mode).
All math in fp32.
"""

from __future__ import annotations

import torch


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each target token and the entropy of its distribution.

    Args:
        logits: [B, T, V] logits predicting position t+1 at position t.
        targets: [B, T] int64 token IDs.
    Returns:
        (logp [B, T] fp32, entropy [B, T] fp32).
    """
    logp_all = (logits.float() / temperature).log_softmax(dim=-1)
    logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(dim=-1)
    return logp, entropy

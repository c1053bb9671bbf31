"""GRPO group-relative advantage: Â_i = (R_i − mean_G R) / (std_G R + ε).

std is the population standard deviation (ddof=0) over the group; a group whose rewards are all
equal has std 0, every advantage exactly 0, and is counted as *degenerate* (it carries no signal).
"""

from __future__ import annotations

import torch


def grpo_advantages(rewards: torch.Tensor, *, eps: float = 1e-6) -> tuple[torch.Tensor, dict]:
    """Group-normalized advantages.

    Args:
        rewards: [P, G] fp32 rewards, P prompts × G responses.
        eps: added to the group std.
    Returns:
        (advantages [P, G] fp32, metrics) with metrics ``degenerate`` [P] bool,
        ``degenerate_fraction`` scalar tensor, ``reward_mean``/``reward_std`` scalar tensors.
    """
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, unbiased=False, keepdim=True)
    degenerate = (rewards == rewards[:, :1]).all(dim=1)
    adv = (rewards - mean) / (std + eps)
    adv = torch.where(degenerate[:, None], torch.zeros_like(adv), adv)
    metrics = {
        "degenerate": degenerate,
        "degenerate_fraction": degenerate.float().mean(),
        "reward_mean": rewards.mean(),
        "reward_std": rewards.std(unbiased=False),
    }
    return adv, metrics


def grpo_token_advantages(
    rewards: torch.Tensor, tokens: torch.Tensor, *, group_size: int, eps: float = 1e-6
) -> tuple[torch.Tensor, dict]:
    """GRPO advantages of a group-major batch, broadcast to its tokens.

    Args:
        rewards: [B] fp32, B = P·G samples, the G samples of a prompt adjacent.
        tokens: [B, T] bool, the tokens that carry the sample's advantage (generated ones).
    Returns:
        (advantages [B, T] fp32: Â_i on ``tokens``, 0 elsewhere; metrics of ``grpo_advantages``).
    """
    if rewards.shape[0] % group_size:
        raise ValueError(f"batch of {rewards.shape[0]} samples is not whole groups of {group_size}")
    adv, metrics = grpo_advantages(rewards.view(-1, group_size), eps=eps)  # [P, G]
    per_token = torch.where(tokens, adv.reshape(-1, 1), torch.zeros((), dtype=adv.dtype))
    return per_token, metrics

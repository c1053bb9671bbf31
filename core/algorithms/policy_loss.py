"""GRPO/PPO clipped policy loss over trusted tokens.

    r_t = exp(logp_t − old_logp_t),
    L   = −agg_t[ min(r_t Â, clip(r_t, 1 − ε_l, 1 + ε_h) Â) ]   over mask (trusted action tokens).

Asymmetric clip (ε_l = 0.2, ε_h = 0.28: "clip-higher"). ``clip_fraction`` counts tokens where the
clipped branch is the active minimum (the gradient is zero there).
"""

from __future__ import annotations

import torch

from core.algorithms.aggregation import aggregate


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    agg_mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate loss.

    Args:
        logp: [B, T] current log-probs (with grad).
        old_logp: [B, T] log-probs of the policy that the step started from (detached).
        advantages: [B] per-sequence (GRPO) or [B, T] per-token advantages.
        mask: [B, T] bool, trusted action tokens.
    Returns:
        (loss scalar, metrics: ``ratio`` [B, T], ``clip_fraction``, ``ratio_mean`` scalars).
    """
    adv, ratio, metrics = _ratio(logp, old_logp, advantages, mask)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    loss = aggregate(per_token, mask, mode=agg_mode, denominator=denominator)
    m = mask.float()
    metrics["clip_fraction"] = ((clipped < unclipped).float() * m).sum() / m.sum().clamp_min(1.0)
    return loss, metrics


def _ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(advantages as [B, T] or [B, 1], ratio [B, T] with grad, metrics ``ratio``/``ratio_mean``).

    Masked tokens (padding, trust-rejected) may hold ±inf/NaN log-probs; their log-ratio is zeroed
    so 0·inf = NaN cannot leak into the loss or its gradient. The ``ratio`` metric stays raw.
    """
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    log_ratio = logp - old_logp
    ratio = torch.exp(torch.where(mask, log_ratio, torch.zeros_like(log_ratio)))
    m = mask.float()
    metrics = {
        "ratio": torch.exp(log_ratio.detach()),
        "ratio_mean": (ratio.detach() * m).sum() / m.sum().clamp_min(1.0),
    }
    return adv, ratio, metrics


def is_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    agg_mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict]:
    """Importance-weighted policy gradient without a clip — the seed's async-RL update

        ρ_t = exp(logp_t − old_logp_t),   L = −agg_t[ sg(ρ_t) · Â · logp_t ]   over mask,

    whose gradient −ρ_t Â ∇logp_t equals that of the unclipped surrogate −ρ_t Â. The only bound
    on ρ is the caller's mask (DIS keeps 1 − ε_l < ρ < 1 + ε_h); with no trust mask a token the
    engines disagree about carries its full ratio into the gradient.

    Args:
        logp: [B, T] current log-probs (with grad).
        old_logp: [B, T] behaviour log-probs (detached; the rollout's for the async update).
        advantages: [B] per-sequence or [B, T] per-token advantages.
        mask: [B, T] bool, trusted action tokens.
    Returns:
        (loss scalar, metrics: ``ratio`` [B, T], ``clip_fraction`` (always 0), ``ratio_mean``).
    """
    adv, ratio, metrics = _ratio(logp, old_logp, advantages, mask)
    loss = aggregate(-ratio * adv, mask, mode=agg_mode, denominator=denominator)
    metrics["clip_fraction"] = torch.zeros(())
    return loss, metrics


POLICY_LOSSES = ("clip", "is")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    kind: str = "clip",
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    agg_mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict]:
    """``kind`` ``clip``: :func:`clipped_policy_loss`; ``is``: :func:`is_policy_loss` (the clip
    bounds are unused). Shapes as there: logp, old_logp, mask [B, T]; advantages [B] or [B, T]."""
    if kind == "is":
        return is_policy_loss(
            logp, old_logp, advantages, mask, agg_mode=agg_mode, denominator=denominator
        )
    if kind != "clip":
        raise ValueError(f"algorithm.policy_loss={kind!r} not in {list(POLICY_LOSSES)}")
    return clipped_policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        agg_mode=agg_mode,
        denominator=denominator,
    )

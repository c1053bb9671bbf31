"""Trust masks over the train/rollout log-prob ratio ρ_t = π_train(a_t|s_t) / π_rollout(a_t|s_t).

- IcePop (GLM-5 reasoning RL): m_t = 1[1/β ≤ ρ_t ≤ β] (boundaries kept), β = 2 by default.
- DIS (direct double-sided IS, async agentic RL): keep ρ_t strictly inside (1 − ε_l, 1 + ε_h);
  tokens below are ``dis_low``, above ``dis_high``.
- ``none``: every action token is trusted (the ``icepop-off`` fault).
Ratios are computed as exp(Δ) in fp32 from log-probs; the mask is bool and only ever True on
action tokens. Reason codes are indices into the telemetry enum ``mask_reason`` (one tuple,
``observability.enums.MASK_REASONS``), always looked up by name.
"""

from __future__ import annotations

import torch

from observability.enums import MASK_REASONS

REASONS = MASK_REASONS
REASON = {name: code for code, name in enumerate(REASONS)}
"""Mask reason name -> its code."""
KEPT, ICEPOP, DIS_LOW, DIS_HIGH = (
    REASON["kept"],
    REASON["icepop"],
    REASON["dis_low"],
    REASON["dis_high"],
)
NOT_ACTION, STALE = REASON["not_action"], REASON["stale"]
TRUST_RULES = ("icepop", "dis", "none")


def trust_mask(
    train_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    rule: str = "icepop",
    beta: float = 2.0,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
) -> tuple[torch.Tensor, dict]:
    """Which action tokens may carry gradient.

    Args:
        train_logp: [B, T] train-engine log-probs (detached).
        rollout_logp: [B, T] rollout-engine log-probs.
        action_mask: [B, T] bool, True on action tokens.
    Returns:
        (mask [B, T] bool, metrics) with ``reason`` [B, T] int8 codes (index into ``REASONS``),
        ``ratio`` [B, T] fp32, ``masked_fraction`` scalar (masked action tokens / action tokens).
    """
    if rule not in TRUST_RULES:
        raise ValueError(f"algorithm.trust_rule={rule!r} not in {TRUST_RULES}")
    ratio = torch.exp(train_logp.float() - rollout_logp.float())
    reason = torch.full_like(ratio, KEPT, dtype=torch.int8)
    # Written as "not inside" so a NaN ratio (e.g. both log-probs −inf) is masked, never kept.
    if rule == "icepop":
        reason[~((ratio >= 1.0 / beta) & (ratio <= beta))] = ICEPOP
    elif rule == "dis":
        reason[~(ratio < 1.0 + eps_high)] = DIS_HIGH
        reason[ratio <= 1.0 - eps_low] = DIS_LOW
    reason[~action_mask] = NOT_ACTION
    mask = reason == KEPT
    n_action = action_mask.sum().clamp_min(1)
    metrics = {
        "reason": reason,
        "ratio": ratio,
        "masked_fraction": (action_mask & ~mask).sum() / n_action,
    }
    return mask, metrics

"""The policy-gradient math of a step: token log-probs, GRPO advantages, trust masks, policy loss.

Token aggregation: the one place where a loss's denominator is chosen.

Modes (as in verl's ``agg_loss``):
- ``token-mean``: Σ_{b,t} m·x / Σ_{b,t} m — every trusted token weighs the same;
- ``seq-mean-token-mean``: mean over sequences with ≥ 1 masked token of (Σ_t m·x / Σ_t m);
- ``seq-mean-token-sum``: mean over sequences of Σ_t m·x;
- ``global-token``: Σ m·x / ``denominator`` (a fixed token count given by the caller, e.g. the
  batch's action tokens before trust masking: masked tokens then shrink the gradient instead of
  re-weighting the survivors — the CompactionRL lesson that the denominator is the algorithm).

Token log-probs and entropy from logits, with the rollout's temperature.

The trainer must score tokens under the same distribution the rollout sampled from: logits are
divided by the sampling temperature before the log-softmax (vLLM's ``processed`` log-prob mode).
All math in fp32.

GRPO group-relative advantage: Â_i = (R_i − mean_G R) / (std_G R + ε).

std is the population standard deviation (ddof=0) over the group; a group whose rewards are all
equal has std 0, every advantage exactly 0, and is counted as *degenerate* (it carries no signal).

Trust masks over the train/rollout log-prob ratio ρ_t = π_train(a_t|s_t) / π_rollout(a_t|s_t).

- IcePop (GLM-5 reasoning RL): m_t = 1[1/β ≤ ρ_t ≤ β] (boundaries kept), β = 2 by default.
- DIS (direct double-sided IS, async agentic RL): keep ρ_t strictly inside (1 − ε_l, 1 + ε_h);
  tokens below are ``dis_low``, above ``dis_high``.
- ``none``: every action token is trusted (the ``icepop-off`` fault).
Ratios are computed as exp(Δ) in fp32 from log-probs; the mask is bool and only ever True on
action tokens. Reason codes are indices into the telemetry enum ``mask_reason`` (one tuple,
``observability.enums.MASK_REASONS``), always looked up by name.

GRPO/PPO clipped policy loss over trusted tokens.

    r_t = exp(logp_t − old_logp_t),
    L   = −agg_t[ min(r_t Â, clip(r_t, 1 − ε_l, 1 + ε_h) Â) ]   over mask (trusted action tokens).

Asymmetric clip (ε_l = 0.2, ε_h = 0.28: "clip-higher"). ``clip_fraction`` counts tokens where the
clipped branch is the active minimum (the gradient is zero there).
"""

from __future__ import annotations

import torch

from observability.enums import MASK_REASONS

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "global-token")


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Reduce per-token values to a scalar.

    Args:
        values: [B, T] fp32.
        mask: [B, T] bool.
    Returns:
        scalar tensor (0 when nothing is masked in).
    """
    if mode not in AGG_MODES:
        raise ValueError(f"algorithm.loss_agg_mode={mode!r} not in {AGG_MODES}")
    m = mask.to(values.dtype)
    x = torch.where(mask, values, torch.zeros_like(values))  # not values·m: 0·inf = NaN
    if mode == "token-mean":
        return x.sum() / m.sum().clamp_min(1.0)
    if mode == "global-token":
        if denominator is None:
            raise ValueError("loss_agg_mode='global-token' needs an explicit denominator")
        return x.sum() / torch.as_tensor(denominator, dtype=values.dtype).clamp_min(1.0)
    per_seq = m.sum(dim=1)
    has = per_seq > 0
    if mode == "seq-mean-token-mean":
        seq = x.sum(dim=1) / per_seq.clamp_min(1.0)
    else:
        seq = x.sum(dim=1)
    return (seq * has).sum() / has.sum().clamp_min(1)


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

"""The critic's math: skip-observation GAE, cross-segment credit, value loss.

Skip-observation GAE (SAO): generalized advantage estimation over the policy's own tokens only.

Design. A trajectory interleaves policy tokens (actions, summaries) with tokens the policy did not
produce (prompt, environment observations, copied tails, padding). The critic is never asked for a
value transition across an observation: the recursion runs over the *trainable* tokens in order,
so the last token of action i bootstraps from the first token of action i+1:

    δ(a_i,N)  = r(a_i,N) + γ·V(a_{i+1},0) − V(a_i,N)
    Â(a_i,N)  = δ(a_i,N) + γλ·Â(a_{i+1},0)

and inside an action the usual per-token recursion (δ_t = r_t + γV_{t+1} − V_t). After the last
trainable token the bootstrap is 0 (the episode, or the segment, ends there). Without observations
this is exactly the standard GAE recursion. Returns are ``Â + V`` (the critic's targets).

Layout: token-aligned ``[B, T]`` tensors; ``values[:, t]`` is V of the state in which token t is
generated (the critic's prediction-space output shifted by one, as ``train_logp`` is). The
vectorized form packs each row's trainable tokens to the left (a stable sort keeps their order),
runs one reverse scan over the packed columns for the whole batch, and scatters back.
Simplifications: per-token rewards are given by the caller (outcome rewards sit on the last
trainable token); no value clipping here (see ``value_loss``).

CompactionRL's cross-segment credit: ``Â_{s,i} = (γλ)^{N_{>s}} · A^loc_{s,i}``.

A compacted trajectory is trained as independent segments (each row its own local GAE, all sharing
the final reward). Alone, that makes an early summary look as close to the final outcome as the
last answer. ``N_{>s}`` counts the trainable tokens of the *later* segments of the same trajectory;
discounting a segment's local advantages by ``(γλ)^{N_{>s}}`` restores the approximate distance
from its tokens to the end, while the segments stay separate rows (parallel training).
Simplification: the factor is computed in float64 and returned as float32; rows of uncompacted
trajectories (their own single segment) get factor 1.

The critic's loss and its calibration metric.

    L_V = agg_t[ ½ (V_t − G_t)² ]  over the trainable tokens (G: GAE returns, detached)

with the same explicit-denominator aggregation as the policy loss (``core.algorithms.policy``).
Explained variance ``1 − Var(G − V) / Var(G)`` measures how much of the returns' spread the critic
predicts (1: perfect, 0: no better than a constant, < 0: worse). Simplification: no value
clipping (the critic takes K small steps per policy step instead).
"""

from __future__ import annotations

import torch

from core.algorithms.policy import aggregate


def skip_observation_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    trainable: torch.Tensor,
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """GAE over the trainable tokens of each row, skipping every other token.

    Args:
        rewards: [B, T] fp32 per-token rewards (read on trainable tokens only).
        values: [B, T] fp32 V(state before token t) (read on trainable tokens only; detached).
        trainable: [B, T] bool, the tokens the recursion runs over (actions and summaries).
        gamma: discount γ in [0, 1]; lam: GAE λ in [0, 1].
    Returns:
        (advantages [B, T], returns [B, T] = Â + V on trainable tokens, both 0 elsewhere;
        metrics: ``n_tokens`` scalar, ``advantage_mean`` scalar over trainable tokens).
    """
    _check(gamma, lam)
    if rewards.shape != values.shape or rewards.shape != trainable.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and trainable "
            f"{tuple(trainable.shape)} must have the same [B, T] shape"
        )
    b, t = trainable.shape
    zero = torch.zeros((), dtype=values.dtype)
    order = torch.argsort((~trainable).to(torch.int8), dim=1, stable=True)  # [B, T] trainable first
    m = trainable.gather(1, order)  # [B, T] packed mask: a prefix of True per row
    r = torch.where(m, rewards.gather(1, order), zero)  # [B, T] packed
    v = torch.where(m, values.detach().gather(1, order), zero)  # [B, T] packed
    packed = torch.zeros_like(v)  # [B, T]
    next_v = torch.zeros(b, dtype=v.dtype)  # [B] V of the next trainable token (0 after the last)
    next_adv = torch.zeros(b, dtype=v.dtype)  # [B]
    for j in range(t - 1, -1, -1):
        delta = r[:, j] + gamma * next_v - v[:, j]
        adv = torch.where(m[:, j], delta + gamma * lam * next_adv, zero)
        packed[:, j] = adv
        next_v = torch.where(m[:, j], v[:, j], zero)
        next_adv = adv
    advantages = torch.zeros_like(packed).scatter(1, order, packed)  # [B, T] token-aligned
    returns = torch.where(trainable, advantages + values.detach(), zero)
    n = trainable.sum()
    metrics = {
        "n_tokens": n,
        "advantage_mean": advantages.sum() / n.clamp_min(1),
    }
    return advantages, returns, metrics


def outcome_rewards(reward: torch.Tensor, trainable: torch.Tensor) -> torch.Tensor:
    """Per-token rewards of outcome-rewarded rows: each row's reward on its last trainable token.

    Args:
        reward: [B] fp32 (a segment carries its trajectory's final reward).
        trainable: [B, T] bool.
    Returns:
        [B, T] fp32, zero except at the last trainable token of each row that has one.
    """
    t = trainable.shape[1]
    idx = torch.arange(t).expand_as(trainable)  # [B, T]
    last = torch.where(trainable, idx, torch.full_like(idx, -1)).max(1).values  # [B]
    at_last = idx == last[:, None]  # [B, T]
    return torch.where(at_last & trainable, reward[:, None].to(torch.float32), 0.0)


def _check(gamma: float, lam: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"critic.gamma={gamma} must be in [0, 1]")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"critic.lam={lam} must be in [0, 1]")


def later_trainable_tokens(
    trajectory: torch.Tensor, segment: torch.Tensor, n_trainable: torch.Tensor
) -> torch.Tensor:
    """N_{>s}: trainable tokens in the later segments of each row's trajectory.

    Args:
        trajectory: [B] int64, the trajectory each row (segment) belongs to.
        segment: [B] int64, the row's segment index within its trajectory.
        n_trainable: [B] int64, trainable tokens of each row.
    Returns:
        [B] int64.
    """
    same = trajectory[:, None] == trajectory[None, :]  # [B, B]
    later = segment[None, :] > segment[:, None]  # [B, B]: column j is later than row i
    return ((same & later).to(torch.int64) * n_trainable[None, :].to(torch.int64)).sum(1)


def cross_segment_discount(
    trajectory: torch.Tensor,
    segment: torch.Tensor,
    n_trainable: torch.Tensor,
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, dict]:
    """The per-row factor ``(γλ)^{N_{>s}}``.

    Args:
        trajectory, segment, n_trainable: [B] int64 (see :func:`later_trainable_tokens`).
        gamma, lam: γ and λ in [0, 1] (the GAE's).
    Returns:
        (factor [B] fp32, metrics: ``n_later`` [B] int64, ``factor_min`` scalar).
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma={gamma} and lam={lam} must be in [0, 1]")
    n_later = later_trainable_tokens(trajectory, segment, n_trainable)
    base = torch.tensor(gamma * lam, dtype=torch.float64)
    factor = base.pow(n_later.to(torch.float64)).to(torch.float32)  # [B]
    return factor, {"n_later": n_later, "factor_min": factor.min() if factor.numel() else factor}


def trajectory_key(sample_id: torch.Tensor, parent_id: torch.Tensor) -> torch.Tensor:
    """[B] int64: the id of the trajectory a row belongs to (its first segment's sample id)."""
    return torch.where(parent_id >= 0, parent_id, sample_id)


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    agg_mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict]:
    """Squared-error value loss.

    Args:
        values: [B, T] fp32 critic values (with grad).
        returns: [B, T] fp32 targets (detached).
        mask: [B, T] bool, the tokens the critic is trained on.
    Returns:
        (loss scalar, metrics: ``explained_variance``, ``value_mean``, ``return_mean`` scalars).
    """
    err = 0.5 * (values - returns.detach()).pow(2)  # [B, T]
    loss = aggregate(err, mask, mode=agg_mode, denominator=denominator)
    n = mask.sum().clamp_min(1)
    v = values.detach()
    metrics = {
        "explained_variance": explained_variance(v, returns, mask),
        "value_mean": torch.where(mask, v, 0.0).sum() / n,
        "return_mean": torch.where(mask, returns, 0.0).sum() / n,
    }
    return loss, metrics


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor):
    """``1 − Var(G − V) / Var(G)`` over ``mask`` (population variances; NaN when Var(G) = 0).

    Args:
        values, returns: [B, T] fp32; mask: [B, T] bool.
    Returns:
        scalar fp32 tensor.
    """
    g = returns[mask].double()
    d = g - values[mask].double()
    var_g = g.var(unbiased=False) if g.numel() else torch.tensor(float("nan"), dtype=g.dtype)
    var_d = d.var(unbiased=False) if d.numel() else torch.tensor(float("nan"), dtype=g.dtype)
    out = torch.where(var_g > 0, 1.0 - var_d / var_g, torch.tensor(float("nan"), dtype=g.dtype))
    return out.float()

"""The critic in the loop: its config, construction, values, GAE targets and K value updates.

    values       = critic(exact ids)                         # no grad, token-aligned [B, T]
    Â, G         = skip_observation_gae(r, values)           # per row (segment); G = Â + V
    Â           *= (γλ)^{N_{>s}}                             # compacted trajectories only
    for _ in range(K): value_loss(critic(ids), G).backward(); critic_optimizer.step()

The value targets are each row's local returns (a segment's value predicts the shared final
reward from inside the segment); only the policy's advantages carry the cross-segment discount.
Simplification: the critic's forward activations are not itemised in the memory ledger (its
weights, gradients and optimizer states are, under owner ``critic``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from core.algorithms.value import (
    cross_segment_discount,
    explained_variance,
    outcome_rewards,
    skip_observation_gae,
    trajectory_key,
    value_loss,
)
from core.loops.step import TrainableModel, UpdateResult, optimizer_step
from core.rollout.trajectories import Trajectories

if TYPE_CHECKING:  # the model module imports megatron; the config must stay light to import
    from core.model.critic import Critic


@dataclass(frozen=True)
class CriticConfig:
    """The value model and GAE (the ``[critic]`` config section; used by ``sao`` and
    ``compaction``)."""

    updates_per_step: int = 2
    """K: value updates (each its own optimizer step) before every policy update (>= 1)."""
    lr: float = 1e-3
    """The critic's AdamW learning rate (> 0)."""
    gamma: float = 1.0
    """γ: discount of the GAE and of the cross-segment factor, in [0, 1]."""
    lam: float = 0.95
    """λ: GAE λ (and the cross-segment factor's), in [0, 1]."""
    freeze_attention: bool = True
    """Train only the MLP/MoE projections and the value head (SAO's frozen critic attention)."""
    grad_clip: float = 1.0
    """Global grad-norm clip of the critic's steps (0 = off)."""
    warmup_steps: int = 0
    """The first N steps train only the critic (the policy step is skipped, recorded with
    ``skip_reason = "critic_warmup"``): a zero-initialised value head is no baseline yet."""

    def __post_init__(self) -> None:
        if self.updates_per_step < 1:
            raise ValueError(f"critic.updates_per_step={self.updates_per_step} must be >= 1")
        if not self.lr > 0:
            raise ValueError(f"critic.lr={self.lr} must be > 0")
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"critic.{name}={getattr(self, name)} must be in [0, 1]")
        if self.grad_clip < 0:
            raise ValueError(f"critic.grad_clip={self.grad_clip} must be >= 0")
        if self.warmup_steps < 0:
            raise ValueError(f"critic.warmup_steps={self.warmup_steps} must be >= 0")


def build_critic(
    model_cfg, weights: dict, cfg: CriticConfig, optim, *, seed: int
) -> TrainableModel:
    """A ``Critic`` initialised from the base ``weights`` with its own AdamW (betas, ε, weight
    decay from ``optim``, learning rate from ``cfg``)."""
    from core.model.critic import Critic

    critic = Critic(model_cfg, seed=seed, freeze_attention=cfg.freeze_attention)
    critic.load_base(weights)
    opt = torch.optim.AdamW(
        [p for p in critic.parameters() if p.requires_grad],
        lr=cfg.lr,
        betas=(optim.beta1, optim.beta2),
        eps=optim.eps,
        weight_decay=optim.weight_decay,
    )
    return TrainableModel("critic", critic, opt, grad_clip=cfg.grad_clip)


def gae_targets(
    traj: Trajectories, critic: Critic, cfg: CriticConfig, *, cross_segment: bool
) -> dict:
    """Fill ``traj.values``, ``traj.returns`` and ``traj.advantages`` [B, T]; returns metrics."""
    critic.eval()
    with torch.no_grad():
        traj.values = critic.values(traj.ids, traj.valid)  # [B, T]
    trainable = traj.generated & traj.valid  # [B, T] actions and summaries
    rewards = outcome_rewards(traj.reward, trainable)  # [B, T]
    adv, ret, _ = skip_observation_gae(
        rewards, traj.values, trainable, gamma=cfg.gamma, lam=cfg.lam
    )
    factor = torch.ones(traj.size)
    if cross_segment:
        key = trajectory_key(traj.sample_id, traj.parent_id)
        factor, _ = cross_segment_discount(
            key, traj.segment, trainable.sum(1), gamma=cfg.gamma, lam=cfg.lam
        )
    traj.advantages = adv * factor[:, None]  # [B, T]
    traj.returns = ret
    in_loss = traj.loss_mask & traj.valid
    return {
        "value_explained_variance": float(explained_variance(traj.values, ret, in_loss)),
        "segment_factor_min": float(factor.min()) if traj.size else 1.0,
    }


def critic_updates(
    model: TrainableModel, traj: Trajectories, *, k: int, memory=None
) -> list[UpdateResult]:
    """K value steps on ``traj.returns`` over the tokens in the loss, each its own optimizer
    step (none when no token is in the loss)."""
    mask = traj.loss_mask & traj.valid  # [B, T]
    skip = None if bool(mask.any()) else "no_loss_tokens"
    model.module.train()
    results = []
    for _ in range(k):
        values = model.module.values(traj.ids, traj.valid)  # [B, T] with grad
        term = value_loss(values, traj.returns, mask)
        results.append(optimizer_step(model, {"value": term}, memory=memory, skip_reason=skip))
    return results

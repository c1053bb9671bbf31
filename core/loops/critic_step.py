"""One update of the critic-based loops (SAO, CompactionRL) on a batch of finished trajectories.

    drop samples with v_train − min(token version) > τ            # recorded as ``stale``
    values, Â, G = critic(ids), skip_observation_gae(...)          # Â·(γλ)^{N_{>s}} if compacted
    K × (value_loss(critic(ids), G).backward(); critic_opt.step())
    train_lp     = actor.logprob(exact ids)
    trust        = dis | icepop (train_lp, rollout_lp)
    loss         = policy_loss(ρ, Â) over trusted tokens / |M|     # M: trainable tokens in the loss
    actor_opt.step(); version += 1 (none when nothing is trusted); sync every K versions

Reuses the sync loop's scoring, trust, update and records (``core.loops.grpo``,
``core.loops.step``, ``core.telemetry.rows``); adds the critic's columns and the compaction
events. The loss denominator |M| counts the trainable tokens (actions and summaries) of every
sample and segment in the loss, before trust masking (``global-token``); with
``seq-mean-token-mean`` each row (segment) is averaged first — CompactionRL's ablation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core.loops.critic import critic_updates, gae_targets
from core.loops.grpo import _skip_reason, policy_term, record_step, score, trust
from core.loops.session import Session
from core.loops.step import optimizer_step, step_metrics
from core.rollout.trajectories import Trajectories

LIVE = ("trained", "truncated")
"""Sample statuses still in the batch (environment failures and dropped groups already left)."""


@dataclass
class CriticUpdate:
    """What one update did: the ``steps`` row's metrics and what the records need."""

    metrics: dict
    reason: torch.Tensor
    """[B, T-1] int8 mask-reason codes."""
    v_train: int
    sparse: object


def critic_update(
    s: Session,
    step: int,
    traj: Trajectories,
    *,
    t0: float,
    cross_segment: bool = False,
    on_sync: Callable[[Session], None] | None = None,
) -> CriticUpdate:
    """Train on ``traj`` (collected since ``t0``); ``on_sync`` runs after each weight sync."""
    cfg, alg = s.cfg, s.cfg.algorithm
    t_rollout = time.perf_counter() - t0
    v_train = s.version
    staleness = traj.staleness(v_train)  # [B]
    live = torch.tensor([st in LIVE for st in traj.status], dtype=torch.bool)
    traj.drop(live & (staleness > alg.staleness_limit), "stale")
    critic = s.models.critic
    gae_m = gae_targets(traj, critic.module, cfg.critic, cross_segment=cross_segment)
    value_steps = critic_updates(critic, traj, k=cfg.critic.updates_per_step, memory=s.memory)
    fwd, sparse = score(s, traj)  # π_train (with grad), π_old per algorithm.old_logp
    actions = traj.targets(traj.generated & traj.train_valid)  # [B, T-1]
    trusted, reason = trust(traj, actions, alg)
    denominator = traj.targets(traj.loss_mask & traj.train_valid).sum()  # |M|
    policy = policy_term(fwd.logp, traj, trusted, actions=actions, alg=alg, denominator=denominator)
    terms = {"policy": policy}
    s.memory.forward_end(fwd.logits, sparse=sparse)
    skip = None if bool(trusted.any()) else _skip_reason(traj)
    if step < cfg.critic.warmup_steps:
        skip = "critic_warmup"  # the value head learns a baseline before the policy moves
    update = optimizer_step(s.models.actor, terms, memory=s.memory, skip_reason=skip)
    if update.stepped:
        s.version += 1
        if s.version % cfg.rollout.sync_every == 0:
            s.sync()
            if on_sync is not None:
                on_sync(s)
    t_train = time.perf_counter() - t0 - t_rollout
    s.memory.end_step(step)
    kept = torch.tensor([st in LIVE for st in traj.status], dtype=torch.bool)  # after drops
    first = (traj.segment == 0) & kept  # [B] one row per trajectory in the loss
    rewards = traj.reward[first]
    metrics = step_metrics(traj, actions=actions, trusted=trusted, reason=reason, update=update)
    stepped = [u for u in value_steps if u.stepped]
    metrics.update(
        step=step,
        policy_version=s.version,
        reward_mean=float(rewards.mean()) if rewards.numel() else float("nan"),
        reward_std=float(rewards.std(unbiased=False)) if rewards.numel() else float("nan"),
        clip_fraction=float(terms["policy"][1]["clip_fraction"]),
        staleness_max=int(staleness[live].max()) if bool(live.any()) else 0,
        rollout_time_s=t_rollout,
        train_time_s=t_train,
        step_time_s=time.perf_counter() - t0,
        lr=cfg.optim.lr,
        peak_memory_bytes=s.peak_memory(step),
        value_loss=float(value_steps[0].terms["value"]),
        value_explained_variance=gae_m["value_explained_variance"],
        critic_grad_norm=float(stepped[-1].grad_norm) if stepped else None,
        critic_updates=len(stepped),
        critic_frozen_checksum=critic.module.frozen_checksum(),
        loss_denominator=int(denominator) if alg.loss_agg_mode == "global-token" else None,
        n_trajectories=int(first.sum()),
    )
    return CriticUpdate(metrics, reason, v_train, sparse)


def critic_rl_step(
    s: Session,
    step: int,
    traj: Trajectories,
    *,
    t0: float,
    cross_segment: bool = False,
    tables: dict | None = None,
) -> dict:
    """:func:`critic_update`, then the step's telemetry (plus ``tables``); returns the metrics."""
    up = critic_update(s, step, traj, t0=t0, cross_segment=cross_segment)
    for table, columns in (tables or {}).items():
        s.telemetry.emit(table, columns)
    record_step(
        s,
        traj,
        step=step,
        reason=up.reason,
        v_train=up.v_train,
        metrics=up.metrics,
        sparse=up.sparse,
    )
    return up.metrics

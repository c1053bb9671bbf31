"""SAO (single-rollout asynchronous optimization), as the seed writes it.

    trajectory = async_rollout.one(prompt)           # group size 1: no group barrier
    values     = critic(trajectory)                  # frozen attention, MLP + head trained
    Â          = skip_observation_gae(values, rewards)
    for _ in range(K): value_loss(critic, returns).backward(); critic_optimizer.step()
    ratio      = exp(actor.logprob(ids) − rollout_logp); mask = DIS
    policy_loss(mask, ratio, Â).backward(); actor_optimizer.step()

The update is ``core.loops.critic_step``. Consumption: with ``rollout.mode = "async"`` the
orchestrator's workers run single-trajectory sessions and the trainer takes the first
``prompts_per_step`` that finish (complete-and-consume; nothing waits for a group); weights go to
the workers after each sync, as in ``core.loops.async_grpo``. With ``rollout.mode = "sync"`` each
step collects ``prompts_per_step`` single trajectories through the sync collector.
"""

from __future__ import annotations

import time

from core.loops.async_grpo import AsyncRollout, run_with_workers
from core.loops.critic_step import critic_rl_step, critic_update
from core.loops.grpo import collect_step, record_step
from core.loops.loop import run_steps
from core.loops.session import Session
from core.rollout.group_batch import groups_to_batch
from core.telemetry.agent import sync_rows, turn_rows


def sao_step(s: Session, step: int) -> dict:
    """One SAO step over single trajectories from the sync collector."""
    t0 = time.perf_counter()
    s.memory.begin_step(step)
    traj = collect_step(s, step)  # B single trajectories (group size 1)
    return critic_rl_step(s, step, traj, t0=t0)


def async_sao_step(s: Session, ar: AsyncRollout, step: int) -> dict:
    """One SAO step over the first ``prompts_per_step`` trajectories the workers finished."""
    t0 = time.perf_counter()
    s.memory.begin_step(step)
    taken = ar.orch.take_groups(s.cfg.algorithm.prompts_per_step)  # groups of one
    batch = groups_to_batch(taken.groups, taken.dropped, tok=s.tok, group_size=1)
    traj = batch.traj
    s.memory.rollout_done(traj)
    up = critic_update(s, step, traj, t0=t0, on_sync=ar.push)
    up.metrics.update(
        queue_depth=taken.queue_depth,
        in_flight=taken.in_flight,
        worker_busy_fraction=ar.busy_fraction(),
        rollout_wait_s=taken.wait_s,
        n_env_failures=batch.n_env_failures,
        n_refilled=batch.n_refilled,
        n_groups_dropped=batch.n_groups_dropped,
        n_weight_switches=ar.switches(),
    )
    s.telemetry.emit("turns", turn_rows(batch.episodes, step=step))
    if ar.rows:
        s.telemetry.emit("weight_syncs", sync_rows(ar.rows))
        ar.rows = []
    record_step(
        s, traj, step=step, reason=up.reason, v_train=up.v_train, metrics=up.metrics, sparse=None
    )
    return up.metrics


def run_sao(s: Session, *, steps: int, progress=None) -> dict:
    """Train ``steps`` SAO steps; returns the summary (first/last eval, per-step metrics)."""
    if s.cfg.rollout.mode == "async":
        return run_with_workers(s, async_sao_step, steps=steps, progress=progress)
    return run_steps(s, sao_step, steps=steps, progress=progress)

"""The async GRPO loop, as the seed writes it: rollout workers run ahead, the trainer consumes.

    workers  : sessions turn by turn on engine replicas → completed groups → central queue
    groups   = queue.take(B)                                  # complete-and-consume (group-wise)
    drop samples with v_train − min(token version) > τ        # recorded as ``stale``
    train_lp = actor.logprob(exact ids)                       # observations carry no loss
    Â        = grpo(rewards of each group)
    trust    = dis | icepop (train_lp, rollout_lp)            # DIS: 1 − ε_l < r_t < 1 + ε_h
    loss     = −mean(trust · r · Â · logp)  (``policy_loss = "is"``)
    optimizer.step(); version += 1
    every K versions: gather → reshard → quantize → send to every worker; each worker switches
    between two decode steps and reports it (switch, ack); optionally reset the optimizer

Reuses the sync loop's pieces (``score``, ``grpo_token_advantages``, ``trust``, ``policy_term``,
``optimizer_step``, ``record_step``); adds the ``turns`` table and per-worker sync rows (``core.telemetry.agent``).
Simplifications: dense models only (no DSA/MoE records on the workers); the eval engine of the
session doubles as the sync's first receiver and the probe.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import torch

from core.algorithms.policy import grpo_token_advantages
from core.loops.evaluate import evaluate
from core.loops.grpo import _skip_reason, policy_term, record_step, score, trust
from core.loops.loop import run_steps
from core.loops.session import Session
from core.loops.step import optimizer_step, step_metrics
from core.memory.replicas import ReplicaMemory
from core.rollout.executor import start_workers
from core.rollout.group_batch import groups_to_batch
from core.rollout.orchestrator import Orchestrator
from core.rollout.worker import WorkerSpec
from core.sync.weight_sync import payload_checksum
from core.telemetry.agent import sync_rows, turn_rows


class AsyncRollout:
    """The orchestrator and its workers for a session, plus the bookkeeping of weight pushes."""

    def __init__(self, s: Session) -> None:
        cfg, ro = s.cfg, s.cfg.rollout
        if s.model_cfg.dsa_topk > 0 or s.model_cfg.moe_layers:
            raise ValueError("rollout.mode='async' supports dense models only (no DSA / MoE)")
        wake = threading.Event()
        specs = [
            WorkerSpec(
                worker_id=i,
                model=dataclasses.asdict(s.model_cfg),
                precision=s.engine.precision,
                params=ro.sampling(),
                eos_id=s.tok.eos_id,
                pad_id=s.tok.pad_id,
                kv_on_switch=ro.kv_on_switch,
                max_batch=ro.max_batch,
                engine=ro.engine,
            )
            for i in range(ro.workers)
        ]
        handles = start_workers(ro.executor, specs, notify=wake.set, ray_num_cpus=ro.ray_num_cpus)
        self.orch = Orchestrator(
            handles,
            s.envs,
            tok=s.tok,
            ids=s.ids,
            group_size=cfg.algorithm.group_size,
            max_turns=ro.max_turns,
            max_new_tokens=ro.max_new_tokens,
            max_seq_len=s.model_cfg.max_seq_len,
            in_flight_groups=ro.in_flight_groups,
            env_threads=ro.env_threads,
            max_refills=ro.max_refills,
            history=ro.history,
            seed=cfg.train.seed,
            wake=wake,
        )
        self.sync_of_version: dict[int, tuple[int, int, str]] = {}
        self.rows: list[tuple] = []
        self.busy = {h.worker_id: 0.0 for h in handles}
        self.replicas = ReplicaMemory(s.memory.ledger)
        self.local = {h.worker_id: getattr(h, "in_process", False) for h in handles}
        self.t_busy = time.perf_counter()
        self.push(s)  # the base weights (version 0, synced by the session)
        self.orch.start()

    def push(self, s: Session) -> None:
        """Send the eval engine's freshly synced weights to every worker (*send* rows now)."""
        sync_id = s.weight_sync.sync_id - 1
        checksum, _, nbytes = payload_checksum(s.engine.weights)
        t0 = time.time()
        sent = self.orch.publish(s.engine.weights, s.version, checksum)
        self.sync_of_version[s.version] = (sync_id, nbytes, checksum)
        for h, t in zip(self.orch.handles, sent, strict=True):
            self.rows.append((sync_id, s.version, "send", t, nbytes, checksum, h.worker_id, t - t0))

    def switches(self) -> int:
        """Turn the switch reports since the last call into *switch* and *ack* rows."""
        events = self.orch.switch_events()
        now = time.time()
        for ev in events:
            sync_id, nbytes, checksum = self.sync_of_version[ev.version]
            self.rows.append(
                (
                    sync_id,
                    ev.version,
                    "switch",
                    ev.switched_at,
                    nbytes,
                    None,
                    ev.worker,
                    ev.switched_at - ev.staged_at,
                )
            )
            self.rows.append(
                (
                    sync_id,
                    ev.version,
                    "ack",
                    now,
                    nbytes,
                    ev.checksum,
                    ev.worker,
                    now - ev.switched_at,
                )
            )
        return len(events)

    def worker_stats(self) -> list[dict]:
        """Every worker's stats; their engine replicas go into the memory ledger."""
        stats = self.orch.worker_stats()
        self.replicas.update(stats, local=self.local)
        return stats

    def busy_fraction(self, stats: list[dict] | None = None) -> float:
        """Mean busy fraction of the workers since the last call, from their ``stats`` (None:
        fetched now, see ``worker_stats``)."""
        stats = self.worker_stats() if stats is None else stats
        now, total = time.perf_counter(), []
        for st in stats:
            total.append(st["busy_s"] - self.busy[st["worker"]])
            self.busy[st["worker"]] = st["busy_s"]
        wall, self.t_busy = now - self.t_busy, now
        return min(1.0, sum(total) / len(total) / wall) if wall > 0 and total else 0.0

    def stop(self) -> None:
        self.orch.stop()
        self.replicas.release()


def async_train_step(s: Session, ar: AsyncRollout, step: int) -> dict:
    cfg, alg = s.cfg, s.cfg.algorithm
    t0 = time.perf_counter()
    s.memory.begin_step(step)
    taken = ar.orch.take_groups(alg.prompts_per_step)
    batch = groups_to_batch(taken.groups, taken.dropped, tok=s.tok, group_size=alg.group_size)
    traj = batch.traj
    s.memory.rollout_done(traj)
    t_rollout = time.perf_counter() - t0
    worker_stats = ar.worker_stats()
    v_train = s.version
    staleness = traj.staleness(v_train)  # [B]
    live = torch.tensor([st in ("trained", "truncated") for st in traj.status])
    traj.drop(live & (staleness > alg.staleness_limit), "stale")
    fwd, _ = score(s, traj)  # π_train (with grad) on the exact ids; π_old per algorithm.old_logp
    actions = traj.targets(traj.generated & traj.train_valid)  # [B, T-1]
    n = batch.n_grouped
    traj.advantages = torch.zeros_like(traj.rollout_logp)  # [B, T]: 0 outside the groups
    traj.advantages[:n], adv_m = grpo_token_advantages(
        traj.reward[:n], traj.generated[:n], group_size=alg.group_size, eps=alg.adv_eps
    )
    trusted, reason = trust(traj, actions, alg)  # dis | icepop | none, drops
    terms = {"policy": policy_term(fwd.logp, traj, trusted, actions=actions, alg=alg)}
    s.memory.forward_end(fwd.logits)
    skip = None if bool(trusted.any()) else _skip_reason(traj)
    update = optimizer_step(s.models.actor, terms, memory=s.memory, skip_reason=skip)
    reset = False
    if update.stepped:
        s.version += 1
        if s.version % cfg.rollout.sync_every == 0:
            s.sync()  # gather → reshard → quantize → switch on the eval engine (+ probe)
            ar.push(s)  # send to every worker; they switch between decode steps and report
            if cfg.optim.reset_on_sync:
                reset_optimizer(s.optimizer)
                reset = True
    t_train = time.perf_counter() - t0 - t_rollout
    s.memory.end_step(step)

    metrics = step_metrics(traj, actions=actions, trusted=trusted, reason=reason, update=update)
    trained = traj.reward[:n]
    metrics.update(
        step=step,
        policy_version=s.version,
        reward_mean=float(adv_m["reward_mean"]),
        reward_std=float(trained.std(unbiased=False)),
        degenerate_group_fraction=float(adv_m["degenerate_fraction"]),
        clip_fraction=float(terms["policy"][1]["clip_fraction"]),
        staleness_max=int(staleness[live].max()) if bool(live.any()) else 0,
        rollout_time_s=t_rollout,
        train_time_s=t_train,
        step_time_s=time.perf_counter() - t0,
        lr=cfg.optim.lr,
        peak_memory_bytes=s.peak_memory(step),
        queue_depth=taken.queue_depth,
        in_flight=taken.in_flight,
        worker_busy_fraction=ar.busy_fraction(worker_stats),
        rollout_wait_s=taken.wait_s,
        n_env_failures=batch.n_env_failures,
        n_refilled=batch.n_refilled,
        n_groups_dropped=batch.n_groups_dropped,
        n_weight_switches=ar.switches(),
        optimizer_reset=reset,
        trained_samples=n,
    )
    s.telemetry.emit("turns", turn_rows(batch.episodes, step=step))
    if ar.rows:
        s.telemetry.emit("weight_syncs", sync_rows(ar.rows))
        ar.rows = []
    record_step(
        s,
        traj,
        step=step,
        reason=reason,
        v_train=v_train,
        metrics={k: v for k, v in metrics.items() if k != "trained_samples"},
        sparse=None,
    )
    return metrics


@torch.no_grad()
def reset_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Zero every tensor state in place (AdamW: moments and step): a fresh optimizer, with the
    same tensors, so the memory ledger sees no new allocation."""
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                v.zero_()


def run_async(s: Session, *, steps: int, progress=None) -> dict:
    """Train ``steps`` async GRPO steps; returns the summary (first/last eval, per-step metrics)."""
    return run_with_workers(s, async_train_step, steps=steps, progress=progress)


def run_with_workers(s: Session, step_fn, *, steps: int, progress=None) -> dict:
    """``core.loops.loop.run_steps`` over ``step_fn(session, async_rollout, step)``: the workers
    start after the first evaluation and stop before the last."""
    first = evaluate(s, 0)
    ar = AsyncRollout(s)
    return run_steps(
        s,
        lambda s, step: step_fn(s, ar, step),
        steps=steps,
        progress=progress,
        first=first,
        stop=ar.stop,
    )

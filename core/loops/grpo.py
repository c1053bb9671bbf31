"""The synchronous loop, as the seed writes it: collect → rewards → score → advantages → update → sync.

    traj        = collect(envs × G, rollout engine)          # exact ids, rollout log-probs, versions
    drop samples with v_train − min(token version) > τ       # recorded as ``stale``
    R           = Σ w_k R_k − Σ λ_j P_j                      # mixed reward (core.rewards.mix)
    train_lp    = actor.logprob(traj.exact_ids)              # never re-tokenized
    teacher_lp  = teacher[domain].prefill_and_score(ids)     # routed teachers (core.teachers)
    Â           = grpo(R) | w·sg(teacher_lp − train_lp) | both   (core.loops.step)
    trust       = icepop | dis (train_lp, rollout_lp)         # 1/β ≤ exp(Δ) ≤ β
    loss        = Σ terms: clipped policy loss [+ w·Top-k reverse KL] over trusted tokens
    optimizer.step(); version += 1 — unless nothing is trusted (then no step, recorded as skipped)
    every K versions: weight_sync(actor → rollout), probe

Telemetry rows are built in one place (``core.telemetry.rows``) from the step's trajectories.
"""

from __future__ import annotations

import time

import torch

from core.algorithms.policy import REASON, policy_loss, trust_mask
from core.loops.loop import run_steps
from core.loops.session import Session
from core.loops.step import (
    actor_forward,
    distill_term,
    old_logp_pass,
    optimizer_step,
    policy_trains,
    step_advantages,
    step_metrics,
    teacher_metrics,
    trainer_inputs,
)
from core.rollout.trajectories import Trajectories, collect
from core.teachers.routing import TeacherBatch, score_with_teachers
from core.telemetry.rows import step_records
from core.telemetry.sparse import capture_sparse


def collect_step(s: Session, step: int) -> Trajectories:
    """B prompts × G episodes through the rollout engine, group-major."""
    alg = s.cfg.algorithm
    envs = s.envs.sample(
        alg.prompts_per_step, seed=s.cfg.train.seed * 1_000_003 + step, repeats=alg.group_size
    )
    traj = collect(
        s.engine,
        envs,
        s.cfg.rollout.sampling(),
        tok=s.tok,
        sample_ids=s.ids.samples(len(envs)),
        group_ids=s.ids.groups(alg.prompts_per_step).repeat_interleave(alg.group_size),
        generator=s.generator,
        max_turns=s.cfg.rollout.max_turns,
        env_pool=s.env_pool if s.cfg.rollout.max_turns > 1 else None,
    )
    s.memory.rollout_done(traj)  # live IO, handed to the trainer
    return traj


def train_step(s: Session, step: int) -> dict:
    cfg, alg = s.cfg, s.cfg.algorithm
    t0 = time.perf_counter()
    s.memory.begin_step(step)  # memory ledger (core.memory.hooks): the step's peak window
    traj = collect_step(s, step)  # rollout: exact ids, rollout log-probs, versions
    t_rollout = time.perf_counter() - t0
    v_train = s.version
    staleness = traj.staleness(v_train)  # [B]
    traj.drop(staleness > alg.staleness_limit, "stale")  # τ, per sample
    reward_m = s.rewards.apply(traj)  # R = Σ w_k R_k − Σ λ_j P_j, every component recorded
    fwd, sparse = score(s, traj)  # π_train (with grad), π_old; train/rollout sparse records
    teacher = teacher_scores(s, traj)  # routed teachers' log-probs on the exact ids, or None
    traj.advantages, adv_m = step_advantages(traj, alg, teacher)  # grpo | opd | grpo+opd
    actions = traj.targets(traj.generated & traj.train_valid)  # [B, T-1]
    trusted, reason = trust(traj, actions, alg)  # icepop | dis | none, drops
    terms = {}
    if policy_trains(alg):  # every kind but OPD through the Top-k term alone
        terms["policy"] = policy_term(fwd.logp, traj, trusted, actions=actions, alg=alg)
    if teacher is not None and alg.uses_teacher and alg.opd_loss == "topk":
        terms["distill"] = distill_term(
            fwd.logits, teacher, trusted, alg=alg, temperature=cfg.rollout.temperature
        )
    s.memory.forward_end(fwd.logits, sparse=sparse)  # these stay alive for the step
    skip = None if bool(trusted.any()) else _skip_reason(traj)
    update = optimizer_step(s.models.actor, terms, memory=s.memory, skip_reason=skip)
    if update.stepped:
        s.version += 1
    t_train = time.perf_counter() - t0 - t_rollout
    if update.stepped and s.version % cfg.rollout.sync_every == 0:
        s.sync()  # gather → reshard → [quantize] → send → switch → ack, probe
    s.memory.end_step(step)  # frees the step's live IO; memory_events / memory_peaks rows
    metrics = step_metrics(traj, actions=actions, trusted=trusted, reason=reason, update=update)
    metrics.update(
        step=step,
        policy_version=s.version,
        reward_mean=float(adv_m["reward_mean"]),
        reward_std=float(adv_m["reward_std"]),
        degenerate_group_fraction=_opt_float(adv_m["degenerate_fraction"]),
        clip_fraction=float(terms["policy"][1]["clip_fraction"]) if "policy" in terms else None,
        staleness_max=int(staleness.max()),
        rollout_time_s=t_rollout,
        train_time_s=t_train,
        step_time_s=time.perf_counter() - t0,
        lr=cfg.optim.lr,
        peak_memory_bytes=s.peak_memory(step),
        **(sparse.metrics() if sparse is not None else {}),  # topk / route agreement
        **reward_m,  # judge_verifier_agreement
        **(teacher_metrics(traj, teacher, opd=adv_m["opd"]) if teacher is not None else {}),
    )
    record_step(
        s,
        traj,
        step=step,
        reason=reason,
        v_train=v_train,
        metrics=metrics,
        sparse=sparse,
        teacher=teacher,
        opd=adv_m["opd"],
        distill=terms.get("distill"),
    )
    return metrics


def score(s: Session, traj: Trajectories):
    """The actor's scores on the exact ids: π_old (its own pass when ``old_logp = "separate"``),
    then the training forward with grad; returns (ActorForward, SparseStep or None)."""
    cfg, alg = s.cfg, s.cfg.algorithm
    trainer_inputs(traj, tok=s.tok, retokenize=cfg.train.retokenize)
    kw = {
        "temperature": cfg.rollout.temperature,
        "replay": cfg.train.routing_replay,
        "shared_prefix": cfg.train.shared_prefix,
    }
    s.actor.train()
    separate = None
    if alg.old_logp == "separate":
        separate = old_logp_pass(s.actor, traj, **kw)
    s.memory.forward_begin({"ids": traj.train_ids, "valid": traj.train_valid})
    fwd = actor_forward(s.actor, traj, **kw)
    sparse = capture_sparse(s.actor, traj)  # DSA/MoE records (None if dense), before the probe
    traj.old_logp = {"rollout": traj.rollout_logp, "separate": separate}.get(alg.old_logp)
    return fwd, sparse


def teacher_scores(s: Session, traj: Trajectories) -> TeacherBatch | None:
    """Each sample hard-routed to its domain's teacher, which prefills its exact ids and sends
    the configured payload (``Trajectories.teacher_logp``/``teacher_id``); None without teachers."""
    if not s.models.teachers:
        return None
    tc = s.cfg.teachers
    batch = score_with_teachers(
        traj,
        s.models.teachers,
        s.teacher_routes,
        mode=tc.payload,
        k=tc.topk,
        temperature=s.cfg.rollout.temperature,
        memory=s.memory,
    )
    batch.provenance = s.teacher_provenance
    return batch


def policy_term(
    logp, traj: Trajectories, trusted, *, actions, alg, denominator=None
) -> tuple[torch.Tensor, dict]:
    """The policy-gradient loss term: clip (GRPO) or is (the seed's async update −sg(ρ)·Â·logp)
    over the trusted tokens, normalised over the batch's action tokens (or over ``denominator``:
    CompactionRL's trainable tokens across segments).

    Args:
        logp: [B, T-1] π_θ with grad; trusted, actions: [B, T-1] bool; denominator: [] or None.
    """
    old = traj.old_logp if traj.old_logp is not None else traj.train_logp  # π_old, token-aligned
    return policy_loss(
        logp,
        traj.targets(old),
        traj.targets(traj.advantages),
        trusted,
        kind=alg.policy_loss,
        eps_low=alg.eps_low,
        eps_high=alg.eps_high,
        agg_mode=alg.loss_agg_mode,
        denominator=actions.sum() if denominator is None else denominator,
    )


def record_step(
    s: Session,
    traj: Trajectories,
    *,
    step,
    reason,
    v_train,
    metrics,
    sparse,
    teacher=None,
    opd=None,
    distill=None,
) -> None:
    """Emit every table's rows of the step (built in one place), then mark the step's end."""
    tables = step_records(
        traj,
        step=step,
        reason=traj.token_aligned(reason, fill=REASON["not_action"]),
        v_train=v_train,
        metrics=metrics,
        const=s.run_constants,
        sparse=sparse,
        teacher=teacher,
        opd=opd,
        opd_weight=s.cfg.algorithm.opd_weight,
        distill=distill,
    )
    for table, columns in tables.items():
        s.telemetry.emit(table, columns)
    s.telemetry.step_end(step)


def trust(traj: Trajectories, actions: torch.Tensor, alg) -> tuple[torch.Tensor, torch.Tensor]:
    """(trusted [B, T-1] bool, reason [B, T-1] int8 codes): the trust rule over the loss tokens;
    generated tokens of dropped samples carry their sample's drop reason."""
    in_loss = traj.targets(traj.loss_mask) & actions
    _, tm = trust_mask(
        traj.targets(traj.train_logp),
        traj.targets(traj.rollout_logp),
        actions,
        rule=alg.trust_rule,
        beta=alg.icepop_beta,
        eps_low=alg.eps_low,
        eps_high=alg.eps_high,
    )
    reason = tm["reason"]
    stale = torch.tensor([st == "stale" for st in traj.status], dtype=torch.bool)[:, None]
    dropped = actions & ~in_loss
    reason = torch.where(dropped & stale, REASON["stale"], reason).to(torch.int8)
    reason = torch.where(dropped & ~stale, REASON["dropped"], reason).to(torch.int8)
    return reason == REASON["kept"], reason


def _opt_float(x) -> float | None:
    return None if x is None else float(x)


def _skip_reason(traj: Trajectories) -> str:
    """Why a step with no trusted token takes no optimizer step."""
    if all(st == "stale" for st in traj.status):
        return "stale"
    if not bool(traj.loss_mask.any()):
        return "no_loss_tokens"
    return "nothing_trusted"


def run_grpo(s: Session, *, steps: int, progress=None) -> dict:
    """Train ``steps`` GRPO steps; returns the summary (first/last eval, per-step metrics)."""
    return run_steps(s, train_step, steps=steps, progress=progress)

"""The step parts every loop shares: score, objective, update, and the steps row's metrics.

Score: the actor's log-probs (and π_old) on the trajectories' exact token ids.

The training forward is the scoring forward: one actor pass gives the log-probs with grad that the
loss differentiates, and their detached copy is ``Trajectories.train_logp`` (π_train at the start
of the step, what the trust mask compares with the rollout). ``algorithm.old_logp = "separate"``
runs π_old as its own no-grad forward first. The ``train.retokenize`` fault decodes the
post-prompt tokens to text and encodes them again — the TITO violation (BPE merges change the
ids); the trainer then scores other events than the rollout sampled.

``Models``: every model a run holds, and which of them train.

The actor always trains; a reference policy, teachers (scoring engines keyed by id) and a critic
are optional. Each trainable model carries its own optimizer and is its own owner in the memory
ledger (``TrainableModel.name``), so a critic's states and gradients never hide in the actor's.

The update: named loss terms summed, then one optimizer step per trainable model — or none.

Each term is a pure function's ``(loss, metrics)``; the total is their sum. A step in which no
token is trusted (e.g. every sample stale) takes **no** optimizer step: AdamW's moments would
otherwise still move the weights, and the policy version would be bumped for an update that
learned nothing. The step is then recorded as skipped with its reason.

A step's objective: per-token advantages and the named loss terms, as ``[algorithm]`` selects.

    advantage = "grpo"      Â = GRPO(R) broadcast to the generated tokens
                "opd"       Â = w · sg(log π_T − log π_θ) on teacher-scored tokens (group size 1 ok)
                "grpo+opd"  Â = GRPO(R) + w · sg(log π_T − log π_θ)        (slime's OPD term)
    opd_loss  = "sampled"   the OPD part rides in Â through the policy loss
                "topk"      the OPD part is its own term w · TopkRevKL(π_θ ‖ π_T) over the
                            teacher's Top-k (or full) payload; Â keeps only the task part

Terms: ``policy`` (``core.loops.grpo.policy_term``, whenever Â has a part) and ``distill``
(``topk``); both over trusted tokens. The OPD log-ratio is computed whatever the loss, for
telemetry (``opd`` in the metrics).

The ``steps`` row's scalar metrics of one update, from the step's trajectories and masks.

Denominators: token fractions are over the batch's action tokens (dropped samples' included), so
``masked_fraction`` counts every reason a token left the loss; ``stale_fraction`` is over
samples, as the schema defines it. The loss columns: ``loss`` is the sum of the update's terms,
``policy_loss`` its policy-gradient term, ``distill_loss`` its Top-k reverse-KL term. Teacher
columns (``teacher_metrics``) are over the teacher-scored tokens of the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from core.algorithms.distill import combine_advantages, opd_token_advantages, topk_reverse_kl
from core.algorithms.policy import REASON, REASONS, grpo_token_advantages, token_logprobs
from core.rollout.trajectories import Trajectories
from core.telemetry.sparse import routing_replay
from core.tokenizer.tokenizer import Tokenizer


@dataclass
class ActorForward:
    """One training forward, in prediction space (slot t predicts token t + 1)."""

    logits: torch.Tensor
    """[B, T-1, V] fp32."""
    logp: torch.Tensor
    """[B, T-1] fp32 with grad: log π_θ of each target token."""


def trainer_inputs(traj: Trajectories, *, tok: Tokenizer, retokenize: bool) -> None:
    """Fill ``traj.train_ids``/``train_valid``: the rollout's ids, or their re-tokenization under
    the fault (each sample's post-prompt tokens decoded, encoded again, re-laid into its slots)."""
    if not retokenize:
        traj.train_ids, traj.train_valid = traj.ids, traj.valid
        return
    ids, valid = traj.ids.clone(), traj.valid.clone()
    tp = traj.n_prompt
    for i in range(traj.size):
        row = traj.ids[i, tp:][traj.valid[i, tp:]].tolist()
        eos = row[-1:] == [tok.eos_id]
        text = tok.decode(row[:-1] if eos else row)
        new = (tok.encode(text) + ([tok.eos_id] if eos else []))[: ids.shape[1] - tp]
        ids[i, tp:], valid[i, tp:] = tok.pad_id, False
        ids[i, tp : tp + len(new)] = torch.tensor(new, dtype=torch.int64)
        valid[i, tp : tp + len(new)] = True
    traj.train_ids, traj.train_valid = ids, valid


def actor_forward(
    actor, traj: Trajectories, *, temperature: float, replay: bool, shared_prefix: bool = False
):
    """The training forward over ``traj.train_ids`` (with grad). Fills ``train_logp``/``entropy``.
    ``shared_prefix``: rows sharing their prompt forward it once (``Actor.logits``'s ``n_prompt``)."""
    n_prompt = traj.n_prompt if shared_prefix else 0
    with routing_replay(actor, traj, enabled=replay):
        logits = actor.logits(traj.train_ids, traj.train_valid, n_prompt=n_prompt)[:, :-1]
    logp, entropy = token_logprobs(logits, traj.train_ids[:, 1:], temperature=temperature)
    traj.train_logp = traj.token_aligned(logp.detach())
    traj.entropy = traj.token_aligned(entropy.detach())
    return ActorForward(logits, logp)


def old_logp_pass(
    actor, traj: Trajectories, *, temperature: float, replay: bool, shared_prefix: bool = False
):
    """π_old [B, T] from its own no-grad forward before the update (``old_logp = "separate"``)."""
    n_prompt = traj.n_prompt if shared_prefix else 0
    with torch.no_grad(), routing_replay(actor, traj, enabled=replay):
        logits = actor.logits(traj.train_ids, traj.train_valid, n_prompt=n_prompt)[:, :-1]
        logp = token_logprobs(logits, traj.train_ids[:, 1:], temperature=temperature)[0]
    return traj.token_aligned(logp)


@dataclass
class TrainableModel:
    """A module with its own optimizer (and memory-ledger owner ``name``)."""

    name: str
    module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    grad_clip: float = 1.0
    """Global grad-norm clip (0 = off)."""

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]


@dataclass
class Models:
    """The actor plus, when configured, reference, teachers and critic."""

    actor: TrainableModel
    reference: torch.nn.Module | None = None
    teachers: dict[str, object] = field(default_factory=dict)
    """teacher id -> a scoring engine (``prefill`` log-probs of exact ids)."""
    critic: TrainableModel | None = None

    def trainable(self) -> list[TrainableModel]:
        """The models that take optimizer steps, actor first."""
        return [m for m in (self.actor, self.critic) if m is not None]


def adamw(module: torch.nn.Module, cfg) -> torch.optim.AdamW:
    """AdamW over ``module``'s trainable parameters from an ``OptimConfig``."""
    return torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
    )


@dataclass(frozen=True)
class UpdateResult:
    """What the optimizer step did."""

    loss: torch.Tensor
    """Scalar: the sum of the terms (detached)."""
    terms: dict[str, torch.Tensor]
    """term name -> its detached scalar loss."""
    grad_norm: torch.Tensor
    """Global grad norm before clipping (NaN when skipped)."""
    stepped: bool
    skip_reason: str | None = None
    update_norm: torch.Tensor | None = None
    """‖Δθ‖₂ over the trainable parameters: what the step moved them (None when skipped)."""
    param_norm: torch.Tensor | None = None
    """‖θ‖₂ of the trainable parameters after the step (None when skipped)."""


def total_loss(terms: dict[str, tuple[torch.Tensor, dict]]) -> torch.Tensor:
    """Σ of the named terms' losses (with grad)."""
    losses = [loss for loss, _ in terms.values()]
    return torch.stack(losses).sum() if len(losses) > 1 else losses[0]


def optimizer_step(
    model: TrainableModel,
    terms: dict[str, tuple[torch.Tensor, dict]],
    *,
    memory=None,
    skip_reason: str | None = None,
) -> UpdateResult:
    """Backward of the summed terms and one step of ``model``'s optimizer, unless ``skip_reason``.

    ``memory`` (a ``TrainingMemory`` or None) is told when gradients appear and the optimizer
    stepped. A skipped step runs no backward and leaves parameters and optimizer state untouched.
    """
    loss = total_loss(terms)
    detached = {name: t.detach() for name, (t, _) in terms.items()}
    model.optimizer.zero_grad(set_to_none=True)
    if skip_reason is not None:
        if memory is not None:
            memory.backward_done()  # the forward's saved activations are released unused
        nan = torch.tensor(float("nan"))
        return UpdateResult(loss.detach(), detached, nan, stepped=False, skip_reason=skip_reason)
    loss.backward()
    if memory is not None:
        memory.backward_done()
    clip = model.grad_clip if model.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]  # a transient copy: Δθ measured, not modelled
    model.optimizer.step()
    if memory is not None:
        memory.optimizer_stepped()
    with torch.no_grad():
        update_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p - b) for p, b in zip(params, before)])
        )
        param_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p) for p in params])
        )
    return UpdateResult(
        loss.detach(),
        detached,
        grad_norm.detach(),
        stepped=True,
        update_norm=update_norm,
        param_norm=param_norm,
    )


def step_advantages(traj: Trajectories, alg, teacher) -> tuple[torch.Tensor, dict]:
    """(advantages [B, T] fp32, metrics): ``reward_mean``/``reward_std``/``degenerate_fraction``
    (None without a group baseline), ``opd`` (the raw log-ratio [B, T] and its metrics, or None).

    Args:
        teacher: the step's ``TeacherBatch`` (None without teachers).
    """
    task, metrics = None, {}
    if alg.advantage in ("grpo", "grpo+opd"):
        task, m = grpo_token_advantages(
            traj.reward, traj.generated, group_size=alg.group_size, eps=alg.adv_eps
        )
        metrics.update(m)
    else:
        metrics["reward_mean"] = traj.reward.mean()
        metrics["reward_std"] = traj.reward.std(unbiased=False)
        metrics["degenerate_fraction"] = None
    opd = None
    if teacher is not None:
        scored = traj.token_aligned(teacher.scored, fill=False)  # [B, T]
        ratio, om = opd_token_advantages(traj.teacher_logp, traj.train_logp, scored)
        metrics["opd"] = (ratio, om)
        if alg.uses_teacher and alg.opd_loss == "sampled":
            opd = ratio
    else:
        metrics["opd"] = None
    if task is None and opd is None:  # opd with the Top-k loss: no advantage-weighted term
        return torch.zeros_like(traj.rollout_logp), metrics
    return combine_advantages(task, opd, opd_weight=alg.opd_weight), metrics


def policy_trains(alg) -> bool:
    """Whether the step has a policy-gradient term: always, but for OPD through the Top-k term
    alone (``advantage = "opd"``, ``opd_loss = "topk"``)."""
    return not (alg.advantage == "opd" and alg.opd_loss == "topk")


def distill_term(
    logits: torch.Tensor, teacher, trusted: torch.Tensor, *, alg, temperature: float
) -> tuple[torch.Tensor, dict]:
    """w · the Top-k reverse KL over the trusted teacher-scored positions (the teacher's Top-k,
    or its whole vocabulary with the ``full`` payload), normalised like the policy term.

    Args:
        logits: [B, T-1, V] student logits with grad; trusted: [B, T-1] bool.
    """
    loss, metrics = topk_reverse_kl(
        logits,
        teacher.topk_ids,
        teacher.topk_logp,
        trusted & teacher.scored,
        temperature=temperature,
        agg_mode=alg.loss_agg_mode,
        denominator=teacher.scored.sum(),
    )
    return alg.opd_weight * loss, metrics


def step_metrics(
    traj: Trajectories,
    *,
    actions: torch.Tensor,
    trusted: torch.Tensor,
    reason: torch.Tensor,
    update: UpdateResult,
) -> dict:
    """Scalars of one step.

    Args:
        actions: [B, T-1] bool, the trainer's action tokens (prediction space).
        trusted: [B, T-1] bool; reason: [B, T-1] int8 mask-reason codes.
    """
    n_act = int(actions.sum())
    train_lp, rollout_lp = traj.targets(traj.train_logp), traj.targets(traj.rollout_logp)
    delta = (train_lp - rollout_lp).abs()[actions]
    counts = torch.bincount(reason[actions].to(torch.int64), minlength=len(REASONS)).tolist()
    frac = {name: counts[code] / max(n_act, 1) for name, code in REASON.items()}
    retok = (traj.targets(traj.train_ids) != traj.targets(traj.ids))[actions]
    n_trusted = int(trusted.sum())
    entropy = traj.targets(traj.entropy)
    return {
        "loss": float(update.loss),
        "policy_loss": _term(update, "policy"),
        "distill_loss": _term(update, "distill"),
        "optimizer_stepped": update.stepped,
        "skip_reason": update.skip_reason,
        "entropy": float(entropy[actions].mean()) if n_act else float("nan"),
        "grad_norm": float(update.grad_norm) if update.stepped else None,
        "update_norm": float(update.update_norm) if update.stepped else None,
        "param_norm": float(update.param_norm) if update.stepped else None,
        "n_tokens": int(traj.train_valid.sum()),
        "n_loss_tokens": n_act,
        "n_trusted_tokens": n_trusted,
        "masked_fraction": 1.0 - n_trusted / max(n_act, 1),
        "icepop_masked_fraction": frac["icepop"],
        "dis_low_fraction": frac["dis_low"],
        "dis_high_fraction": frac["dis_high"],
        "stale_fraction": sum(st == "stale" for st in traj.status) / max(traj.size, 1),
        "mismatch_abs_mean": float(delta.mean()) if n_act else float("nan"),
        "mismatch_abs_p99": float(delta.quantile(0.99)) if n_act else float("nan"),
        "retokenized_fraction": float(retok.float().mean()) if n_act else 0.0,
    }


def _term(update: UpdateResult, name: str) -> float | None:
    return float(update.terms[name]) if name in update.terms else None


def teacher_metrics(traj: Trajectories, teacher, *, opd) -> dict:
    """The teacher columns of the ``steps`` row.

    Args:
        teacher: the step's ``TeacherBatch``; opd: (log-ratio [B, T], its metrics) of
            ``core.algorithms.distill.opd_token_advantages``.
    """
    scored = traj.token_aligned(teacher.scored, fill=False)  # [B, T]
    n = int(scored.sum())
    gap = (traj.train_logp - traj.teacher_logp)[scored]
    return {
        "teacher_payload": teacher.mode,
        "teacher_payload_bytes": teacher.nbytes,
        "teacher_kl": float(opd[1]["reverse_kl"]) if n else None,
        "teacher_mismatch_abs_mean": float(gap.abs().mean()) if n else None,
    }

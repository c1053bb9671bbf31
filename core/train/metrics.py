"""The ``steps`` row's scalar metrics of one update, from the step's trajectories and masks.

Denominators: token fractions are over the batch's action tokens (dropped samples' included), so
``masked_fraction`` counts every reason a token left the loss; ``stale_fraction`` is over
samples, as the schema defines it. The loss columns: ``loss`` is the sum of the update's terms,
``policy_loss`` its policy-gradient term, ``distill_loss`` its Top-k reverse-KL term. Teacher
columns (``teacher_metrics``) are over the teacher-scored tokens of the step.
"""

from __future__ import annotations

import torch

from core.algorithms.trust import REASON, REASONS
from core.rollout.trajectories import Trajectories
from core.train.update import UpdateResult


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
            ``core.algorithms.opd.opd_token_advantages``.
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

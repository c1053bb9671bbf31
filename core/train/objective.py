"""A step's objective: per-token advantages and the named loss terms, as ``[algorithm]`` selects.

    advantage = "grpo"      Â = GRPO(R) broadcast to the generated tokens
                "opd"       Â = w · sg(log π_T − log π_θ) on teacher-scored tokens (group size 1 ok)
                "grpo+opd"  Â = GRPO(R) + w · sg(log π_T − log π_θ)        (slime's OPD term)
    opd_loss  = "sampled"   the OPD part rides in Â through the policy loss
                "topk"      the OPD part is its own term w · TopkRevKL(π_θ ‖ π_T) over the
                            teacher's Top-k (or full) payload; Â keeps only the task part

Terms: ``policy`` (``core.train.grpo.policy_term``, whenever Â has a part) and ``distill``
(``topk``); both over trusted tokens. The OPD log-ratio is computed whatever the loss, for
telemetry (``opd`` in the metrics).
"""

from __future__ import annotations

import torch

from core.algorithms.advantage import grpo_token_advantages
from core.algorithms.opd import combine_advantages, opd_token_advantages
from core.algorithms.topk_kl import topk_reverse_kl
from core.rollout.trajectories import Trajectories


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

"""Distillation from teachers: the OPD advantage and the Top-k reverse KL term.

On-policy distillation (OPD): the teacher's log-ratio as a dense per-token advantage.

    Â^OPD_t = sg( log π_T(y_t | s_t) − log π_θ(y_t | s_t) )   on the student's generated tokens

(GLM-5's OPD, the seed's pseudocode). The student samples y; the teacher scores the student's own
prefixes s_t. With this advantage the policy gradient −Â_t ∇log π_θ(y_t) is the single-sample
estimate of the reverse-KL gradient, so the teacher returns only the sampled token's log-prob,
and no group baseline is needed (group size 1 is allowed). OPD is orthogonal to the task
advantage (slime's OPD term): ``combine_advantages`` gives Â = Â^task + w · Â^OPD.
Both log-probs are processed ones (same temperature). Tokens outside ``tokens`` get 0.

Top-k reverse KL to a teacher (MOPD's Top-k form), with the truncation correction.

Design. The teacher sends, per position, its K most likely token ids and their log-probs under
its *full* distribution (not renormalized over K). The student's log-probs come from its full
softmax (at the sampling temperature) gathered at those ids. Per position

    ℓ_t = Σ_{v∈K_t} [ π_θ(v) log(π_θ(v) / π_T(v)) − π_θ(v) + π_T(v) ],

the generalized KL of the two unnormalized restrictions to K: every term p log(p/q) − p + q is
≥ 0 and is 0 only at p = q, and ∂ℓ/∂π_θ(v) = log(π_θ(v)/π_T(v)), so the optimum on K is π_θ = π_T
(the plain truncated sum Σ_K π_θ log(π_θ/π_T) would instead push mass outside K). When K is the
whole vocabulary Σ(π_T − π_θ) = 0 and ℓ_t is the full reverse KL. Positions are aggregated with
``core.algorithms.policy`` (the denominator is explicit). All math in fp32 (fp64 if given);
masked positions may hold any values (they are zeroed before any product).
"""

from __future__ import annotations

import torch

from core.algorithms.policy import aggregate


def opd_token_advantages(
    teacher_logp: torch.Tensor, student_logp: torch.Tensor, tokens: torch.Tensor
) -> tuple[torch.Tensor, dict]:
    """Per-token OPD advantages.

    Args:
        teacher_logp: [B, T] fp32, log π_T of each token given its prefix (any value off ``tokens``).
        student_logp: [B, T] fp32, log π_θ of the same tokens (detached here).
        tokens: [B, T] bool, the tokens that carry an advantage (generated, teacher-scored).
    Returns:
        (advantages [B, T] fp32: teacher − student on ``tokens``, 0 elsewhere; metrics:
        ``reverse_kl`` — the sampled reverse-KL estimate mean_t(log π_θ − log π_T) —,
        ``adv_mean``, ``adv_std`` (population) and ``n_tokens``, scalar tensors over ``tokens``).
    """
    gap = teacher_logp.detach() - student_logp.detach()
    adv = torch.where(tokens, gap, torch.zeros((), dtype=gap.dtype))  # not gap·m: 0·inf = NaN
    n = tokens.sum()
    mean = adv.sum() / n.clamp_min(1)
    var = torch.where(tokens, (adv - mean) ** 2, torch.zeros((), dtype=gap.dtype)).sum()
    metrics = {
        "reverse_kl": -mean,
        "adv_mean": mean,
        "adv_std": (var / n.clamp_min(1)).sqrt(),
        "n_tokens": n,
    }
    return adv, metrics


def combine_advantages(
    task: torch.Tensor | None, opd: torch.Tensor | None, *, opd_weight: float
) -> torch.Tensor:
    """Â = Â^task + w · Â^OPD (either part may be None: absent).

    Args:
        task: [B, T] fp32 task advantages (GRPO broadcast to tokens) or None.
        opd: [B, T] fp32 OPD advantages or None.
    Returns:
        [B, T] fp32.
    """
    if task is None and opd is None:
        raise ValueError("combine_advantages needs a task or an OPD advantage")
    if opd is None:
        return task
    weighted = opd_weight * opd
    return weighted if task is None else task + weighted


def topk_reverse_kl(
    logits: torch.Tensor,
    teacher_ids: torch.Tensor,
    teacher_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    agg_mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict]:
    """The Top-k reverse-KL loss of the student towards the teacher.

    Args:
        logits: [B, T, V] student logits (with grad), position t predicting token t + 1.
        teacher_ids: [B, T, K] int64, the teacher's Top-k token ids per position.
        teacher_logp: [B, T, K] fp32, the teacher's log-probs of those ids (full softmax).
        mask: [B, T] bool, positions in the loss.
    Returns:
        (loss scalar, metrics: ``per_position`` [B, T] detached ℓ_t, ``topk_kl`` (the loss,
        detached), ``teacher_mass`` and ``student_mass``: mean Σ_K π over ``mask``).
    """
    if teacher_ids.shape != teacher_logp.shape or teacher_ids.shape[:2] != mask.shape:
        raise ValueError(
            f"teacher_ids {tuple(teacher_ids.shape)}, teacher_logp {tuple(teacher_logp.shape)} "
            f"and mask {tuple(mask.shape)} must agree on [B, T(, K)]"
        )
    logp_all = (logits / temperature).log_softmax(dim=-1)  # [B, T, V]
    logp_s = logp_all.gather(-1, teacher_ids)  # [B, T, K]
    keep = mask[..., None]
    zero = torch.zeros((), dtype=logp_s.dtype)
    logp_s = torch.where(keep, logp_s, zero)
    logp_t = torch.where(keep, teacher_logp.to(logp_s.dtype), zero)
    p_s, p_t = logp_s.exp(), logp_t.exp()
    per_position = (p_s * (logp_s - logp_t) - p_s + p_t).sum(-1)  # [B, T]
    loss = aggregate(per_position, mask, mode=agg_mode, denominator=denominator)
    m = mask.to(p_s.dtype)
    n = m.sum().clamp_min(1.0)
    metrics = {  # ≥ 0 exactly; where π_θ = π_T on K fp32 rounding can give −1e-8: recorded as 0
        "per_position": per_position.detach().clamp_min(0.0),
        "topk_kl": loss.detach().clamp_min(0.0),
        "teacher_mass": (p_t.sum(-1) * m).sum() / n,
        "student_mass": (p_s.detach().sum(-1) * m).sum() / n,
    }
    return loss, metrics

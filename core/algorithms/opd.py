"""On-policy distillation (OPD): the teacher's log-ratio as a dense per-token advantage.

    Â^OPD_t = sg( log π_T(y_t | s_t) − log π_θ(y_t | s_t) )   on the student's generated tokens

(GLM-5's OPD, the seed's pseudocode). The student samples y; the teacher scores the student's own
prefixes s_t. With this advantage the policy gradient −Â_t ∇log π_θ(y_t) is the single-sample
estimate of the reverse-KL gradient, so the teacher returns only the sampled token's log-prob,
and no group baseline is needed (group size 1 is allowed). OPD is orthogonal to the task
advantage (slime's OPD term): ``combine_advantages`` gives Â = Â^task + w · Â^OPD.
Both log-probs are processed ones (same temperature). Tokens outside ``tokens`` get 0.
"""

from __future__ import annotations

import torch


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

"""CompactionRL's cross-segment credit: ``Â_{s,i} = (γλ)^{N_{>s}} · A^loc_{s,i}``.

A compacted trajectory is trained as independent segments (each row its own local GAE, all sharing
the final reward). Alone, that makes an early summary look as close to the final outcome as the
last answer. ``N_{>s}`` counts the trainable tokens of the *later* segments of the same trajectory;
discounting a segment's local advantages by ``(γλ)^{N_{>s}}`` restores the approximate distance
from its tokens to the end, while the segments stay separate rows (parallel training).
Simplification: the factor is computed in float64 and returned as float32; rows of uncompacted
trajectories (their own single segment) get factor 1.
"""

from __future__ import annotations

import torch


def later_trainable_tokens(
    trajectory: torch.Tensor, segment: torch.Tensor, n_trainable: torch.Tensor
) -> torch.Tensor:
    """N_{>s}: trainable tokens in the later segments of each row's trajectory.

    Args:
        trajectory: [B] int64, the trajectory each row (segment) belongs to.
        segment: [B] int64, the row's segment index within its trajectory.
        n_trainable: [B] int64, trainable tokens of each row.
    Returns:
        [B] int64.
    """
    same = trajectory[:, None] == trajectory[None, :]  # [B, B]
    later = segment[None, :] > segment[:, None]  # [B, B]: column j is later than row i
    return ((same & later).to(torch.int64) * n_trainable[None, :].to(torch.int64)).sum(1)


def cross_segment_discount(
    trajectory: torch.Tensor,
    segment: torch.Tensor,
    n_trainable: torch.Tensor,
    *,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, dict]:
    """The per-row factor ``(γλ)^{N_{>s}}``.

    Args:
        trajectory, segment, n_trainable: [B] int64 (see :func:`later_trainable_tokens`).
        gamma, lam: γ and λ in [0, 1] (the GAE's).
    Returns:
        (factor [B] fp32, metrics: ``n_later`` [B] int64, ``factor_min`` scalar).
    """
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma={gamma} and lam={lam} must be in [0, 1]")
    n_later = later_trainable_tokens(trajectory, segment, n_trainable)
    base = torch.tensor(gamma * lam, dtype=torch.float64)
    factor = base.pow(n_later.to(torch.float64)).to(torch.float32)  # [B]
    return factor, {"n_later": n_later, "factor_min": factor.min() if factor.numel() else factor}


def trajectory_key(sample_id: torch.Tensor, parent_id: torch.Tensor) -> torch.Tensor:
    """[B] int64: the id of the trajectory a row belongs to (its first segment's sample id)."""
    return torch.where(parent_id >= 0, parent_id, sample_id)

"""Token aggregation: the one place where a loss's denominator is chosen.

Modes (as in verl's ``agg_loss``):
- ``token-mean``: Σ_{b,t} m·x / Σ_{b,t} m — every trusted token weighs the same;
- ``seq-mean-token-mean``: mean over sequences with ≥ 1 masked token of (Σ_t m·x / Σ_t m);
- ``seq-mean-token-sum``: mean over sequences of Σ_t m·x;
- ``global-token``: Σ m·x / ``denominator`` (a fixed token count given by the caller, e.g. the
  batch's action tokens before trust masking: masked tokens then shrink the gradient instead of
  re-weighting the survivors — the CompactionRL lesson that the denominator is the algorithm).
"""

from __future__ import annotations

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "global-token")


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Reduce per-token values to a scalar.

    Args:
        values: [B, T] fp32.
        mask: [B, T] bool.
    Returns:
        scalar tensor (0 when nothing is masked in).
    """
    if mode not in AGG_MODES:
        raise ValueError(f"algorithm.loss_agg_mode={mode!r} not in {AGG_MODES}")
    m = mask.to(values.dtype)
    x = torch.where(mask, values, torch.zeros_like(values))  # not values·m: 0·inf = NaN
    if mode == "token-mean":
        return x.sum() / m.sum().clamp_min(1.0)
    if mode == "global-token":
        if denominator is None:
            raise ValueError("loss_agg_mode='global-token' needs an explicit denominator")
        return x.sum() / torch.as_tensor(denominator, dtype=values.dtype).clamp_min(1.0)
    per_seq = m.sum(dim=1)
    has = per_seq > 0
    if mode == "seq-mean-token-mean":
        seq = x.sum(dim=1) / per_seq.clamp_min(1.0)
    else:
        seq = x.sum(dim=1)
    return (seq * has).sum() / has.sum().clamp_min(1)

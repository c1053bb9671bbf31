"""The critic's loss and its calibration metric.

    L_V = agg_t[ ½ (V_t − G_t)² ]  over the trainable tokens (G: GAE returns, detached)

with the same explicit-denominator aggregation as the policy loss (``core.algorithms.aggregation``).
Explained variance ``1 − Var(G − V) / Var(G)`` measures how much of the returns' spread the critic
predicts (1: perfect, 0: no better than a constant, < 0: worse). Simplification: no value
clipping (the critic takes K small steps per policy step instead).
"""

from __future__ import annotations

import torch

from core.algorithms.aggregation import aggregate


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    *,
    agg_mode: str = "token-mean",
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict]:
    """Squared-error value loss.

    Args:
        values: [B, T] fp32 critic values (with grad).
        returns: [B, T] fp32 targets (detached).
        mask: [B, T] bool, the tokens the critic is trained on.
    Returns:
        (loss scalar, metrics: ``explained_variance``, ``value_mean``, ``return_mean`` scalars).
    """
    err = 0.5 * (values - returns.detach()).pow(2)  # [B, T]
    loss = aggregate(err, mask, mode=agg_mode, denominator=denominator)
    n = mask.sum().clamp_min(1)
    v = values.detach()
    metrics = {
        "explained_variance": explained_variance(v, returns, mask),
        "value_mean": torch.where(mask, v, 0.0).sum() / n,
        "return_mean": torch.where(mask, returns, 0.0).sum() / n,
    }
    return loss, metrics


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor):
    """``1 − Var(G − V) / Var(G)`` over ``mask`` (population variances; NaN when Var(G) = 0).

    Args:
        values, returns: [B, T] fp32; mask: [B, T] bool.
    Returns:
        scalar fp32 tensor.
    """
    g = returns[mask].double()
    d = g - values[mask].double()
    var_g = g.var(unbiased=False) if g.numel() else torch.tensor(float("nan"), dtype=g.dtype)
    var_d = d.var(unbiased=False) if d.numel() else torch.tensor(float("nan"), dtype=g.dtype)
    out = torch.where(var_g > 0, 1.0 - var_d / var_g, torch.tensor(float("nan"), dtype=g.dtype))
    return out.float()

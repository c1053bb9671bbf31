"""Rotary position embedding (RoPE), the one implementation both engines use.

Rotate-half convention (GPT-NeoX/Llama): pairs (x[i], x[i + D/2]). Positions are per-token
integers, so left-padded batches get positions counted from each sample's first real token.
Angles are computed in fp32 whatever the activation dtype.
"""

from __future__ import annotations

import torch


def rope_angles(
    positions: torch.Tensor, head_dim: int, base: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables.

    Args:
        positions: [B, T] int64 positions.
    Returns:
        (cos, sin), each [B, T, 1, D] fp32.
    """
    inv_freq = 1.0 / (
        base
        ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    )
    freqs = positions.to(torch.float32)[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, :, None, :]  # [B, T, 1, D]
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [B, T, H, D] by the angles (cos/sin [B, T, 1, D]); returns x's dtype."""
    half = x.shape[-1] // 2
    xf = x.to(torch.float32)
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def positions_from_padding(valid: torch.Tensor) -> torch.Tensor:
    """Positions counted from each sample's first real token.

    Args:
        valid: [B, T] bool, False on (left) padding.
    Returns:
        [B, T] int64, 0 on padding.
    """
    return (valid.long().cumsum(dim=1) - 1).clamp_min(0)

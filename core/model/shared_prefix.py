"""Shared-prefix packing: a batch whose rows repeat the same prompt (a GRPO group's G samples)
forwarded with each distinct prompt once.

A batch ``[B, T]`` laid out as ``[left pad | prompt (n_prompt slots) | tail | right pad]`` becomes
one packed sequence ``[1, S]``: the U distinct prompt rows (n_prompt slots each), then every
row's tail (T − n_prompt slots each), S = U·n_prompt + B·(T − n_prompt). Token-wise layers
(norms, projections, FFN) see each prompt token once instead of G times; attention is computed
block by block (``core.model.attention.packed_attention``): each distinct prompt causally over itself, each row's tail
over its prompt's keys and its own. Every token attends exactly the keys it attends in its own
row, at its own row's RoPE position, so the math of every row is unchanged (only float rounding
differs); the G rows' gradients meet in the shared prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.model.rope import positions_from_padding


@dataclass(frozen=True)
class PackedBatch:
    ids: torch.Tensor
    """[1, S] int64 packed token ids: U prompts, then B tails."""
    gather: torch.Tensor
    """[B, T] int64: the packed index of each row's slot; ``packed_out[0][gather]`` is the row
    layout ``[B, T, ...]``."""
    inverse: torch.Tensor
    """[B] int64: each row's distinct prompt."""
    prompt_valid: torch.Tensor
    """[U, n_prompt] bool."""
    row_valid: torch.Tensor
    """[B, T] bool: every row's validity (its prompt's, then its tail's)."""
    positions: torch.Tensor
    """[1, S] int64 RoPE positions: each token's position in its own row."""

    @property
    def n_prompt(self) -> int:
        return self.prompt_valid.shape[1]


def distinct_rows(ids: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct rows of ``ids`` [B, T] with ``valid`` [B, T]: ``(rows, inverse)`` with rows
    [U, 2T] int64 (ids, then valid as 0/1) and inverse [B] (row b is ``rows[inverse[b]]``)."""
    return torch.unique(torch.cat([ids, valid.long()], dim=1), dim=0, return_inverse=True)


def pack_shared_prefix(ids: torch.Tensor, valid: torch.Tensor, n_prompt: int) -> PackedBatch | None:
    """Pack ``ids`` [B, T] (``valid`` [B, T] bool) sharing equal prompt rows; None when no two
    rows share a prompt or no row has a tail (run the batch as it is)."""
    b, t = ids.shape
    if not 0 < n_prompt <= t:
        raise ValueError(f"n_prompt={n_prompt} must be in [1, T={t}]")
    if n_prompt == t:
        return None
    rows, inverse = distinct_rows(ids[:, :n_prompt], valid[:, :n_prompt])
    u, tail = rows.shape[0], t - n_prompt
    if u == b:
        return None
    gather = torch.empty((b, t), dtype=torch.int64)
    gather[:, :n_prompt] = inverse[:, None] * n_prompt + torch.arange(n_prompt)
    gather[:, n_prompt:] = u * n_prompt + torch.arange(b)[:, None] * tail + torch.arange(tail)
    packed = torch.cat([rows[:, :n_prompt].flatten(), ids[:, n_prompt:].flatten()])
    prompt_valid = rows[:, n_prompt:].bool()
    row_valid = torch.cat([prompt_valid[inverse], valid[:, n_prompt:]], dim=1)
    positions = torch.cat(
        [
            positions_from_padding(prompt_valid).flatten(),
            positions_from_padding(row_valid)[:, n_prompt:].flatten(),
        ]
    )
    return PackedBatch(packed[None], gather, inverse, prompt_valid, row_valid, positions[None])

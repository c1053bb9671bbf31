"""Shared-prefix packing: a batch whose rows repeat the same prompt (a GRPO group's G samples)
forwarded with each distinct prompt once.

A batch ``[B, T]`` laid out as ``[left pad | prompt (n_prompt slots) | tail | right pad]`` becomes
one packed sequence ``[1, S]``: the U distinct prompt rows (n_prompt slots each), then every
row's tail (T − n_prompt slots each), S = U·n_prompt + B·(T − n_prompt). Token-wise layers
(norms, projections, FFN) see each prompt token once instead of G times; attention is computed
block by block (``packed_attention``): each distinct prompt causally over itself, each row's tail
over its prompt's keys and its own. Every token attends exactly the keys it attends in its own
row, at its own row's RoPE position, so the math of every row is unchanged (only float rounding
differs); the G rows' gradients meet in the shared prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

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

    @property
    def n_prompt(self) -> int:
        return self.prompt_valid.shape[1]

    def positions(self) -> torch.Tensor:
        """[1, S] RoPE positions: each token's position in its own row."""
        rows = positions_from_padding(self.row_valid)  # [B, T]
        prompts = positions_from_padding(self.prompt_valid)  # [U, n_prompt]
        return torch.cat([prompts.flatten(), rows[:, self.n_prompt :].flatten()])[None]


def pack_shared_prefix(ids: torch.Tensor, valid: torch.Tensor, n_prompt: int) -> PackedBatch | None:
    """Pack ``ids`` [B, T] (``valid`` [B, T] bool) sharing equal prompt rows; None when no two
    rows share a prompt or no row has a tail (run the batch as it is)."""
    b, t = ids.shape
    if not 0 < n_prompt <= t:
        raise ValueError(f"n_prompt={n_prompt} must be in [1, T={t}]")
    if n_prompt == t:
        return None
    prompt = torch.cat([ids[:, :n_prompt], valid[:, :n_prompt].long()], dim=1)
    rows, inverse = torch.unique(prompt, dim=0, return_inverse=True)
    u, tail = rows.shape[0], t - n_prompt
    if u == b:
        return None
    gather = torch.empty((b, t), dtype=torch.int64)
    gather[:, :n_prompt] = inverse[:, None] * n_prompt + torch.arange(n_prompt)
    gather[:, n_prompt:] = u * n_prompt + torch.arange(b)[:, None] * tail + torch.arange(tail)
    packed = torch.cat([rows[:, :n_prompt].flatten(), ids[:, n_prompt:].flatten()])
    prompt_valid = rows[:, n_prompt:].bool()
    row_valid = torch.cat([prompt_valid[inverse], valid[:, n_prompt:]], dim=1)
    return PackedBatch(packed[None], gather, inverse, prompt_valid, row_valid)


def packed_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pack: PackedBatch, allowed_mask
) -> torch.Tensor:
    """Block attention over a pack: q [1, S, Hq, D], k/v [1, S, Hkv, D] (post-RoPE) -> [1, S, Hq, D].

    ``allowed_mask(key_valid [N, Tk]) -> [N, 1, Tk, Tk]`` is the row attention mask (causal and
    key-valid); the tails use its last rows (their queries are the last slots of their rows).
    """
    u, tp = pack.prompt_valid.shape
    b = pack.inverse.shape[0]
    split = u * tp

    def blocks(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[0].reshape(n, -1, *x.shape[2:])

    qp, kp, vp = (blocks(x[:, :split], u) for x in (q, k, v))  # [U, tp, H, D]
    qt, kt, vt = (blocks(x[:, split:], b) for x in (q, k, v))  # [B, tail, H, D]
    out_p = sdpa(qp, kp, vp, allowed_mask(pack.prompt_valid))
    k_rows = torch.cat([kp[pack.inverse], kt], dim=1)  # [B, T, Hkv, D]: the row's keys
    v_rows = torch.cat([vp[pack.inverse], vt], dim=1)
    out_t = sdpa(qt, k_rows, v_rows, allowed_mask(pack.row_valid)[:, :, tp:])
    return torch.cat([out_p.flatten(0, 1), out_t.flatten(0, 1)])[None]


def sdpa(q, k, v, allowed: torch.Tensor) -> torch.Tensor:
    """q [N, Tq, Hq, D], k/v [N, Tk, Hkv, D] (GQA: each k/v head serves Hq / Hkv query heads),
    ``allowed`` [N, 1, Tq, Tk] bool -> [N, Tq, Hq, D]."""
    rep = q.shape[2] // k.shape[2]
    kr = k.repeat_interleave(rep, dim=2)
    vr = v.repeat_interleave(rep, dim=2)
    return F.scaled_dot_product_attention(
        q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2), attn_mask=allowed
    ).transpose(1, 2)

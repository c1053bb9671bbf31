"""Core attention of the megatron actor: RoPE + causal attention over the full sequence.

Supplied to megatron-core through ``ModuleSpec`` (``self_attention.submodules.core_attention``),
replacing ``DotProductAttention`` (which allocates CUDA buffers). megatron applies no position
embedding (``position_embedding_type="none"``): RoPE is applied here, from positions derived from
the key-padding mask that the actor passes as megatron's ``attention_mask`` ([B, 1, 1, T] bool,
True = masked, megatron's convention), or, while the actor forwards a shared-prefix pack
(``core.model.shared_prefix``, set as ``pack``), block by block at each token's row position. With ``dsa_topk > 0`` attention runs over the DSA Top-k keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from core.model.rope import apply_rope, positions_from_padding, rope_angles
from core.model.shared_prefix import PackedBatch


def causal_padding_mask(key_valid: torch.Tensor) -> torch.Tensor:
    """Boolean "may attend" mask for left/right padded batches.

    Args:
        key_valid: [B, T] bool.
    Returns:
        [B, 1, T, T] bool: causal and key-valid; every query may attend to itself (so padded
        query rows are never empty).
    """
    t = key_valid.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=key_valid.device).tril()
    allowed = causal[None] & key_valid[:, None, :]
    allowed = allowed | torch.eye(t, dtype=torch.bool, device=key_valid.device)[None]
    return allowed[:, None]


class ActorCoreAttention(nn.Module):
    """megatron-compatible core attention (signature of ``DotProductAttention.forward``)."""

    def __init__(
        self,
        config,
        layer_number: int,
        *,
        attn_mask_type=None,
        attention_type=None,
        cp_comm_type=None,
        softmax_scale=None,
        pg_collection=None,
        **_: object,
    ) -> None:
        super().__init__()
        self.config = config
        self.layer_number = layer_number  # megatron numbers layers from 1
        self.head_dim = config.kv_channels
        self.rope_base = getattr(config, "closedloop_rope_base", 10000.0)
        self.dsa = None  # set by the actor builder when DSA is enabled
        self.pack = None  # a PackedBatch while the actor forwards one (Actor.logits)
        self.last_selection = None

    def forward(
        self,
        query,
        key,
        value,
        attention_mask,
        *,
        attn_mask_type=None,
        attention_bias=None,
        packed_seq_params=None,
    ):
        """query [S, B, Hq, D], key/value [S, B, Hkv, D], attention_mask [B, 1, 1, S] bool
        (True = padding). Returns [S, B, Hq * D]."""
        q = query.permute(1, 0, 2, 3)  # [B, S, Hq, D]
        k = key.permute(1, 0, 2, 3)  # [B, S, Hkv, D]
        v = value.permute(1, 0, 2, 3)
        if self.pack is not None:  # a shared-prefix pack: block attention, row positions
            if self.dsa is not None:
                raise ValueError("DSA attention runs on row batches, not shared-prefix packs")
            cos, sin = rope_angles(self.pack.positions, self.head_dim, self.rope_base)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            out = packed_attention(q, k, v, self.pack)
        else:
            key_valid = ~attention_mask[:, 0, 0, :]  # [B, S]
            pos = positions_from_padding(key_valid)  # [B, S]
            cos, sin = rope_angles(pos, self.head_dim, self.rope_base)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if self.dsa is not None:
                out, self.last_selection = self.dsa(q, k, v, pos, key_valid)
            else:
                out = sdpa(q, k, v, causal_padding_mask(key_valid))
        b, s, h, d = out.shape
        return out.reshape(b, s, h * d).transpose(0, 1).contiguous()


def packed_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pack: PackedBatch
) -> torch.Tensor:
    """Block attention over a shared-prefix pack: q [1, S, Hq, D], k/v [1, S, Hkv, D] (post-RoPE)
    -> [1, S, Hq, D]. Each distinct prompt attends causally over itself; each row's tail over
    its prompt's keys and its own (the last rows of its row's causal mask)."""
    u, tp = pack.prompt_valid.shape
    b = pack.inverse.shape[0]
    split = u * tp

    def blocks(x: torch.Tensor, n: int) -> torch.Tensor:
        return x[0].reshape(n, -1, *x.shape[2:])

    qp, kp, vp = (blocks(x[:, :split], u) for x in (q, k, v))  # [U, tp, H, D]
    qt, kt, vt = (blocks(x[:, split:], b) for x in (q, k, v))  # [B, tail, H, D]
    out_p = sdpa(qp, kp, vp, causal_padding_mask(pack.prompt_valid))
    k_rows = torch.cat([kp[pack.inverse], kt], dim=1)  # [B, T, Hkv, D]: the row's keys
    v_rows = torch.cat([vp[pack.inverse], vt], dim=1)
    out_t = sdpa(qt, k_rows, v_rows, causal_padding_mask(pack.row_valid)[:, :, tp:])
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

"""DSA (DeepSeek Sparse Attention) core attention: indexer, Top-k selection, sparse attention.

Design
------
Core attention receives post-projection, post-RoPE ``q [B, Tq, Hq, D]``, ``k, v [B, Tk, Hkv, D]``
(GQA: ``Hq = Hkv * n_rep``) and the query positions ``q_pos [Tq]``; keys are positions 0..Tk-1.
The same ``dsa_attend`` serves the actor (full sequence, ``Tq = Tk``, ``q_pos = arange(T)``) and
the rollout engine (incremental decoding: ``Tq = 1`` or a chunk, keys from the KV cache).

- Indexer: ``score(t, s) = sum_h w_h * relu(qI_h(t) . kI(s))`` with ``qI_h = q_flat @ Wq_h``
  (``q_flat = q`` reshaped to ``[B, Tq, Hq*D]``), ``kI = k_flat @ Wk`` (``[B, Tk, dI]``).
  Simplification: GLM-5 / DeepSeek V3.2 feed the indexer from the hidden state and derive ``w_h``
  per token; core attention has no hidden state, so ours reads the post-RoPE q/k, and ``w_h`` is
  a per-head parameter. The indexer sees detached q/k and never gets gradients from the LM loss
  (Top-k is discrete); when ``trainable`` it learns from ``indexer_kl_loss`` (DeepSeek V3.2's KL
  to the main attention), when frozen (default, as GLM-5) its parameters have requires_grad=False.
- Indexer numerics: computed in float64 and rounded once to float32. Full-sequence and one-token
  GEMMs reduce in different orders; in float64 that changes a score by ~1e-16 relative, which
  survives the rounding to float32 only with probability ~2**-29 per score, so the actor and the
  rollout engine see bit-identical float32 scores in practice (a guarantee would need
  batch-invariant kernels, deliberately left out).
- Selection: ``select_topk`` (``core.model.dsa_select``): total order score desc, then position asc.
- Attention: softmax over the selected keys only, logits and softmax in float32, output in
  ``q.dtype``. With ``k >= Tk`` every causal key is selected and the result equals dense causal
  attention up to float32 reduction order (~1e-6 absolute at unit-scale inputs).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from core.model.dsa_select import TOPK_MODES, TopkSelection, causal_mask, select_topk


@dataclass(frozen=True)
class DSAConfig:
    """Configuration of DSA core attention (indexer + Top-k)."""

    topk: int = 2048
    """Keys attended per query, >= 1 (GLM-5: 2048). With ``topk >= T`` attention is dense."""
    n_index_heads: int = 4
    """Indexer heads, >= 1 (lightweight; DeepSeek V3.2 uses 64)."""
    index_dim: int = 32
    """Indexer head dimension dI, >= 1 (DeepSeek V3.2: 128)."""
    trainable: bool = False
    """False (default, as GLM-5): the indexer is frozen; True: it learns from indexer_kl_loss."""
    topk_mode: str = "deterministic"
    """``deterministic`` or ``nondeterministic`` (noise + random tie order, for fault scenarios)."""
    noise_scale: float = 1e-3
    """Std of the additive score noise in nondeterministic mode, in score units, finite >= 0."""

    def __post_init__(self) -> None:
        for name in ("topk", "n_index_heads", "index_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"DSAConfig.{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.trainable, bool):
            raise ValueError(f"DSAConfig.trainable must be a bool, got {self.trainable!r}")
        if self.topk_mode not in TOPK_MODES:
            raise ValueError(
                f"DSAConfig.topk_mode must be one of {TOPK_MODES}, got {self.topk_mode!r}"
            )
        ns = self.noise_scale
        if isinstance(ns, bool) or not isinstance(ns, int | float) or not 0.0 <= ns < math.inf:
            raise ValueError(f"DSAConfig.noise_scale must be a finite float >= 0, got {ns!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> DSAConfig:
        """Build from a mapping; unknown keys raise ValueError listing the allowed ones."""
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - allowed)
        if unknown:
            raise ValueError(f"unknown DSAConfig keys {unknown}; allowed: {sorted(allowed)}")
        return cls(**values)


class Indexer(nn.Module):
    """Lightweight DSA indexer over post-RoPE q/k (see the module docstring for the formula).

    Parameters (float32, drawn from ``generator`` on the CPU): ``wq [Hq*D, H*dI]`` and
    ``wk [Hkv*D, dI]`` ~ N(0, 1/fan_in), ``head_weights [H]`` = 1 / (H * sqrt(dI)), so scores are
    O(1) for unit-scale q/k.
    """

    def __init__(
        self,
        cfg: DSAConfig,
        *,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.n_index_heads, self.index_dim = cfg.n_index_heads, cfg.index_dim
        q_in, k_in = n_heads * head_dim, n_kv_heads * head_dim
        wq = torch.randn(q_in, cfg.n_index_heads * cfg.index_dim, generator=generator)
        wk = torch.randn(k_in, cfg.index_dim, generator=generator)
        w = torch.full((cfg.n_index_heads,), 1.0 / (cfg.n_index_heads * math.sqrt(cfg.index_dim)))
        self.wq = nn.Parameter(wq / math.sqrt(q_in), requires_grad=cfg.trainable)
        self.wk = nn.Parameter(wk / math.sqrt(k_in), requires_grad=cfg.trainable)
        self.head_weights = nn.Parameter(w, requires_grad=cfg.trainable)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Indexer scores.

        Args:
            q: [B, Tq, Hq, D] post-RoPE queries.
            k: [B, Tk, Hkv, D] post-RoPE keys.

        Returns:
            [B, Tq, Tk] float32 (computed in float64, rounded once), no causal mask applied.
        """
        b, tq, hq, d = q.shape
        tk, hkv = k.shape[1], k.shape[2]
        if self.wq.shape[0] != hq * d or self.wk.shape[0] != hkv * d:
            raise ValueError(
                f"indexer built for q/k widths {self.wq.shape[0]}/{self.wk.shape[0]}, "
                f"got {hq * d}/{hkv * d}"
            )
        f64 = torch.float64
        q_i = q.reshape(b, tq, hq * d).to(f64) @ self.wq.to(f64)  # [B, Tq, H*dI]
        q_i = q_i.view(b, tq * self.n_index_heads, self.index_dim)  # [B, Tq*H, dI]
        k_i = k.reshape(b, tk, hkv * d).to(f64) @ self.wk.to(f64)  # [B, Tk, dI]
        dots = (q_i @ k_i.transpose(1, 2)).view(b, tq, self.n_index_heads, tk)  # [B, Tq, H, Tk]
        w = self.head_weights.to(f64)[:, None]  # [H, 1]
        return (dots.relu() * w).sum(dim=2).to(torch.float32)  # [B, Tq, Tk]


def _gqa_split(q: torch.Tensor, hkv: int) -> torch.Tensor:
    """[B, Tq, Hq, D] -> [B, Tq, Hkv, n_rep, D] (query head h uses kv head h // n_rep)."""
    b, tq, hq, d = q.shape
    if hq % hkv:
        raise ValueError(f"query heads {hq} must be a multiple of kv heads {hkv}")
    return q.reshape(b, tq, hkv, hq // hkv, d)


def sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sel: TopkSelection,
    *,
    scale: float,
    q_chunk: int | None = None,
) -> torch.Tensor:
    """Attention of each query over its selected keys only (GQA aware).

    Args:
        q: [B, Tq, Hq, D] queries.
        k: [B, Tk, Hkv, D] keys; v: [B, Tk, Hkv, D] values.
        sel: selection with indices/valid [B, Tq, K]; every row needs >= 1 valid slot.
        scale: logit scale (usually 1/sqrt(D)).
        q_chunk: process this many queries at a time to bound the gathered K/V memory
            (``B * q_chunk * K * Hkv * D`` per tensor); None = all at once.

    Returns:
        [B, Tq, Hq, D] in ``q.dtype``.
    """
    tq = q.shape[1]
    if q_chunk is not None and q_chunk < tq:
        parts = [
            sparse_attention(
                q[:, i : i + q_chunk],
                k,
                v,
                TopkSelection(*(t[:, i : i + q_chunk] for t in sel)),
                scale=scale,
            )
            for i in range(0, tq, q_chunk)
        ]
        return torch.cat(parts, dim=1)
    b, hkv = q.shape[0], k.shape[2]
    qg = _gqa_split(q, hkv).float()  # [B, Tq, Hkv, R, D]
    idx = sel.indices.clamp(min=0)  # [B, Tq, K]
    rows = torch.arange(b, device=q.device)[:, None, None]  # [B, 1, 1]
    k_sel = k[rows, idx].float()  # [B, Tq, K, Hkv, D]
    v_sel = v[rows, idx].float()  # [B, Tq, K, Hkv, D]
    logits = torch.einsum("btgrd,btkgd->btgrk", qg, k_sel) * scale  # [B, Tq, Hkv, R, K]
    logits = logits.masked_fill(~sel.valid[:, :, None, None, :], float("-inf"))
    probs = logits.softmax(dim=-1)  # [B, Tq, Hkv, R, K]
    out = torch.einsum("btgrk,btkgd->btgrd", probs, v_sel)  # [B, Tq, Hkv, R, D]
    return out.reshape(q.shape).to(q.dtype)


def dsa_attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    *,
    indexer: Indexer,
    cfg: DSAConfig,
    generator: torch.Generator | None = None,
    scale: float | None = None,
    q_chunk: int | None = None,
) -> tuple[torch.Tensor, TopkSelection]:
    """DSA core attention: indexer scores -> Top-k selection -> sparse attention.

    Args:
        q: [B, Tq, Hq, D] post-RoPE queries at positions ``q_pos``.
        k: [B, Tk, Hkv, D] post-RoPE keys at positions 0..Tk-1 (full sequence or KV cache).
        v: [B, Tk, Hkv, D] values.
        q_pos: [Tq] int absolute query positions (each < Tk for decoding from a cache).
        indexer: the layer's Indexer; cfg: its DSAConfig (topk, topk_mode, noise_scale).
        generator: RNG on q.device for the nondeterministic mode (None: global RNG).
        scale: logit scale, default 1/sqrt(D).
        q_chunk: see ``sparse_attention``.

    Returns:
        (out [B, Tq, Hq, D] in q.dtype, TopkSelection [B, Tq, topk]).
    """
    with torch.no_grad():  # selection is discrete: no gradient path through the indexer
        scores = indexer.scores(q.detach(), k.detach())  # [B, Tq, Tk]
    sel = select_topk(
        scores,
        q_pos,
        k=cfg.topk,
        mode=cfg.topk_mode,
        noise_scale=cfg.noise_scale,
        generator=generator,
    )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return sparse_attention(q, k, v, sel, scale=scale, q_chunk=q_chunk), sel


def indexer_kl_loss(
    index_scores: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    q_pos: torch.Tensor,
    *,
    scale: float,
    sel: TopkSelection | None = None,
    query_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DeepSeek V3.2 indexer alignment loss: KL(main attention || softmax(index scores)).

    The target ``p[t, s]`` is the main model's causal attention summed over query heads and
    L1-normalized over keys (no gradient). With ``sel`` both distributions are restricted to the
    selected keys (sparse stage), otherwise to all causal keys (dense warm-up).

    Args:
        index_scores: [B, Tq, Tk] ``indexer.scores(q.detach(), k.detach())`` (carries the grad).
        q: [B, Tq, Hq, D]; k: [B, Tk, Hkv, D] post-RoPE main-attention inputs.
        q_pos: [Tq] int query positions.
        scale: main-attention logit scale.
        sel: optional selection [B, Tq, K] restricting the support.
        query_mask: optional [B, Tq] bool, the queries that count.

    Returns:
        (loss, metrics): loss = sum of per-query KL / number of counted queries (>= 1);
        metrics ``{"indexer_kl": detached loss}``.
    """
    b, tq, _ = index_scores.shape
    support = causal_mask(q_pos, index_scores.shape[-1]).expand(b, tq, -1)  # [B, Tq, Tk]
    if sel is not None:
        tk = index_scores.shape[-1]
        slots = torch.where(sel.valid, sel.indices, tk)  # padding -> spare column tk
        chosen = support.new_zeros((b, tq, tk + 1)).scatter_(-1, slots, True)[..., :tk]
        support = support & chosen
    with torch.no_grad():
        qg = _gqa_split(q, k.shape[2]).float()  # [B, Tq, Hkv, R, D]
        logits = torch.einsum("btgrd,bsgd->btgrs", qg, k.float()) * scale  # [B, Tq, Hkv, R, Tk]
        logits = logits.masked_fill(~support[:, :, None, None, :], float("-inf"))
        p = logits.softmax(dim=-1).sum(dim=(2, 3))  # [B, Tq, Tk]
        p = p / p.sum(dim=-1, keepdim=True)
    log_q = index_scores.float().masked_fill(~support, float("-inf")).log_softmax(dim=-1)
    kl_terms = torch.where(support & (p > 0), p * (p.clamp_min(1e-30).log() - log_q), 0.0)
    kl = kl_terms.sum(dim=-1)  # [B, Tq]
    counted = torch.ones_like(kl, dtype=torch.bool) if query_mask is None else query_mask
    loss = torch.where(counted, kl, 0.0).sum() / counted.sum().clamp_min(1)
    return loss, {"indexer_kl": loss.detach()}

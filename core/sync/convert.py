"""Actor (megatron) ↔ rollout-engine parameter layout conversion.

megatron packs attention projections as ``linear_qkv`` rows grouped per query group:
[ng, (np/ng + 2), hn, H] = (q heads of the group, k, v); its gated FFN ``linear_fc1`` is
cat(gate, up). The engine keeps separate ``wq/wk/wv`` and ``w_gate/w_up``; a q/k/v bias
(``linear_qkv.bias``, same grouping) becomes ``bq/bk/bv``, megatron's ``q_layernorm``/``k_layernorm``
become ``q_norm``/``k_norm``, and a tied output head is the embedding itself. Pure reshapes and
slices: the conversion is exact (bitwise) in fp32.
"""

from __future__ import annotations

import torch

from core.model.config import ModelConfig


def actor_to_rollout(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Map megatron ``GPTModel`` weights to the engine layout (new tensors, detached)."""
    embed = weights["embedding.word_embeddings.weight"]
    out: dict[str, torch.Tensor] = {
        "embed": embed,
        "final_norm": weights["decoder.final_layernorm.weight"],
        "lm_head": embed if cfg.tie_embeddings else weights["output_layer.weight"],
    }
    for l in range(cfg.num_layers):
        m, p = f"decoder.layers.{l}.", f"layers.{l}."
        a = m + "self_attention."
        q, k, v = split_qkv(weights[a + "linear_qkv.weight"], cfg)
        out[p + "wq"], out[p + "wk"], out[p + "wv"] = q, k, v
        if cfg.qkv_bias:
            out[p + "bq"], out[p + "bk"], out[p + "bv"] = split_qkv(
                weights[a + "linear_qkv.bias"], cfg
            )
        if cfg.qk_norm:
            out[p + "q_norm"] = weights[a + "q_layernorm.weight"]
            out[p + "k_norm"] = weights[a + "k_layernorm.weight"]
        out[p + "wo"] = weights[m + "self_attention.linear_proj.weight"]
        out[p + "attn_norm"] = weights[m + "input_layernorm.weight"]
        out[p + "ffn_norm"] = weights[m + "pre_mlp_layernorm.weight"]
        if l in cfg.moe_layers:
            gate, up = weights[m + "mlp.w_gate_up"].chunk(2, dim=1)
            out[p + "router"] = weights[m + "mlp.router"]
            out[p + "experts.w_gate"], out[p + "experts.w_up"] = gate, up
            out[p + "experts.w_down"] = weights[m + "mlp.w_down"]
        else:
            gate, up = weights[m + "mlp.linear_fc1.weight"].chunk(2, dim=0)
            out[p + "w_gate"], out[p + "w_up"] = gate, up
            out[p + "w_down"] = weights[m + "mlp.linear_fc2.weight"]
    for k, v in weights.items():  # DSA indexer and other extras travel under their own names
        if ".dsa." in k:
            out["dsa." + k] = v
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def rollout_to_actor(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Inverse of ``actor_to_rollout``: engine-layout float weights -> megatron names (new
    tensors). ``rollout_to_actor(actor_to_rollout(w, cfg), cfg)`` equals ``w`` bitwise."""
    out: dict[str, torch.Tensor] = {
        "embedding.word_embeddings.weight": weights["embed"],
        "decoder.final_layernorm.weight": weights["final_norm"],
    }
    if not cfg.tie_embeddings:
        out["output_layer.weight"] = weights["lm_head"]
    for l in range(cfg.num_layers):
        m, p = f"decoder.layers.{l}.", f"layers.{l}."
        a = m + "self_attention."
        out[a + "linear_qkv.weight"] = fuse_qkv(*(weights[p + n] for n in ("wq", "wk", "wv")), cfg)
        if cfg.qkv_bias:
            out[a + "linear_qkv.bias"] = fuse_qkv(
                *(weights[p + n] for n in ("bq", "bk", "bv")), cfg
            )
        if cfg.qk_norm:
            out[a + "q_layernorm.weight"] = weights[p + "q_norm"]
            out[a + "k_layernorm.weight"] = weights[p + "k_norm"]
        out[a + "linear_proj.weight"] = weights[p + "wo"]
        out[m + "input_layernorm.weight"] = weights[p + "attn_norm"]
        out[m + "pre_mlp_layernorm.weight"] = weights[p + "ffn_norm"]
        if l in cfg.moe_layers:
            gate, up = weights[p + "experts.w_gate"], weights[p + "experts.w_up"]
            out[m + "mlp.w_gate_up"] = torch.cat([gate, up], dim=1)
            out[m + "mlp.router"] = weights[p + "router"]
            out[m + "mlp.w_down"] = weights[p + "experts.w_down"]
        else:
            out[m + "mlp.linear_fc1.weight"] = torch.cat(
                [weights[p + "w_gate"], weights[p + "w_up"]]
            )
            out[m + "mlp.linear_fc2.weight"] = weights[p + "w_down"]
    for k, v in weights.items():
        if k.startswith("dsa."):
            out[k.removeprefix("dsa.")] = v
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def split_qkv(qkv: torch.Tensor, cfg: ModelConfig) -> tuple[torch.Tensor, ...]:
    """megatron's fused ``linear_qkv`` weight [ng * (rep + 2) * d, H] (or its bias [ng * (rep + 2)
    * d]) -> (q [Hq * d, ...], k [Hkv * d, ...], v [Hkv * d, ...]) as views."""
    rep, d, tail = cfg.num_heads // cfg.num_kv_heads, cfg.head_dim, qkv.shape[1:]
    grouped = qkv.view(cfg.num_kv_heads, rep + 2, d, *tail)
    return (
        grouped[:, :rep].reshape(cfg.num_heads * d, *tail),
        grouped[:, rep].reshape(cfg.num_kv_heads * d, *tail),
        grouped[:, rep + 1].reshape(cfg.num_kv_heads * d, *tail),
    )


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """Inverse of ``split_qkv``: q [Hq * d, ...], k/v [Hkv * d, ...] -> megatron's grouped layout."""
    rep, d, tail = cfg.num_heads // cfg.num_kv_heads, cfg.head_dim, q.shape[1:]
    ng = cfg.num_kv_heads
    grouped = torch.cat(
        [q.reshape(ng, rep, d, *tail), k.reshape(ng, 1, d, *tail), v.reshape(ng, 1, d, *tail)],
        dim=1,
    )  # [ng, rep + 2, d, ...]
    return grouped.reshape(ng * (rep + 2) * d, *tail)


LINEAR_NAMES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
"""Engine weights that are matmul operands of dense layers (the quantizable linears)."""

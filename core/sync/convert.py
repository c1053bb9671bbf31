"""Actor (megatron) → rollout-engine parameter layout conversion.

megatron packs attention projections as ``linear_qkv`` rows grouped per query group:
[ng, (np/ng + 2), hn, H] = (q heads of the group, k, v); its gated FFN ``linear_fc1`` is
cat(gate, up). The engine keeps separate ``wq/wk/wv`` and ``w_gate/w_up``. Pure reshapes and
slices: the conversion is exact (bitwise) in fp32.
"""

from __future__ import annotations

import torch

from core.model.config import ModelConfig


def actor_to_rollout(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Map megatron ``GPTModel`` weights to the engine layout (new tensors, detached)."""
    out: dict[str, torch.Tensor] = {
        "embed": weights["embedding.word_embeddings.weight"],
        "final_norm": weights["decoder.final_layernorm.weight"],
        "lm_head": weights["output_layer.weight"],
    }
    rep, d, h = cfg.num_heads // cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
    for l in range(cfg.num_layers):
        m, p = f"decoder.layers.{l}.", f"layers.{l}."
        qkv = weights[m + "self_attention.linear_qkv.weight"].view(cfg.num_kv_heads, rep + 2, d, h)
        out[p + "wq"] = qkv[:, :rep].reshape(cfg.num_heads * d, h)
        out[p + "wk"] = qkv[:, rep].reshape(cfg.num_kv_heads * d, h)
        out[p + "wv"] = qkv[:, rep + 1].reshape(cfg.num_kv_heads * d, h)
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


LINEAR_NAMES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
"""Engine weights that are matmul operands of dense layers (the quantizable linears)."""

"""What the vLLM engine is sent and what it holds, in the embedded engine's layout.

``check_payload`` refuses a payload vLLM must not load (before anything reaches it);
``dequantized`` turns packed quantized linears into dense weights (vLLM's CPU backend has no
kernel for closedloop's packed layouts); ``held_to_engine`` maps vLLM's fused parameters
(``qkv_proj`` = [q; k; v] rows, ``gate_up_proj`` = [gate; up]) back to the engine's names, so the
weight sync checksums what vLLM holds against what it sent.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.model.config import ModelConfig
from core.model.hf_weights import engine_shapes


def dequantized(weights: Mapping[str, object], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Dense tensors of a payload: quantized linears (``.dequantize``) in ``dtype``."""
    out = {}
    for name, w in weights.items():
        if isinstance(w, torch.Tensor):
            out[name] = w
        elif hasattr(w, "dequantize"):
            out[name] = w.dequantize(dtype=dtype)
        else:
            raise ValueError(f"weight payload {name}: {type(w).__name__} is not a tensor")
    return out


def check_payload(weights: Mapping[str, torch.Tensor], cfg: ModelConfig) -> None:
    """Refuse a payload vLLM must not load: a missing, extra or mis-shaped tensor, or NaN/inf."""
    shapes = engine_shapes(cfg)
    missing = sorted(set(shapes) - set(weights) - ({"lm_head"} if cfg.tie_embeddings else set()))
    extra = sorted(set(weights) - set(shapes))
    if missing or extra:
        raise ValueError(f"weight payload: missing tensors {missing}, unexpected {extra}")
    for name, t in weights.items():
        if tuple(t.shape) != shapes[name]:
            raise ValueError(
                f"weight payload {name}: shape {tuple(t.shape)}, the model needs {shapes[name]}"
            )
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"weight payload {name}: non-finite values (NaN or inf)")


def held_to_engine(held: Mapping[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """vLLM-named held tensors (fused qkv / gate_up) -> the embedded engine's layout."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    f = cfg.ffn_hidden_size
    out = {
        "embed": held["model.embed_tokens.weight"],
        "final_norm": held["model.norm.weight"],
        "lm_head": held.get("lm_head.weight", held["model.embed_tokens.weight"]),
    }
    for l in range(cfg.num_layers):
        p, e = f"model.layers.{l}.", f"layers.{l}."
        qkv = held[p + "self_attn.qkv_proj.weight"]
        out |= {e + "wq": qkv[:q], e + "wk": qkv[q : q + kv], e + "wv": qkv[q + kv :]}
        if cfg.qkv_bias:
            b = held[p + "self_attn.qkv_proj.bias"]
            out |= {e + "bq": b[:q], e + "bk": b[q : q + kv], e + "bv": b[q + kv :]}
        if cfg.qk_norm:
            out[e + "q_norm"] = held[p + "self_attn.q_norm.weight"]
            out[e + "k_norm"] = held[p + "self_attn.k_norm.weight"]
        gate_up = held[p + "mlp.gate_up_proj.weight"]
        out |= {e + "w_gate": gate_up[:f], e + "w_up": gate_up[f:]}
        out[e + "wo"] = held[p + "self_attn.o_proj.weight"]
        out[e + "w_down"] = held[p + "mlp.down_proj.weight"]
        out[e + "attn_norm"] = held[p + "input_layernorm.weight"]
        out[e + "ffn_norm"] = held[p + "post_attention_layernorm.weight"]
    return out

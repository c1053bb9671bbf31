"""Hugging Face decoder tensor names <-> the rollout engine's layout <-> megatron's.

The engine keeps the Hugging Face layout itself (separate q/k/v, gate/up, rotate-half RoPE), so
engine <-> HF is a renaming; megatron <-> HF goes through the engine layout with the exact
reshapes of ``core.sync.convert``. Every map checks names and shapes against ``ModelConfig``:
a missing, extra or mis-shaped tensor is a ``ValueError`` naming it (a vocabulary that does not
match ``vocab_size`` is caught here). A tied checkpoint has no ``lm_head.weight`` (one that has
it must equal the embedding).
"""

from __future__ import annotations

import torch

from core.model.config import ModelConfig
from core.sync.convert import actor_to_rollout, rollout_to_actor

_LAYER = {
    "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight",
    "bq": "self_attn.q_proj.bias",
    "bk": "self_attn.k_proj.bias",
    "bv": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
    "attn_norm": "input_layernorm.weight",
    "ffn_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight",
    "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight",
}
"""Engine per-layer name -> HF name under ``model.layers.{l}.``."""


def engine_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Engine name -> shape of every tensor a dense ``cfg`` has (HF-exportable configs)."""
    h, d, f, v = cfg.hidden_size, cfg.head_dim, cfg.ffn_hidden_size, cfg.vocab_size
    q, kv = cfg.num_heads * d, cfg.num_kv_heads * d
    layer = {
        "wq": (q, h),
        "wk": (kv, h),
        "wv": (kv, h),
        "wo": (h, q),
        "attn_norm": (h,),
        "ffn_norm": (h,),
        "w_gate": (f, h),
        "w_up": (f, h),
        "w_down": (h, f),
    }
    if cfg.qkv_bias:
        layer |= {"bq": (q,), "bk": (kv,), "bv": (kv,)}
    if cfg.qk_norm:
        layer |= {"q_norm": (d,), "k_norm": (d,)}
    out = {"embed": (v, h), "final_norm": (h,), "lm_head": (v, h)}
    for l in range(cfg.num_layers):
        out |= {f"layers.{l}.{k}": s for k, s in layer.items()}
    return out


def _hf_name(engine_name: str) -> str:
    if engine_name == "embed":
        return "model.embed_tokens.weight"
    if engine_name == "final_norm":
        return "model.norm.weight"
    if engine_name == "lm_head":
        return "lm_head.weight"
    _, l, key = engine_name.split(".", 2)
    return f"model.layers.{l}.{_LAYER[key]}"


def hf_to_rollout(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> engine layout (the same tensors, renamed); checks names and shapes."""
    shapes = engine_shapes(cfg)
    names = {_hf_name(k): k for k in shapes}
    tied_head = hf.get("lm_head.weight")
    if cfg.tie_embeddings:
        names.pop("lm_head.weight")
    extra = sorted(set(hf) - set(names) - {"lm_head.weight"})
    missing = sorted(set(names) - set(hf))
    if extra or missing:
        raise ValueError(f"HF checkpoint tensors: missing {missing}, unexpected {extra}")
    if "lm_head.weight" not in names and tied_head is not None:
        if not torch.equal(tied_head, hf["model.embed_tokens.weight"]):
            raise ValueError("tie_word_embeddings is true but lm_head.weight != embed_tokens")
    out = {}
    for hf_name, name in names.items():
        t = hf[hf_name]
        if tuple(t.shape) != shapes[name]:
            raise ValueError(
                f"HF tensor {hf_name} has shape {tuple(t.shape)}, config.json implies "
                f"{shapes[name]} (vocab_size={cfg.vocab_size}, hidden_size={cfg.hidden_size}, "
                f"head_dim={cfg.head_dim})"
            )
        out[name] = t
    if cfg.tie_embeddings:
        out["lm_head"] = out["embed"]
    return out


def rollout_to_hf(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Engine-layout float weights -> HF tensors (contiguous copies); drops ``lm_head`` if tied."""
    shapes = engine_shapes(cfg)
    if cfg.tie_embeddings:
        shapes.pop("lm_head")
    missing = sorted(set(shapes) - set(weights))
    if missing:
        raise ValueError(f"engine weights lack {missing}")
    out = {}
    for name, shape in shapes.items():
        t = weights[name]
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"engine weight {name} is quantized: export a float engine")
        if tuple(t.shape) != shape:
            raise ValueError(f"engine weight {name} has shape {tuple(t.shape)}, expected {shape}")
        out[_hf_name(name)] = t.detach().contiguous().clone()
    return out


def hf_to_actor(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF tensors -> megatron ``GPTModel`` weights (fused q/k/v grouped per query group)."""
    return rollout_to_actor(hf_to_rollout(hf, cfg), cfg)


def actor_to_hf(weights: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """megatron ``GPTModel`` weights -> HF tensors (exact reshapes and slices)."""
    return rollout_to_hf(actor_to_rollout(weights, cfg), cfg)

"""Tiny random Llama / Qwen2 / Qwen3 checkpoints written by ``transformers`` itself (no hub).

Every parameter is redrawn (norm weights around 1, biases and matrices N(0, 0.1^2)) so that
norms, biases and q/k norms all matter to the logits. Qwen3 uses a head width (24) that is not
hidden / heads (16); Qwen2 ties its embeddings, as the small Qwen2 releases do.
"""

from __future__ import annotations

from pathlib import Path

import torch

ARCHS = ("llama", "qwen2", "qwen3")

_COMMON = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
)


def write_hf_model(arch: str, out: Path, *, seed: int = 0) -> Path:
    """Save a random ``arch`` model with ``save_pretrained`` into ``out``; returns ``out``."""
    import transformers as tf

    torch.manual_seed(seed)
    rope = {"rope_type": "default", "rope_theta": 50000.0}
    if arch == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**_COMMON, rope_parameters=rope))
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(**_COMMON, rope_parameters=rope, tie_word_embeddings=True)
        model = tf.Qwen2ForCausalLM(cfg)
    elif arch == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**_COMMON, head_dim=24, rope_parameters=rope))
    else:
        raise ValueError(arch)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(out)
    return out


def hf_logits(path: Path, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """transformers' fp32 logits [B, T, V] of a left-padded batch (eager attention, positions
    counted from each row's first real token, as both our engines count them)."""
    import transformers as tf

    model = tf.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    pos = (valid.long().cumsum(dim=1) - 1).clamp_min(0)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=valid.long(), position_ids=pos).logits

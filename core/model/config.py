"""Policy architecture config, shared by the megatron actor and the embedded rollout engine.

A GLM-style decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU FFN, optional MoE FFN layers
(top-k of E experts) and an optional DSA Top-k sparse core attention. The Hugging Face decoders it
covers add q/k/v biases (Qwen2), per-head q/k RMSNorm (Qwen3), tied embeddings and a head width
that is not hidden / heads. Both engines read this one config, so the same checkpoint means the
same function in each.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 384
    """Vocabulary size (tokenizer's, padded to a multiple of 8)."""
    hidden_size: int = 128
    """Model width."""
    num_layers: int = 4
    """Number of decoder layers."""
    num_heads: int = 4
    """Query heads."""
    num_kv_heads: int = 2
    """Key/value heads (GQA groups); must divide num_heads."""
    ffn_hidden_size: int = 352
    """SwiGLU inner width."""
    rope_base: float = 10000.0
    """RoPE base frequency."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    max_seq_len: int = 64
    """Longest prompt + response the engines accept."""
    moe_layers: tuple[int, ...] = ()
    """Indices of layers whose FFN is a mixture of experts (empty: dense)."""
    num_experts: int = 4
    """Experts per MoE layer."""
    moe_topk: int = 2
    """Experts routed per token."""
    dsa_topk: int = 0
    """DSA sparse attention: keys selected per query (0: dense attention)."""
    dsa_index_heads: int = 2
    """DSA indexer heads."""
    dsa_index_dim: int = 16
    """DSA indexer dimension."""
    dsa_trainable: bool = False
    """Train the DSA indexer (GLM-5 freezes it)."""
    qkv_bias: bool = False
    """Biases on the q/k/v projections (Qwen2); the output projection never has one."""
    qk_norm: bool = False
    """RMSNorm over each query and key head before RoPE, one weight [head_dim] each (Qwen3)."""
    tie_embeddings: bool = False
    """The output head reuses the input embedding matrix (``tie_word_embeddings``)."""
    kv_channels: int = 0
    """Per-head width; 0: hidden_size / num_heads (Qwen3 checkpoints set it explicitly)."""
    hf_path: str = ""
    """A local Hugging Face checkpoint directory to start from instead of ``train.base_model``
    (``core.model.hf_checkpoint``); empty: the closedloop checkpoint. Not an architecture field:
    the architecture is read from the directory's ``config.json``."""

    def __post_init__(self) -> None:
        _positive(self, "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads")
        _positive(self, "ffn_hidden_size", "max_seq_len", "num_experts", "moe_topk")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model.num_kv_heads={self.num_kv_heads} must divide model.num_heads={self.num_heads}"
            )
        if self.kv_channels < 0 or self.kv_channels % 2:
            raise ValueError(f"model.kv_channels={self.kv_channels} must be 0 or an even int > 0")
        if not self.kv_channels and (
            self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2
        ):
            raise ValueError(
                f"model.hidden_size={self.hidden_size} must be num_heads × an even head dim "
                "(or set model.kv_channels)"
            )
        if not 1 <= self.moe_topk <= self.num_experts:
            raise ValueError(f"model.moe_topk must be in [1, num_experts={self.num_experts}]")
        for layer in self.moe_layers:
            if not 0 <= layer < self.num_layers:
                raise ValueError(f"model.moe_layers entry {layer} outside [0, {self.num_layers})")
        if self.dsa_topk < 0:
            raise ValueError("model.dsa_topk must be >= 0 (0 = dense attention)")

    @property
    def head_dim(self) -> int:
        """Per-head width: ``kv_channels``, or hidden_size / num_heads when it is 0."""
        return self.kv_channels or self.hidden_size // self.num_heads

    def to_dict(self) -> dict:
        """The architecture as a dict (a checkpoint's ``model`` section; ``hf_path`` left out)."""
        d = dataclasses.asdict(self)
        d["moe_layers"] = list(self.moe_layers)
        del d["hf_path"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(
                f"unknown model config keys {sorted(unknown)}; allowed: {sorted(known)}"
            )
        d = dict(d)
        if "moe_layers" in d:
            d["moe_layers"] = tuple(d["moe_layers"])
        return cls(**d)


def _positive(cfg: ModelConfig, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ValueError(f"model.{name}={getattr(cfg, name)} must be > 0")

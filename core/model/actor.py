"""The actor: a megatron-core ``GPTModel`` built from a layer spec, on the CPU (gloo, world size 1;
or tensor-parallel ranks under torchrun, ``core.parallel``, through megatron's own parallel layers).

megatron's local spec with RMSNorm, GQA and SwiGLU (and, per ``ModelConfig``, megatron's own
q/k/v bias ``add_qkv_bias``, per-head q/k RMSNorm ``qk_layernorm`` with the spec's
``q_layernorm``/``k_layernorm``, and tied embeddings); our ``ActorCoreAttention`` replaces
``DotProductAttention`` and our ``MoEMLP`` replaces ``MoELayer`` through the spec (both allocate
CUDA state in megatron). No position embedding in megatron: RoPE lives in the core attention.
fp32 master weights; the optimizer (AdamW) is the training loop's.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from torch import nn

from core.model.attention import ActorCoreAttention
from core.model.config import ModelConfig
from core.model.dsa_engines import actor_dsa_factory
from core.model.moe import MoEMLP
from core.model.shared_prefix import pack_shared_prefix


def init_distributed() -> None:
    """gloo process group of world size 1 (no port: a HashStore) and megatron's parallel state."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel()


def transformer_config(cfg: ModelConfig, *, tp_size: int = 1) -> TransformerConfig:
    """megatron's ``TransformerConfig`` for ``cfg`` (CPU init, fp32, no fusions, no dropout)."""
    tc = TransformerConfig(
        tensor_model_parallel_size=tp_size,
        num_layers=cfg.num_layers,
        hidden_size=cfg.hidden_size,
        num_attention_heads=cfg.num_heads,
        num_query_groups=cfg.num_kv_heads,
        ffn_hidden_size=cfg.ffn_hidden_size,
        kv_channels=cfg.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=cfg.norm_eps,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=cfg.qkv_bias,
        qk_layernorm=cfg.qk_norm,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        init_method_std=0.02,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
    )
    tc.closedloop_rope_base = cfg.rope_base
    return tc


def layer_specs(
    cfg: ModelConfig, linear_overrides: dict | None = None
) -> TransformerBlockSubmodules:
    """Per-layer specs: megatron's local spec with our core attention (and MoE FFN where set).

    ``linear_overrides`` maps ``linear_qkv|linear_proj|linear_fc1|linear_fc2`` to replacement
    linear classes (the QAT fake-quant linears), applied through the spec.
    """
    specs = []
    for i in range(cfg.num_layers):
        spec = get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=cfg.qk_norm)
        attn = spec.submodules.self_attention.submodules
        attn.core_attention = ActorCoreAttention
        if i in cfg.moe_layers:
            spec.submodules.mlp = ModuleSpec(
                module=MoEMLP, params={"num_experts": cfg.num_experts, "topk": cfg.moe_topk}
            )
        for name, cls in (linear_overrides or {}).items():
            if hasattr(attn, name):
                setattr(attn, name, cls)
            elif i not in cfg.moe_layers and hasattr(spec.submodules.mlp.submodules, name):
                setattr(spec.submodules.mlp.submodules, name, cls)
        specs.append(spec)
    final_norm = get_gpt_layer_local_spec(normalization="RMSNorm").submodules.input_layernorm
    return TransformerBlockSubmodules(layer_specs=specs, layer_norm=final_norm)


class Actor(nn.Module):
    """Training-engine policy: megatron ``GPTModel`` plus log-prob helpers."""

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        seed: int = 0,
        linear_overrides: dict | None = None,
        dsa_factory=None,
    ) -> None:
        super().__init__()
        init_distributed()
        torch.manual_seed(seed)
        self.cfg = cfg
        self.tp_size = parallel_state.get_tensor_model_parallel_world_size()
        if self.tp_size > 1 and (cfg.moe_layers or cfg.dsa_topk):
            raise ValueError(
                "tensor parallelism covers dense attention and FFN only: model.moe_layers and "
                "model.dsa_topk must be empty / 0"
            )
        self.gpt = GPTModel(
            config=transformer_config(cfg, tp_size=self.tp_size),
            transformer_layer_spec=layer_specs(cfg, linear_overrides),
            vocab_size=cfg.vocab_size,
            max_sequence_length=cfg.max_seq_len,
            pre_process=True,
            post_process=True,
            share_embeddings_and_output_weights=cfg.tie_embeddings,
            position_embedding_type="none",
        )
        if dsa_factory is None and cfg.dsa_topk > 0:
            dsa_factory = actor_dsa_factory(cfg, seed=seed)  # seeded, frozen unless dsa_trainable
        if dsa_factory is not None:
            for i, attn in enumerate(self.core_attentions()):
                attn.dsa = dsa_factory(i)

    def core_attentions(self) -> list[ActorCoreAttention]:
        return [layer.self_attention.core_attention for layer in self.gpt.decoder.layers]

    def moe_modules(self) -> dict[int, MoEMLP]:
        return {
            i: layer.mlp
            for i, layer in enumerate(self.gpt.decoder.layers)
            if isinstance(layer.mlp, MoEMLP)
        }

    def logits(
        self, input_ids: torch.Tensor, valid: torch.Tensor, *, n_prompt: int = 0
    ) -> torch.Tensor:
        """input_ids [B, T] int64, valid [B, T] bool -> logits [B, T, V] fp32.

        ``n_prompt`` > 0: rows laid out ``[left pad | prompt (n_prompt slots) | tail]`` that share
        their prompt are forwarded with it once (``core.model.shared_prefix``; dense models
        without tensor parallelism — MoE and DSA layers record per-row selections); the logits are
        the same up to float rounding. Under tensor parallelism (megatron initialized with
        TP > 1) this rank's vocabulary shard [B, T, V / TP] (megatron's ``parallel_output``);
        ``core.parallel.logprobs`` reduces it with megatron's vocab-parallel cross-entropy."""
        dense = not (self.cfg.moe_layers or self.cfg.dsa_topk) and self.tp_size == 1
        packed = pack_shared_prefix(input_ids, valid, n_prompt) if n_prompt and dense else None
        if packed is not None:
            pos = torch.zeros_like(packed.ids)  # unused: no position embedding in megatron
            unused = torch.zeros((1, 1, 1, packed.ids.shape[1]), dtype=torch.bool)
            attns = self.core_attentions()
            for a in attns:
                a.pack = packed  # the block structure the core attention follows
            try:
                return self.gpt(packed.ids, pos, unused).float()[0][packed.gather]
            finally:
                for a in attns:
                    a.pack = None
        pad_mask = ~valid[:, None, None, :]  # [B, 1, 1, T], True = masked (megatron convention)
        pos = torch.zeros_like(input_ids)  # unused: no position embedding in megatron
        return self.gpt(input_ids, pos, pad_mask).float()

    def named_weights(self) -> dict[str, torch.Tensor]:
        """Weights by megatron name, without megatron's ``_extra_state`` entries (this rank's
        shards under tensor parallelism: ``core.parallel.shard`` gathers them)."""
        return {k: v for k, v in self.gpt.state_dict().items() if not k.endswith("_extra_state")}

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        missing, unexpected = self.gpt.load_state_dict(weights, strict=False)
        missing = [k for k in missing if not k.endswith("_extra_state")]
        if missing or unexpected:
            raise ValueError(f"checkpoint mismatch: missing {missing}, unexpected {unexpected}")


@functools.cache
def _megatron_version() -> str:
    import megatron.core

    return getattr(megatron.core, "__version__", "unknown")

"""QAT in the megatron actor: which modules fake-quantize, and their weights as the forward sees them.

Dense linears become the QAT linears through the actor's layer spec (``linear_overrides`` of
``ModuleSpec(module=QAT..., params={"quant_spec": ...})``); MoE expert stacks (our ``MoEMLP``) get
``quant_spec`` set after the model is built. ``qat_weights`` lists every fake-quantized parameter
as the 2-D [rows, K] view that ``quantize`` sees, keyed by its megatron name.
"""

from __future__ import annotations

import torch
from megatron.core.transformer.spec_utils import ModuleSpec

from core.model.actor import Actor
from core.model.moe import MoEMLP
from core.quant.qat_linear import QATColumnParallelLinear, QATRowParallelLinear
from core.quant.spec import QuantSpec


def qat_linear_overrides(spec: QuantSpec, scope: str) -> dict[str, ModuleSpec] | None:
    """``Actor(linear_overrides=...)`` for ``scope`` (None for ``experts_only``)."""
    if scope == "experts_only":
        return None
    col = ModuleSpec(module=QATColumnParallelLinear, params={"quant_spec": spec})
    row = ModuleSpec(module=QATRowParallelLinear, params={"quant_spec": spec})
    return {"linear_qkv": col, "linear_proj": row, "linear_fc1": col, "linear_fc2": row}


def enable_expert_qat(actor: Actor, spec: QuantSpec) -> int:
    """Fake-quantize every MoE layer's expert weights; returns the number of MoE layers."""
    for moe in actor.moe_modules().values():
        for w in (moe.w_gate_up, moe.w_down):
            spec.check_weight_shape(w.shape[1:])
        moe.quant_spec = spec
    return len(actor.moe_modules())


def qat_weights(actor: Actor) -> dict[str, tuple[torch.Tensor, QuantSpec]]:
    """Megatron parameter name -> (weight as [rows, K], spec) for every fake-quantized weight."""
    out: dict[str, tuple[torch.Tensor, QuantSpec]] = {}
    for name, mod in actor.gpt.named_modules():
        if isinstance(mod, QATColumnParallelLinear | QATRowParallelLinear):
            out[f"{name}.weight"] = (mod.weight, mod.quant_spec)
        elif isinstance(mod, MoEMLP) and mod.quant_spec is not None:
            for pname in ("w_gate_up", "w_down"):
                w = getattr(mod, pname)  # [E, N, K]
                out[f"{name}.{pname}"] = (w.reshape(-1, w.shape[-1]), mod.quant_spec)
    return out

"""QAT linears for the megatron actor: tensor-parallel linears that fake-quantize their weight.

``QATColumnParallelLinear`` / ``QATRowParallelLinear`` subclass megatron-core's local linears and
override only ``_forward_impl`` (the one place both pass the weight to the matmul), replacing the
weight with ``fake_quant(weight, quant_spec)``; master weights, optimizer and megatron stay as they
are. They take one extra keyword, ``quant_spec`` (a QuantSpec or a preset name), which a
``ModuleSpec(module=..., params={"quant_spec": ...})`` supplies; ``qat_layer_spec`` rewrites a
layer spec (e.g. ``get_gpt_layer_local_spec()``) that way. A ``functools.partial`` would not work:
megatron's ``build_module`` only accepts classes, functions and ModuleSpecs.
Limits: groups are taken on the local shard, so a row-parallel (K-sharded) layer needs group_size
to divide K / tp and rejects per-channel specs when tp > 1 (they would need a cross-rank amax);
``gradient_accumulation_fusion`` is rejected (it writes ``weight.main_grad`` of the tensor passed
to the matmul, which is the fake-quantized copy, not the parameter).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.spec_utils import ModuleSpec

from core.quant.presets import QAT_SCOPES, get_preset
from core.quant.quantizer import QuantizedTensor, QuantSpec, fake_quant, quantize


def _resolve(quant_spec: QuantSpec | str) -> QuantSpec:
    return get_preset(quant_spec) if isinstance(quant_spec, str) else quant_spec


def _check_config(cls: type, config: Any) -> None:
    if config.gradient_accumulation_fusion:
        raise ValueError(
            f"{cls.__name__}: config.gradient_accumulation_fusion=True is not supported "
            "with QAT (set it to False)"
        )


def _check_layer(layer: torch.nn.Module, spec: QuantSpec, *, k_sharded: bool) -> None:
    if layer.weight is None:
        return
    if k_sharded and spec.group_size == -1 and layer.input_size_per_partition != layer.input_size:
        raise ValueError(
            f"{type(layer).__name__}: per-channel spec {spec.name!r} on a K-sharded row-parallel "
            "layer needs a cross-rank amax; use a group-wise spec or tensor parallel size 1"
        )
    spec.check_weight_shape(layer.weight.shape)


class _QATLinear:
    """Mixin over a megatron parallel linear: its forward uses ``fake_quant(weight, quant_spec)``."""

    _K_SHARDED: bool
    """Whether tensor parallelism shards the input dimension K (row-parallel layers)."""

    def __init__(
        self, input_size: int, output_size: int, *, quant_spec: QuantSpec | str, **kwargs: Any
    ):
        spec = _resolve(quant_spec)
        _check_config(type(self), kwargs["config"])
        super().__init__(input_size, output_size, **kwargs)
        self.quant_spec = spec
        _check_layer(self, spec, k_sharded=self._K_SHARDED)

    def _forward_impl(self, input, weight, *args, **kwargs):
        """``input`` [S, B, K_local], ``weight`` [N_local, K_local] -> megatron's matmul on the
        fake-quantized weight (gradients reach ``weight`` straight through)."""
        return super()._forward_impl(input, fake_quant(weight, self.quant_spec), *args, **kwargs)

    def quantized_weight(self) -> QuantizedTensor:
        """Codes/scales of the local weight shard as the forward uses them (``qat_fake`` rows)."""
        return quantize(self.weight, self.quant_spec)


class QATColumnParallelLinear(_QATLinear, ColumnParallelLinear):
    """``ColumnParallelLinear`` whose forward uses ``fake_quant(weight, quant_spec)``."""

    _K_SHARDED = False


class QATRowParallelLinear(_QATLinear, RowParallelLinear):
    """``RowParallelLinear`` whose forward uses ``fake_quant(weight, quant_spec)``."""

    _K_SHARDED = True


_SWAPS = {ColumnParallelLinear: QATColumnParallelLinear, RowParallelLinear: QATRowParallelLinear}


def qat_layer_spec(
    layer_spec: ModuleSpec, *, quant_spec: QuantSpec | str, scope: str = "all_linears"
) -> ModuleSpec:
    """A copy of ``layer_spec`` with its local TP linears swapped for the QAT ones.

    ``scope``: ``all_linears`` (attention qkv/proj, MLP fc1/fc2, shared and routed experts) or
    ``experts_only`` (the linears under an ``experts`` submodule; needs SequentialMLP experts,
    i.e. ``moe_grouped_gemm=False``). Embeddings and the output head are built by the model, not
    the layer spec, so they are never quantized. Raises ``ValueError`` if nothing was swapped.
    """
    if scope not in QAT_SCOPES:
        raise ValueError(f"scope={scope!r} is not allowed; choose one of {QAT_SCOPES}")
    spec = _resolve(quant_spec)
    swapped: list[int] = []

    def walk(node: Any, active: bool) -> Any:
        if isinstance(node, type) and node in _SWAPS:
            if not active:
                return node
            swapped.append(1)
            return ModuleSpec(module=_SWAPS[node], params={"quant_spec": spec})
        if isinstance(node, ModuleSpec):
            new = copy.copy(node)
            if node.module in _SWAPS and active:
                swapped.append(1)
                new.module = _SWAPS[node.module]
                new.params = {**node.params, "quant_spec": spec}
            new.submodules = walk(node.submodules, active)
            return new
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            new = copy.copy(node)
            for f in dataclasses.fields(node):
                child_active = active or (scope == "experts_only" and f.name == "experts")
                setattr(new, f.name, walk(getattr(node, f.name), child_active))
            return new
        return node

    out = walk(layer_spec, scope == "all_linears")
    if not swapped:
        raise ValueError(
            f"qat_layer_spec: no ColumnParallelLinear/RowParallelLinear in scope {scope!r}"
        )
    return out

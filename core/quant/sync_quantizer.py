"""Offline (real) quantization at weight sync: the ``quantize`` phase of ``WeightSync``.

``rollout.precision`` selects the spec: ``w4a16`` -> ``rollout.quant_preset`` (an int4 preset),
``w8a16`` -> ``int8-channel``, ``fp8`` -> ``fp8-e4m3-channel``. The quantizer replaces the engine
layout's dense linears (``wq wk wv wo w_gate w_up w_down``) and MoE expert stacks with packed
weights (``QuantizedLinearWeight`` / ``QuantizedExpertWeights``) made by the one ``quantize``;
embeddings, norms, output head, routers and DSA indexers stay float (the engine casts to bf16).
"""

from __future__ import annotations

import torch

from core.model.config import ModelConfig
from core.quant.experts import QuantizedExpertWeights
from core.quant.linear import QuantizedLinearWeight
from core.quant.presets import PRESETS, get_preset
from core.quant.quantizer import QuantizedTensor, quant_error, quantize
from core.quant.spec import QuantSpec
from core.sync.convert import LINEAR_NAMES

FIXED_PRESETS = {"w8a16": "int8-channel", "fp8": "fp8-e4m3-channel"}
"""Quantized rollout precisions whose preset is fixed (``w4a16`` takes ``rollout.quant_preset``)."""
EXPERT_NAMES = ("experts.w_gate", "experts.w_up", "experts.w_down")
"""Engine MoE expert stacks [E, N, K] (quantized row-wise like the dense linears)."""


def rollout_spec(precision: str, quant_preset: str) -> QuantSpec | None:
    """The spec of a quantized rollout precision, or None for ``fp32``/``bf16``.

    Raises ``ValueError`` for an unknown precision or a non-int4 preset with ``w4a16``.
    """
    if precision in ("fp32", "bf16"):
        return None
    if precision in FIXED_PRESETS:
        return get_preset(FIXED_PRESETS[precision])
    if precision != "w4a16":
        raise ValueError(
            f"rollout.precision={precision!r} not in ['fp32', 'bf16', 'w4a16', *{list(FIXED_PRESETS)}]"
        )
    if quant_preset not in PRESETS:
        raise ValueError(f"rollout.quant_preset={quant_preset!r} not in {sorted(PRESETS)}")
    spec = PRESETS[quant_preset]
    if spec.is_fp8 or spec.bits != 4:
        raise ValueError(
            f"rollout.quant_preset={quant_preset!r} is {spec.bits}-bit {spec.format}; "
            "w4a16 needs an int4 preset (e.g. int4-g32-sym)"
        )
    return spec


def quantized_names(cfg: ModelConfig) -> list[str]:
    """Engine weight names the rollout quantizes: dense linears and expert stacks per layer."""
    names = []
    for layer in range(cfg.num_layers):
        p = f"layers.{layer}."
        ffn = EXPERT_NAMES if layer in cfg.moe_layers else ("w_gate", "w_up", "w_down")
        names += [p + n for n in LINEAR_NAMES if n not in ("w_gate", "w_up", "w_down")]
        names += [p + n for n in ffn]
    return names


class SyncQuantizer:
    """``callable(payload, version) -> payload`` for ``WeightSync(quantizer=...)``.

    ``last`` holds, for the most recent call, each quantized tensor's canonical ``QuantizedTensor``
    (stacked [E * N, K] for experts) and its 0-d max |w - dequantize| (the ``offline_real`` rows).
    """

    def __init__(self, spec: QuantSpec, cfg: ModelConfig) -> None:
        self.spec = spec
        self.names = quantized_names(cfg)
        for name in self.names:  # fail at build time, not at the first sync
            k = cfg.ffn_hidden_size if name.endswith("w_down") else cfg.hidden_size
            if name.endswith(".wo"):
                k = cfg.num_heads * cfg.head_dim
            spec.check_weight_shape((1, k))
        self.last: dict[str, tuple[QuantizedTensor, torch.Tensor]] = {}
        self.last_version: int | None = None

    def __call__(self, payload: dict, version: int) -> dict:
        out = dict(payload)
        self.last = {}
        for name in self.names:
            w = payload[name]  # [N, K] or experts [E, N, K]
            qt = quantize(w.reshape(-1, w.shape[-1]), self.spec)
            self.last[name] = (qt, quant_error(w.reshape(-1, w.shape[-1]), qt))
            if w.dim() == 3:
                out[name] = QuantizedExpertWeights.from_quantized(
                    qt, num_experts=w.shape[0], name=name
                )
            else:
                out[name] = QuantizedLinearWeight.from_quantized(qt, name=name)
        self.last_version = version
        return out

"""Quantization-aware training settings (the ``[quant]`` config section).

The rollout side (``rollout.precision``, ``rollout.quant_preset``) lives in ``[rollout]``; this
section only says whether and how the actor fake-quantizes its weights during training.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.quant.presets import PRESETS

QAT_SCOPES = ("all_linears", "experts_only")


@dataclass(frozen=True)
class QuantConfig:
    qat: bool = False
    """Fake-quantize the actor's weights in the forward pass (STE backward; fp32 masters)."""
    qat_preset: str = "int4-g32-sym"
    """QuantSpec preset of the fake quantizer (see ``core.quant.presets``); must equal the
    rollout's preset for the QAT and offline codes to be bit-identical."""
    qat_scope: str = "all_linears"
    """``all_linears`` (attention qkv/proj, dense fc1/fc2, MoE experts) or ``experts_only`` (MoE
    expert weights only). Embeddings, output head and MoE routers are never quantized."""

    def __post_init__(self) -> None:
        if not isinstance(self.qat, bool):
            raise ValueError(f"quant.qat={self.qat!r} must be true or false")
        if self.qat_preset not in PRESETS:
            raise ValueError(f"quant.qat_preset={self.qat_preset!r} not in {sorted(PRESETS)}")
        if self.qat_scope not in QAT_SCOPES:
            raise ValueError(f"quant.qat_scope={self.qat_scope!r} not in {list(QAT_SCOPES)}")

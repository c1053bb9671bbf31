"""Named quantizer presets, and the QAT settings (the [quant] section) that pick one.

Named QuantSpec presets and the registry that selects one by name (``get_preset``).

Choices (all computed in float32, see ``core.quant.quantizer``):
- ``int4-g32-sym``: the INT4 QAT seed. Per group of 32 along K, scale = amax / 7, codes in
  [-7, 7], round half to even, bf16 scales, compressed-tensors ``pack-quantized`` storage.
- ``int4-g32-torchao``: bit-identical to torchao 0.18's int4 weight fake quantizer
  ``IntxFakeQuantizer(IntxFakeQuantizeConfig(torch.int4, group_size=32))`` (the 8da4w QAT weight
  path) on fp32 weights: codes in the full signed range [-8, 7], scale = amax / ((7 - -8) / 2) =
  amax / 7.5 clamped below by the fp32 smallest normal 2^-126 (torchao's eps for fp32 inputs),
  fp32 scales, zero point 0, and codes from x * (1 / s) as torchao's ``_quantize_affine`` computes
  them. The reciprocal matters: at a group's -amax, x / s is exactly -7.5 (a tie, -> -8) while
  x * (1 / s) is -7.5 or one ulp above it (-> -7) depending on s, so about 0.3% of a random
  weight's elements (those at a group's extreme) differ by a full step under plain division.
  +amax lands on 7.5 and is clipped to 7. fp32 scales cost 5 bits a weight packed (0.3125x of
  bf16) against 4.5 with the seed's bf16 scales. bf16/fp16 weights: torchao computes the scale
  in the weight's dtype, we in fp32, so the identity holds for fp32 weights (our masters) only.
- ``int4-g32-asym``: min-max asymmetric int4, codes [-8, 7] with an int zero point per group
  (the compressed-tensors asymmetric layout: ``weight_zero_point`` packed along N).
- ``int4-channel-sym``: the seed's symmetric int4 codes with one bf16 scale per output channel
  (no groups along K): the coarse int4 of early W4A16 deployments, ~4x the g32 error here.
- ``int8-channel``: W8A16, per output channel, codes [-127, 127], scale = amax / 127, fp32 scales.
- ``fp8-e4m3-channel``: per output channel, scale = amax / 448, codes = float8_e4m3fn(x / scale)
  (round to nearest even), fp32 scales, dequantized to bf16 for the matmul.

Quantization-aware training settings (the ``[quant]`` config section).

The rollout side (``rollout.precision``, ``rollout.quant_preset``) lives in ``[rollout]``; this
section only says whether and how the actor fake-quantizes its weights during training.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.quant.quantizer import QuantSpec

PRESETS: dict[str, QuantSpec] = {
    "int4-g32-sym": QuantSpec(name="int4-g32-sym", bits=4, qmin=-7, qmax=7, group_size=32),
    "int4-g32-torchao": QuantSpec(
        name="int4-g32-torchao",
        bits=4,
        qmin=-8,
        qmax=7,
        group_size=32,
        scale_dtype="float32",
        eps=2.0**-126,
        reciprocal=True,
    ),
    "int4-g32-asym": QuantSpec(
        name="int4-g32-asym",
        bits=4,
        qmin=-8,
        qmax=7,
        group_size=32,
        symmetric=False,
        scale_rule="min_max",
        zero_point_domain="int",
    ),
    "int4-channel-sym": QuantSpec(name="int4-channel-sym", bits=4, qmin=-7, qmax=7, group_size=-1),
    "int8-channel": QuantSpec(
        name="int8-channel",
        bits=8,
        qmin=-127,
        qmax=127,
        group_size=-1,
        scale_dtype="float32",
        packing="none",
    ),
    "fp8-e4m3-channel": QuantSpec(
        name="fp8-e4m3-channel",
        format="float8_e4m3fn",
        bits=8,
        qmin=-448,
        qmax=448,
        group_size=-1,
        scale_dtype="float32",
        packing="none",
    ),
}


def get_preset(name: str) -> QuantSpec:
    """The preset called ``name``; a typo raises ``ValueError`` listing the valid names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(
            f"unknown quantization preset {name!r}; valid presets: {', '.join(sorted(PRESETS))}"
        ) from None


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


FIXED_PRESETS = {"w8a16": "int8-channel", "fp8": "fp8-e4m3-channel"}
"""Quantized rollout precisions whose preset is fixed (``w4a16`` takes ``rollout.quant_preset``)."""


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

"""Named QuantSpec presets and the registry that selects one by name (``get_preset``).

Choices (all computed in float32, see ``core.quant.quantizer``):
- ``int4-g32-sym``: the INT4 QAT seed. Per group of 32 along K, scale = amax / 7, codes in
  [-7, 7], round half to even, bf16 scales, compressed-tensors ``pack-quantized`` storage.
- ``int4-g32-torchao``: torchao's int4 weight fake quantizer (``IntxFakeQuantizeConfig(torch.int4,
  group_size=32)``, the 8da4w QAT weight path) and compressed-tensors' symmetric default: codes in
  the full signed range [-8, 7], scale = amax / ((7 - -8) / 2) = amax / 7.5, zero point 0, so
  +amax lands on 7.5 and is clipped to 7 while -amax reaches -7.5 -> -8 (half-even). "Asymmetric-
  compatible" means the code range is the asymmetric [-8, 7] and packs with the same +8 offset as an
  asymmetric checkpoint. Departure: torchao keeps fp32 scales for QAT; we store bf16 scales so the
  packed W4A16 weight stays within 0.30x of bf16 (fp32 scales would cost 0.3125x at g32).
- ``int4-g32-asym``: min-max asymmetric int4, codes [-8, 7] with an int zero point per group
  (the compressed-tensors asymmetric layout: ``weight_zero_point`` packed along N).
- ``int4-channel-sym``: the seed's symmetric int4 codes with one bf16 scale per output channel
  (no groups along K): the coarse int4 of early W4A16 deployments, ~4x the g32 error here.
- ``int8-channel``: W8A16, per output channel, codes [-127, 127], scale = amax / 127, fp32 scales.
- ``fp8-e4m3-channel``: per output channel, scale = amax / 448, codes = float8_e4m3fn(x / scale)
  (round to nearest even), fp32 scales, dequantized to bf16 for the matmul.
"""

from __future__ import annotations

from core.quant.spec import QuantSpec

PRESETS: dict[str, QuantSpec] = {
    "int4-g32-sym": QuantSpec(name="int4-g32-sym", bits=4, qmin=-7, qmax=7, group_size=32),
    "int4-g32-torchao": QuantSpec(name="int4-g32-torchao", bits=4, qmin=-8, qmax=7, group_size=32),
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

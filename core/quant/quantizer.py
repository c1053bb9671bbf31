"""The one weight quantizer: ``quantize(weight, spec)`` and ``dequantize(qt)``.

Design (shared by QAT fake quant, offline quantization at weight sync, and rollout loading):
- Input ``weight`` [N, K] (out_features, in_features), any float dtype; math runs in float32
  (exact for bf16/fp16 inputs; float64 inputs are first rounded to float32).
- Groups: ``group_size`` consecutive elements along K share one scale (-1 = the whole row).
  ``scales`` [N, G] with G = K / group_size (or 1), stored in ``spec.scale_dtype``; the codes are
  computed against the *stored* scale, so ``dequantize`` reproduces exactly what was quantized.
- Symmetric (``max_abs``): s = max(amax / ((qmax - qmin) / 2), eps); q = clamp(round(x / s), qmin, qmax).
  ``spec.reciprocal``: the codes use x * (1 / s) in place of x / s (torchao's form; its zero
  point still divides).
- Asymmetric (``min_max``): lo = min(x, 0), hi = max(x, 0), s = max((hi - lo) / (qmax - qmin), eps),
  z = clamp(qmin - round(lo / s), qmin, qmax); q = clamp(round(x / s) + z, qmin, qmax).
- fp8 e4m3: s = max(amax / 448, eps); q = float8_e4m3fn(clamp(x / s, -448, 448)) (nearest even).
- Rounding: ``half_even`` = torch.round; ``half_away`` = ties away from zero, computed exactly
  from trunc/frac (no ``floor(x + 0.5)``, which misrounds 0.49999997 in float32).
- Dequantize: ((q - z) * s) in float32, then one cast to the requested dtype.
Left out: float zero-point domain (torchao tinygemm), per-tensor scales, activation quantization.
Non-finite weights give unspecified codes (no check: it would cost a device sync per forward).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.quant.spec import FP8_E4M3_MAX, QuantSpec


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """Unpacked (canonical) result of ``quantize``; packing is a storage concern elsewhere.

    Compare two of them through ``core.quant.qparams`` hashes, not ``==``."""

    codes: torch.Tensor
    """[N, K] int8 (int formats) or float8_e4m3fn codes, row-major, never padded."""
    scales: torch.Tensor
    """[N, G] scales in ``spec.scale_dtype`` (G = K / group_size, or 1 per channel)."""
    zeros: torch.Tensor | None
    """[N, G] int8 zero points (asymmetric specs), else None."""
    spec: QuantSpec
    """The spec that produced the codes."""
    shape: tuple[int, int]
    """Original weight shape (N, K)."""


def round_half_away(x: torch.Tensor) -> torch.Tensor:
    """Round to nearest, ties away from zero; exact for every float32 ``x`` (any shape)."""
    t = torch.trunc(x)
    return t + torch.where((x - t).abs() >= 0.5, torch.sign(x), torch.zeros_like(x))


def _round(x: torch.Tensor, rounding: str) -> torch.Tensor:
    return torch.round(x) if rounding == "half_even" else round_half_away(x)


def quantize(weight: torch.Tensor, spec: QuantSpec) -> QuantizedTensor:
    """Quantize ``weight`` [N, K] with ``spec``; no autograd graph is recorded.

    Raises ``ValueError`` for a non-2-D or non-float weight, or a group size not dividing K.
    """
    n, k = spec.check_weight_shape(weight.shape)
    if not weight.is_floating_point():
        raise ValueError(f"quantize expects a float weight, got dtype {weight.dtype}")
    g = spec.num_groups(k)
    with torch.no_grad():
        x = weight.detach().to(torch.float32).reshape(n, g, k // g)  # [N, G, S]
        zeros = None
        if spec.symmetric:
            amax = x.abs().amax(dim=-1)  # [N, G]
            scale = (amax / ((spec.qmax - spec.qmin) / 2)).clamp(min=spec.eps)
        else:
            lo = x.amin(dim=-1).clamp(max=0.0)  # [N, G]
            hi = x.amax(dim=-1).clamp(min=0.0)  # [N, G]
            scale = ((hi - lo) / (spec.qmax - spec.qmin)).clamp(min=spec.eps)
        scales = scale.to(spec.torch_scale_dtype)  # [N, G] stored
        s = scales.to(torch.float32).unsqueeze(-1)  # [N, G, 1] the stored value, as used
        if spec.is_fp8:
            codes = (x / s).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        else:
            scaled = x * (1.0 / s) if spec.reciprocal else x / s  # [N, G, S]
            q = _round(scaled, spec.rounding)  # [N, G, S]
            if not spec.symmetric:
                z = (spec.qmin - _round(lo / s.squeeze(-1), spec.rounding)).clamp(
                    spec.qmin, spec.qmax
                )  # [N, G]
                q = q + z.unsqueeze(-1)
                zeros = z.to(torch.int8)
            codes = q.clamp(spec.qmin, spec.qmax).to(torch.int8)
    return QuantizedTensor(codes.reshape(n, k), scales, zeros, spec, (n, k))


def dequantize(qt: QuantizedTensor, *, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Float weight [N, K] in ``dtype``: ((codes - zeros) * scales) in float32, cast once."""
    n, k = qt.shape
    g = qt.scales.shape[-1]
    q = qt.codes.to(torch.float32).reshape(n, g, k // g)  # [N, G, S]
    if qt.zeros is not None:
        q = q - qt.zeros.to(torch.float32).unsqueeze(-1)
    w = q * qt.scales.to(torch.float32).unsqueeze(-1)  # [N, G, S]
    return w.reshape(n, k).to(dtype)


def quant_error(weight: torch.Tensor, qt: QuantizedTensor) -> torch.Tensor:
    """0-d float32 tensor: max |weight - dequantize(qt)| over ``weight`` [N, K] (no sync)."""
    with torch.no_grad():
        return (
            (weight.detach().to(torch.float32) - dequantize(qt, dtype=torch.float32)).abs().amax()
        )

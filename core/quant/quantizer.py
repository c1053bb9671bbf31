"""The one weight quantizer: its spec, quantize / dequantize, and the QAT fake quant.

QuantSpec: the one description of a weight quantizer, shared by QAT, weight sync and rollout.

Every field that changes a single output bit is a field here, so two sides that agree on the
spec (and on the input bits) produce the same codes. Validation raises ``ValueError`` naming the
field and its allowed values; shape-dependent checks live in ``check_weight_shape``.

The one weight quantizer: ``quantize(weight, spec)`` and ``dequantize(qt)``.

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

QAT fake quantization: ``dequantize(quantize(w))`` in w's dtype, straight-through backward.

The forward is literally the offline quantizer followed by the dequantizer, so the weight the
trainer sees is bit-identical to what the rollout engine reconstructs from the synced codes (in
the same dtype). Backward is the plain STE (d round / dx = 1): the upstream gradient passes
unchanged, including for clipped elements (no clipping mask, as in the INT4 QAT seed).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

FORMATS = ("int", "float8_e4m3fn")
SCALE_RULES = ("max_abs", "min_max")
SCALE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ROUNDINGS = ("half_even", "half_away")
ZERO_POINT_DOMAINS = ("none", "int")
PACKINGS = ("pack-quantized", "none")
FP8_E4M3_MAX = 448.0  # largest finite float8_e4m3fn value


@dataclass(frozen=True)
class QuantSpec:
    """How a weight ``[N, K]`` (out_features, in_features) becomes codes and scales."""

    name: str
    """Preset name, carried into telemetry (``spec_name``); ``custom`` for hand-built specs."""
    format: str = "int"
    """Code format: ``int`` (signed integer codes stored as int8) or ``float8_e4m3fn``."""
    bits: int = 4
    """Code width: 4 or 8 for ``int``; 8 for ``float8_e4m3fn``."""
    qmin: int = -7
    """Smallest code. ``int``: in [-2^(bits-1), -1]; fp8: -448."""
    qmax: int = 7
    """Largest code. ``int``: in [1, 2^(bits-1) - 1]; fp8: 448."""
    group_size: int = 32
    """Elements of the input dim K sharing one scale; -1 = one scale per output channel (row)."""
    symmetric: bool = True
    """True: zero maps to code 0 and there is no zero point. False: integer zero point per group."""
    scale_rule: str = "max_abs"
    """``max_abs`` (symmetric): scale = amax / ((qmax - qmin) / 2).
    ``min_max`` (asymmetric): scale = (max(x, 0) - min(x, 0)) / (qmax - qmin)."""
    scale_dtype: str = "bfloat16"
    """Storage dtype of the scales: float32, bfloat16 or float16. Codes use the stored scale."""
    eps: float = 1.1920928955078125e-07
    """Lower clamp of the scale (all-zero groups get codes 0); float32 machine epsilon by default."""
    rounding: str = "half_even"
    """``half_even`` (torch.round, ties to even) or ``half_away`` (ties away from zero)."""
    zero_point_domain: str = "none"
    """``none`` (symmetric) or ``int`` (asymmetric: x ~ (q - z) * s with z an int code)."""
    packing: str = "pack-quantized"
    """``pack-quantized``: eight int4 codes per int32 (compressed-tensors); ``none``: codes as is."""
    reciprocal: bool = False
    """Codes from ``x * (1 / s)`` (torchao's ``_quantize_affine``) instead of ``x / s``. The two
    differ by one ulp on some inputs; where ``x / s`` is a rounding tie (a group's -amax lands on
    exactly -7.5 with codes [-8, 7]) that ulp moves the code a full step. int formats only."""

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def torch_scale_dtype(self) -> torch.dtype:
        """The scale dtype as a ``torch.dtype``."""
        return SCALE_DTYPES[self.scale_dtype]

    @property
    def is_fp8(self) -> bool:
        return self.format == "float8_e4m3fn"

    @property
    def code_dtype(self) -> torch.dtype:
        """Dtype of unpacked codes: int8 for ``int``, float8_e4m3fn for fp8."""
        return torch.float8_e4m3fn if self.is_fp8 else torch.int8

    def num_groups(self, in_features: int) -> int:
        """Scales per row for a weight with ``in_features`` columns."""
        return 1 if self.group_size == -1 else in_features // self.group_size

    def check_weight_shape(self, shape: tuple[int, ...] | torch.Size) -> tuple[int, int]:
        """Return ``(N, K)`` or raise ``ValueError`` if this spec cannot quantize ``shape``."""
        if len(shape) != 2:
            raise ValueError(
                f"weight must be 2-D [out_features, in_features], got shape {tuple(shape)}"
            )
        n, k = int(shape[0]), int(shape[1])
        if n < 1 or k < 1:
            raise ValueError(f"weight shape must be positive, got {(n, k)}")
        if self.group_size != -1 and k % self.group_size != 0:
            raise ValueError(
                f"group_size={self.group_size} must divide in_features={k} "
                f"(spec {self.name!r}; use group_size=-1 for per-channel scales)"
            )
        return n, k

    def replace(self, **changes: object) -> QuantSpec:
        """A copy with ``changes`` applied (validated); unknown field names raise ``ValueError``."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            fields = ", ".join(f.name for f in dataclasses.fields(self))
            raise ValueError(f"unknown QuantSpec field(s) {unknown}; valid fields: {fields}")
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, object]:
        """Plain-dict form (JSON-serializable), the inverse of ``QuantSpec(**d)``."""
        return dataclasses.asdict(self)


def _choice(field: str, value: object, allowed: tuple[object, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"QuantSpec.{field}={value!r} is not allowed; choose one of {allowed}")


def _validate(s: QuantSpec) -> None:
    if not isinstance(s.name, str) or not s.name:
        raise ValueError(f"QuantSpec.name must be a non-empty string, got {s.name!r}")
    _choice("format", s.format, FORMATS)
    _choice("scale_rule", s.scale_rule, SCALE_RULES)
    _choice("scale_dtype", s.scale_dtype, tuple(SCALE_DTYPES))
    _choice("rounding", s.rounding, ROUNDINGS)
    _choice("zero_point_domain", s.zero_point_domain, ZERO_POINT_DOMAINS)
    _choice("packing", s.packing, PACKINGS)
    _choice("symmetric", s.symmetric, (True, False))
    _choice("reciprocal", s.reciprocal, (True, False))
    if isinstance(s.bits, bool) or not isinstance(s.bits, int):
        raise ValueError(f"QuantSpec.bits must be an int in (4, 8), got {s.bits!r}")
    if not isinstance(s.group_size, int) or not (s.group_size == -1 or s.group_size >= 1):
        raise ValueError(
            f"QuantSpec.group_size must be -1 (per channel) or >= 1, got {s.group_size!r}"
        )
    if not (isinstance(s.eps, float | int) and math.isfinite(s.eps) and s.eps > 0):
        raise ValueError(f"QuantSpec.eps must be a finite float > 0, got {s.eps!r}")
    if float(torch.tensor(float(s.eps), dtype=s.torch_scale_dtype)) <= 0:
        raise ValueError(f"QuantSpec.eps={s.eps} underflows to 0 in scale_dtype={s.scale_dtype}")
    if s.format == "int":
        _choice("bits", s.bits, (4, 8))
        lo, hi = -(1 << (s.bits - 1)), (1 << (s.bits - 1)) - 1
        if not isinstance(s.qmin, int) or not lo <= s.qmin <= -1:
            raise ValueError(
                f"QuantSpec.qmin={s.qmin!r} must be an int in [{lo}, -1] for int{s.bits}"
            )
        if not isinstance(s.qmax, int) or not 1 <= s.qmax <= hi:
            raise ValueError(
                f"QuantSpec.qmax={s.qmax!r} must be an int in [1, {hi}] for int{s.bits}"
            )
    else:
        _choice("bits", s.bits, (8,))
        if (s.qmin, s.qmax) != (-int(FP8_E4M3_MAX), int(FP8_E4M3_MAX)):
            raise ValueError(
                f"QuantSpec.qmin/qmax=({s.qmin}, {s.qmax}) must be (-448, 448) for float8_e4m3fn"
            )
        _choice("rounding", s.rounding, ("half_even",))  # the fp8 cast rounds to nearest even
        _choice("symmetric", s.symmetric, (True,))
        _choice("packing", s.packing, ("none",))
        _choice("reciprocal", s.reciprocal, (False,))
    if s.symmetric:
        _choice("scale_rule", s.scale_rule, ("max_abs",))
        _choice("zero_point_domain", s.zero_point_domain, ("none",))
        if s.format == "int" and s.qmin not in (-s.qmax, -s.qmax - 1):
            raise ValueError(
                f"QuantSpec.qmin={s.qmin} must be -qmax or -qmax-1 (qmax={s.qmax}) when symmetric"
            )
    else:
        _choice("scale_rule", s.scale_rule, ("min_max",))
        _choice("zero_point_domain", s.zero_point_domain, ("int",))
    if s.packing == "pack-quantized" and s.bits != 4:
        raise ValueError(
            f"QuantSpec.packing='pack-quantized' needs int4 codes (bits=4), got bits={s.bits}; "
            "use packing='none'"
        )


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """Unpacked (canonical) result of ``quantize``; packing is a storage concern elsewhere.

    Compare two of them through ``core.quant.wiring`` hashes, not ``==``."""

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


class _FakeQuantSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
        return dequantize(quantize(weight, spec), dtype=weight.dtype)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad_output, None


def fake_quant(weight: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Fake-quantized copy of ``weight`` [N, K] (same dtype and shape) with an STE gradient."""
    return _FakeQuantSTE.apply(weight, spec)

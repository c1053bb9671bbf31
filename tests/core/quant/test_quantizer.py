"""quantize / dequantize / fake_quant: hand-derived goldens per preset, a naive-loop reference,
rounding modes, determinism, bit-identity of fake and real quantization, and the STE gradient."""

import math

import pytest
import torch

from core.quant.presets import PRESETS, get_preset
from core.quant.quantizer import dequantize, fake_quant, quant_error, quantize, round_half_away


def _pad(values, k=32, fill=0.0):
    """``values`` followed by ``fill`` up to length ``k`` (one group of 32 by default)."""
    return [float(v) for v in values] + [float(fill)] * (k - len(values))


def _check(spec_name, rows, codes, scales, deq, *, zeros=None, **changes):
    """Quantize ``rows`` and compare codes, scales, zeros and dequantized values exactly."""
    spec = get_preset(spec_name).replace(**changes) if changes else get_preset(spec_name)
    qt = quantize(torch.tensor(rows, dtype=torch.float32), spec)
    assert qt.codes.to(torch.float32).tolist() == codes
    assert qt.scales.dtype == spec.torch_scale_dtype
    assert qt.scales.to(torch.float32).tolist() == scales
    assert (qt.zeros is None) if zeros is None else qt.zeros.tolist() == zeros
    assert dequantize(qt, dtype=torch.float32).tolist() == deq


def test_golden_int4_g32_sym():
    # Group 0: amax = 7 -> s = 7 / ((7 - -7) / 2) = 1; q = round_half_even(x):
    #   7 -> 7, -3.5 -> -4, 2.5 -> 2, 1.4 -> 1, 0.5 -> 0, -0.5 -> 0, 1.5 -> 2.
    # Group 1: amax = 14 -> s = 2; x / s = 7, 1.5, 2.5, -4.5 -> 7, 2, 2, -4 -> deq 14, 4, 4, -8.
    # Scales 1 and 2 are exact in bf16.
    _check(
        "int4-g32-sym",
        rows=[_pad([7.0, -3.5, 2.5, 1.4, 0.5, -0.5, 1.5]) + _pad([14.0, 3.0, 5.0, -9.0])],
        codes=[_pad([7, -4, 2, 1, 0, 0, 2]) + _pad([7, 2, 2, -4])],
        scales=[[1.0, 2.0]],
        deq=[_pad([7, -4, 2, 1, 0, 0, 2]) + _pad([14, 4, 4, -8])],
    )


def test_golden_int4_g32_half_away():
    # Same group 0 with ties away from zero: 2.5 -> 3, -3.5 -> -4, 0.5 -> 1, -0.5 -> -1,
    # 1.5 -> 2; non-ties unchanged (1.4 -> 1). s = 1, so deq = q.
    _check(
        "int4-g32-sym",
        rows=[_pad([7.0, -3.5, 2.5, 1.4, 0.5, -0.5, 1.5])],
        codes=[_pad([7, -4, 3, 1, 1, -1, 2])],
        scales=[[1.0]],
        deq=[_pad([7, -4, 3, 1, 1, -1, 2])],
        rounding="half_away",
    )


def test_golden_int4_g32_torchao():
    # Row 0: amax = 7.5 -> s = 7.5 / ((7 - -8) / 2) = 1; x / s: 7.5 -> 8 (half even) -> clipped
    #   to 7, -7.5 -> -8, 2.5 -> 2, -0.5 -> 0, 3.2 -> 3.
    # Row 1: amax = 15 -> s = 2; x / s = -7.5 -> -8, 7.5 -> 8 -> 7, 2.5 -> 2, 3.5 -> 4;
    #   deq = 2q = -16, 14, 4, 8 (+amax loses one step, -amax overshoots by half a step).
    _check(
        "int4-g32-torchao",
        rows=[_pad([7.5, -7.5, 2.5, -0.5, 3.2]), _pad([-15.0, 15.0, 5.0, 7.0])],
        codes=[_pad([7, -8, 2, 0, 3]), _pad([-8, 7, 2, 4])],
        scales=[[1.0], [2.0]],
        deq=[_pad([7, -8, 2, 0, 3]), _pad([-16, 14, 4, 8])],
    )


def test_golden_int4_g32_asym():
    # Row 0: lo = -2, hi = 13 -> s = (13 - -2) / (7 - -8) = 1; z = -8 - round(-2 / 1) = -6;
    #   q = round(x) + z: -2 -> -8, 13 -> 7, 0 -> -6, 4.5 -> 4 - 6 = -2, 5.5 -> 6 - 6 = 0;
    #   deq = (q - z) * s = -2, 13, 0, 4, 6; the padding zeros get code z = -6.
    # Row 1 (all >= 0): lo = min(x, 0) = 0, hi = 30 -> s = 2, z = -8 - round(0) = -8;
    #   x / s = 15, 1.5, 2.5 -> 15, 2, 2 -> q = 7, -6, -6; deq 30, 4, 4; zeros -> code -8.
    _check(
        "int4-g32-asym",
        rows=[_pad([-2.0, 13.0, 0.0, 4.5, 5.5]), _pad([30.0, 3.0, 5.0])],
        codes=[_pad([-8, 7, -6, -2, 0], fill=-6), _pad([7, -6, -6], fill=-8)],
        scales=[[1.0], [2.0]],
        deq=[_pad([-2, 13, 0, 4, 6]), _pad([30, 4, 4])],
        zeros=[[-6], [-8]],
    )


def test_golden_int8_channel():
    # Row 0: amax = 127 -> s = 127 / ((127 - -127) / 2) = 1: 127, -0.5 -> 0, 1.5 -> 2,
    #   63.5 -> 64 (half even), -127.  Row 1: amax = 254 -> s = 2: 254 -> 127, 3 -> 1.5 -> 2,
    #   -5 -> -2.5 -> -2. Per channel: one fp32 scale per row, K = 5 (no group constraint).
    _check(
        "int8-channel",
        rows=[[127.0, -0.5, 1.5, 63.5, -127.0], [254.0, 3.0, -5.0, 0.0, 0.0]],
        codes=[[127, 0, 2, 64, -127], [127, 2, -2, 0, 0]],
        scales=[[1.0], [2.0]],
        deq=[[127, 0, 2, 64, -127], [254, 4, -4, 0, 0]],
    )


def test_golden_fp8_e4m3_channel():
    # Row 0: amax = 448 -> s = 448 / 448 = 1. e4m3 has 3 mantissa bits:
    #   17 lies halfway between 16 and 18 (spacing 2 in [16, 32)) -> 16 (even mantissa);
    #   -0.3: spacing 1/32 in [0.25, 0.5), 0.3 * 32 = 9.6 -> 10/32 = 0.3125;
    #   300: spacing 32 in [256, 512), 300 / 32 = 9.375 -> 288.
    # Row 1: amax = 896 -> s = 2; 34 / 2 = 17 -> 16 -> dequant 32; 896 -> 448 -> 896.
    spec = get_preset("fp8-e4m3-channel")
    w = torch.tensor([[448.0, 17.0, -0.3, 300.0], [896.0, 34.0, 0.0, 0.0]])
    qt = quantize(w, spec)
    assert qt.codes.dtype == torch.float8_e4m3fn and qt.zeros is None
    assert qt.codes.to(torch.float32).tolist() == [[448, 16, -0.3125, 288], [448, 16, 0, 0]]
    assert qt.scales.tolist() == [[1.0], [2.0]]
    assert dequantize(qt, dtype=torch.float32).tolist() == [
        [448, 16, -0.3125, 288],
        [896, 32, 0, 0],
    ]


def test_all_zero_group_uses_eps_and_zero_codes():
    # amax = 0 -> s = max(0, eps) = eps; every code is 0 and the dequantized group is exactly 0.
    spec = get_preset("int4-g32-sym")
    qt = quantize(torch.zeros(2, 64), spec)
    assert torch.equal(qt.codes, torch.zeros(2, 64, dtype=torch.int8))
    assert float(qt.scales.float().min()) > 0
    assert torch.equal(dequantize(qt, dtype=torch.float32), torch.zeros(2, 64))


def test_round_half_away_is_exact_near_half():
    # floor(|x| + 0.5) would give 1 for the float32 just below 0.5 (0.5 - 2^-25 + 0.5 rounds to 1).
    below_half = torch.nextafter(torch.tensor(0.5), torch.tensor(0.0))
    x = torch.stack(
        [below_half, -below_half, torch.tensor(0.5), torch.tensor(-2.5), torch.tensor(3.49)]
    )
    assert round_half_away(x).tolist() == [0.0, 0.0, 1.0, -3.0, 3.0]


def _naive_round(v, rounding):
    """Python-float rounding: ``round`` is half-to-even; half-away via floor in float64 (exact
    for float32 inputs)."""
    return round(v) if rounding == "half_even" else int(math.copysign(math.floor(abs(v) + 0.5), v))


def _naive_quantize(w, spec):
    """Per-group, per-element loop in Python scalars (float32 ops via 0-d tensors)."""
    n, k = w.shape
    gs = k if spec.group_size == -1 else spec.group_size
    sdt = spec.torch_scale_dtype
    codes, scales, zeros = torch.zeros(n, k, dtype=torch.int8), [], []
    for r in range(n):
        srow, zrow = [], []
        for g0 in range(0, k, gs):
            grp = w[r, g0 : g0 + gs]
            if spec.symmetric:
                s = torch.clamp(grp.abs().max() / ((spec.qmax - spec.qmin) / 2), min=spec.eps)
            else:
                lo, hi = min(float(grp.min()), 0.0), max(float(grp.max()), 0.0)
                s = torch.clamp(torch.tensor(hi - lo) / (spec.qmax - spec.qmin), min=spec.eps)
            s = s.to(sdt).to(torch.float32)

            def rnd(v):
                return _naive_round(v, spec.rounding)

            z = 0
            if not spec.symmetric:
                z = min(max(spec.qmin - rnd(float(torch.tensor(lo) / s)), spec.qmin), spec.qmax)
            for j in range(gs):
                v = float(grp[j] * (1.0 / s) if spec.reciprocal else grp[j] / s)
                codes[r, g0 + j] = min(max(rnd(v) + z, spec.qmin), spec.qmax)
            srow.append(float(s))
            zrow.append(z)
        scales.append(srow)
        zeros.append(zrow)
    return codes, torch.tensor(scales), torch.tensor(zeros, dtype=torch.int8)


@pytest.mark.parametrize(
    "name", ["int4-g32-sym", "int4-g32-torchao", "int4-g32-asym", "int8-channel"]
)
@pytest.mark.parametrize("rounding", ["half_even", "half_away"])
def test_vectorized_matches_naive_loop(name, rounding):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(3, 64, generator=gen)
    w[0, :32] = torch.randint(-14, 15, (32,), generator=gen) / 2.0  # ties at s = 1 ...
    w[0, 0] = 7.0  # ... because amax = 7
    spec = get_preset(name).replace(rounding=rounding)
    qt = quantize(w, spec)
    codes, scales, zeros = _naive_quantize(w, spec)
    assert torch.equal(qt.codes, codes)
    assert torch.equal(qt.scales.to(torch.float32), scales)
    if not spec.symmetric:
        assert torch.equal(qt.zeros, zeros)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_deterministic_and_row_shard_invariant(name):
    # Same input -> same bits; rows are independent, so a column-parallel shard quantizes alike.
    spec = get_preset(name)
    w = torch.randn(8, 64, generator=torch.Generator().manual_seed(1), dtype=torch.bfloat16)
    a, b, shard = quantize(w, spec), quantize(w.clone(), spec), quantize(w[4:], spec)
    assert torch.equal(a.codes.view(torch.int8), b.codes.view(torch.int8))
    assert torch.equal(a.codes[4:].view(torch.int8), shard.codes.view(torch.int8))
    assert torch.equal(a.scales[4:], shard.scales)


def _bits(t):
    """The raw bits of a float tensor as a same-width integer tensor (so -0.0 != 0.0)."""
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fake_quant_equals_dequantize_of_real_quantize_bitwise(name, dtype):
    spec = get_preset(name)
    w = torch.randn(16, 96, generator=torch.Generator().manual_seed(2)).to(dtype)
    fq = fake_quant(w, spec)
    real = dequantize(quantize(w, spec), dtype=dtype)
    assert fq.dtype == dtype and fq.shape == w.shape
    assert torch.equal(_bits(fq), _bits(real))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_quant_error_bounded_by_half_step(name):
    # Symmetric int: |w - deq| <= s / 2 except where clipping at qmax (torchao: +amax -> 7 of 7.5,
    # an error of s / 2 as well). Asym: same. fp8: relative error <= 2^-4 of |x| (+ subnormals).
    spec = get_preset(name)
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(3))
    qt = quantize(w, spec)
    err = quant_error(w, qt)
    assert err.dim() == 0
    step = qt.scales.to(torch.float32).max()
    bound = step * (448 / 16 if spec.is_fp8 else 0.5)
    assert float(err) <= float(bound) * (1 + 1e-6)


@pytest.mark.parametrize("name", ["int4-g32-sym", "fp8-e4m3-channel"])
def test_ste_gradient_equals_upstream_gradient(name):
    spec = get_preset(name)
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(8, 64, generator=gen, requires_grad=True)
    upstream = torch.randn(8, 64, generator=gen)
    fake_quant(w, spec).backward(upstream)
    assert torch.equal(w.grad, upstream)
    # Through a matmul: d loss / d w equals d loss / d w_q of the quantized weight used as a leaf.
    x = torch.randn(5, 64, generator=gen)
    w.grad = None
    (x @ fake_quant(w, spec).t()).square().sum().backward()
    wq = dequantize(quantize(w, spec), dtype=torch.float32).requires_grad_()
    (x @ wq.t()).square().sum().backward()
    assert torch.equal(w.grad, wq.grad)

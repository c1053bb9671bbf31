"""Rollout weight-only matmul (W4A16 / W8A16 / FP8): accuracy vs the dequantized reference,
bit-identity with the QAT forward weight, and the stored-bytes budget."""

import pytest
import torch

from core.quant.presets import PRESETS, get_preset
from core.quant.quantizer import fake_quant, quantize
from core.quant.storage import QuantizedLinearWeight

K = 256


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_matmul_matches_dequantized_reference(name):
    # Reference: float64 matmul of the same bf16 activations and bf16 dequantized weight.
    # Tolerance: one bf16 rounding of the output (unit roundoff 2^-8, relative) plus fp32
    # accumulation over K terms (K * 2^-24 = 2^-16 of sum |x||w|).
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, K, generator=gen) * 0.05
    x = torch.randn(2, 5, K, generator=gen)
    bias = torch.randn(64, generator=gen)
    qw = QuantizedLinearWeight.from_float(w, get_preset(name), name="fc1")
    y = qw.linear(x, bias)
    assert y.shape == (2, 5, 64) and y.dtype == torch.bfloat16
    wd = qw.dequantize(torch.bfloat16).double()  # [N, K]
    xb = x.to(torch.bfloat16).double()  # [2, 5, K]
    ref = xb @ wd.t() + bias.to(torch.bfloat16).double()
    slack = (xb.abs() @ wd.abs().t() + bias.to(torch.bfloat16).double().abs()) * K * 2.0**-24
    err = (y.double() - ref).abs()
    assert bool((err <= 2.0**-8 * ref.abs() + slack).all()), float((err / ref.abs()).max())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_rollout_weight_equals_qat_forward_weight_in_bf16(name):
    # The trainer (bf16 params) computes fake_quant(w); the rollout unpacks the synced codes.
    spec = get_preset(name)
    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(1), dtype=torch.bfloat16)
    rollout_w = QuantizedLinearWeight.from_quantized(quantize(w, spec)).dequantize(torch.bfloat16)
    assert torch.equal(rollout_w.view(torch.int16), fake_quant(w, spec).view(torch.int16))


def test_to_quantized_is_exact():
    spec = get_preset("int4-g32-asym")
    qt = quantize(torch.randn(9, 64, generator=torch.Generator().manual_seed(2)), spec)
    back = QuantizedLinearWeight.from_quantized(qt).to_quantized()
    assert torch.equal(back.codes, qt.codes) and torch.equal(back.scales, qt.scales)
    assert torch.equal(back.zeros, qt.zeros)


@pytest.mark.parametrize(
    ("name", "expected_ratio"),
    [
        # int4 g32, bf16 scales: 4 bits + 16 / 32 bits per weight = 4.5 / 16 = 0.28125 of bf16.
        ("int4-g32-sym", 0.28125),
        # torchao's fp32 scales: 4 + 32 / 32 bits per weight = 5 / 16.
        ("int4-g32-torchao", 0.3125),
        # + int4 zero point per group of 32 (packed along N): + 4 / 32 bits -> 4.625 / 16.
        ("int4-g32-asym", 0.2890625),
        # int8 per channel, fp32 scale per row of K = 512: 8 / 16 + 32 / (512 * 16).
        ("int8-channel", 0.5 + 32 / (512 * 16)),
        ("fp8-e4m3-channel", 0.5 + 32 / (512 * 16)),
    ],
)
def test_stored_bytes_vs_bf16(name, expected_ratio):
    n, k = 256, 512
    qw = QuantizedLinearWeight.from_float(torch.randn(n, k), get_preset(name))
    bf16_bytes = n * k * 2
    shape_bytes = 16  # weight_shape: two int64
    assert (qw.nbytes - shape_bytes) / bf16_bytes == pytest.approx(expected_ratio, abs=0)
    if name.startswith("int4") and get_preset(name).scale_dtype == "bfloat16":
        assert qw.nbytes <= 0.30 * bf16_bytes


def test_linear_rejects_wrong_input_width():
    qw = QuantizedLinearWeight.from_float(
        torch.randn(8, 64), get_preset("int4-g32-sym"), name="proj"
    )
    with pytest.raises(ValueError, match="proj: input has 32 features, weight expects 64"):
        qw.linear(torch.randn(3, 32))

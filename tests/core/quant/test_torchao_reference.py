"""The ``int4-g32-torchao`` preset against torchao itself: bit-identical fake quantization.

torchao 0.18's ``IntxFakeQuantizer(IntxFakeQuantizeConfig(torch.int4, group_size=32))`` on fp32
weights of several shapes and scales (including all-zero groups and groups near the eps clamp)
equals our QAT fake quant (quantize -> dequantize) bit for bit, compared as int32 bit patterns.
The cause of the former disagreement is pinned too: with x / s instead of torchao's x * (1 / s)
the differing elements are exactly group extremes, a full quantization step apart.
"""

from __future__ import annotations

import pytest
import torch
from torchao.quantization.qat import IntxFakeQuantizeConfig, IntxFakeQuantizer

from core.quant.presets import get_preset
from core.quant.quantizer import dequantize, fake_quant, quantize

SPEC = get_preset("int4-g32-torchao")


def _torchao(w: torch.Tensor) -> torch.Tensor:
    return IntxFakeQuantizer(IntxFakeQuantizeConfig(torch.int4, group_size=32))(w)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


@pytest.mark.parametrize("shape", [(256, 1024), (64, 32), (7, 96), (33, 352), (128, 4096)])
@pytest.mark.parametrize("scale", [1.0, 0.02, 1e3])
def test_bit_identical_to_torchao_on_random_weights(shape, scale):
    w = torch.randn(shape, generator=torch.Generator().manual_seed(shape[0] * 7 + shape[1])) * scale
    assert torch.equal(_bits(fake_quant(w, SPEC)), _bits(_torchao(w)))


def test_bit_identical_on_degenerate_groups():
    g = torch.Generator().manual_seed(11)
    w = torch.randn(6, 128, generator=g)
    w[0] = 0.0  # all-zero groups: scale = eps = 2^-126, codes 0
    w[1, :32] = 0.0
    w[2] *= 1e-37  # amax / 7.5 below the smallest normal: the eps clamp decides the scale
    w[3, :64] = torch.randint(-15, 16, (64,), generator=g) / 2.0  # exact half-steps (ties)
    w[4] *= 1e30
    w[5, 32:64] = -2.5  # a constant group: every element at the extreme
    assert torch.equal(_bits(fake_quant(w, SPEC)), _bits(_torchao(w)))


def test_division_instead_of_the_reciprocal_misses_rounding_ties():
    """x / s puts -amax on the tie -7.5 (-> -8); torchao's x * (1 / s) often lands one ulp above
    it (-> -7). Every element that differs is within one ulp of a rounding tie, one step (s) apart,
    and nearly all of them are their group's extreme (the rest are interior exact ties)."""
    w = torch.randn(256, 1024, generator=torch.Generator().manual_seed(0))
    qt = quantize(w, SPEC.replace(reciprocal=False))
    ours = dequantize(qt, dtype=torch.float32)
    diff = ours != _torchao(w)  # [N, K]
    assert 200 < int(diff.sum()) < 1500  # ~0.3% of the elements (725 here)
    s = qt.scales.repeat_interleave(32, dim=1)  # [N, K] fp32
    scaled = (w / s)[diff]
    to_tie = (scaled - scaled.floor() - 0.5).abs()  # 0 on a tie; |x / s| < 8: ulp <= 2^-20
    assert float(to_tie.max()) <= 2.0**-20
    gap = (ours - _torchao(w))[diff].abs()  # q * s - q' * s: each product rounded once
    torch.testing.assert_close(gap, s[diff], rtol=1e-6, atol=0)  # a step, not an ulp
    groups = w.reshape(256, 32, 32)
    amax = groups.abs().amax(dim=-1, keepdim=True).expand_as(groups).reshape(256, 1024)
    at_extreme = w[diff].abs() == amax[diff]
    assert int(at_extreme.sum()) >= 0.99 * int(diff.sum())  # 724 of 725 here

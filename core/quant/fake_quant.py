"""QAT fake quantization: ``dequantize(quantize(w))`` in w's dtype, straight-through backward.

The forward is literally the offline quantizer followed by the dequantizer, so the weight the
trainer sees is bit-identical to what the rollout engine reconstructs from the synced codes (in
the same dtype). Backward is the plain STE (d round / dx = 1): the upstream gradient passes
unchanged, including for clipped elements (no clipping mask, as in the INT4 QAT seed).
"""

from __future__ import annotations

import torch

from core.quant.quantizer import dequantize, quantize
from core.quant.spec import QuantSpec


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

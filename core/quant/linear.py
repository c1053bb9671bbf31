"""Weight-only quantized matmul for the rollout engine (W4A16, W8A16, FP8 weights; A16 = bf16).

Storage is the compressed-tensors entries themselves (``core.quant.serialization``): int4 codes
packed eight per int32, int8 or float8_e4m3fn codes unpacked, scales in the spec's dtype, int4 zero
points packed along N. ``linear`` unpacks with shifts and masks, dequantizes per group to bf16
with the same ``dequantize`` the trainer's fake quant uses (so the rollout weight equals the QAT
forward weight bit for bit in bf16) and runs a bf16 matmul. Simplification: the dequantized weight
is rebuilt on every call (no fused kernel), so only the *stored* bytes shrink, not peak memory.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from core.quant.quantizer import QuantizedTensor, dequantize, quantize
from core.quant.serialization import from_compressed, to_compressed
from core.quant.spec import QuantSpec


class QuantizedLinearWeight:
    """A packed quantized weight [N, K] with a bf16-activation ``linear``."""

    def __init__(self, name: str, entries: Mapping[str, torch.Tensor], *, spec: QuantSpec) -> None:
        self.name = name
        self.spec = spec
        self.entries = dict(entries)
        qt = from_compressed(name, self.entries, spec=spec)  # validates names, dtypes and shapes
        self.shape: tuple[int, int] = qt.shape

    @classmethod
    def from_quantized(cls, qt: QuantizedTensor, *, name: str = "linear") -> QuantizedLinearWeight:
        """Pack an existing ``QuantizedTensor`` (e.g. from the weight sync)."""
        return cls(name, to_compressed(name, qt), spec=qt.spec)

    @classmethod
    def from_float(
        cls, weight: torch.Tensor, spec: QuantSpec, *, name: str = "linear"
    ) -> QuantizedLinearWeight:
        """Quantize and pack a float weight [N, K]."""
        return cls.from_quantized(quantize(weight, spec), name=name)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored tensors (codes, scales, zero points, shape)."""
        return sum(t.numel() * t.element_size() for t in self.entries.values())

    def tensors(self) -> dict[str, torch.Tensor]:
        """The stored tensors by entry name (weight-sync checksums and byte counts)."""
        return dict(self.entries)

    def to(self, device: torch.device | str) -> QuantizedLinearWeight:
        """Move the stored tensors to ``device`` (in place) and return self."""
        self.entries = {k: v.to(device) for k, v in self.entries.items()}
        return self

    def to_quantized(self) -> QuantizedTensor:
        """The exact canonical codes/scales/zeros (unpacked), e.g. for ``rollout_load`` hashes."""
        return from_compressed(self.name, self.entries, spec=self.spec)

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The float weight [N, K] in ``dtype`` (bf16 for the A16 matmul)."""
        return dequantize(self.to_quantized(), dtype=dtype)

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` [..., K] -> [..., N] in bf16: bf16(x) @ dequantize(W, bf16).T (+ bias)."""
        if x.shape[-1] != self.shape[1]:
            raise ValueError(
                f"{self.name}: input has {x.shape[-1]} features, weight expects {self.shape[1]}"
            )
        w = self.dequantize(torch.bfloat16)  # [N, K]
        b = None if bias is None else bias.to(torch.bfloat16)
        return torch.nn.functional.linear(x.to(torch.bfloat16), w, b)

"""Packed quantized MoE expert weights for the rollout engine: E weights [N, K] behind ``[e]``.

Each expert is its own ``QuantizedLinearWeight`` (same spec, groups along K), which equals
quantizing the stacked [E * N, K] weight row by row. ``weights[e]`` returns expert e dequantized
to bf16, so the engine's expert loop (``x @ weights[e].t()``) runs W4A16 unchanged.
Simplification: the expert is dequantized on every call (no fused MoE kernel).
"""

from __future__ import annotations

import torch

from core.quant.linear import QuantizedLinearWeight
from core.quant.quantizer import QuantizedTensor, quantize
from core.quant.spec import QuantSpec


class QuantizedExpertWeights:
    """E packed quantized expert weights, shape [E, N, K]; ``[e]`` -> bf16 [N, K]."""

    def __init__(self, name: str, experts: list[QuantizedLinearWeight]) -> None:
        if not experts:
            raise ValueError(f"{name}: no experts")
        self.name = name
        self.experts = experts
        self.spec = experts[0].spec
        n, k = experts[0].shape
        self.shape: tuple[int, int, int] = (len(experts), n, k)

    @classmethod
    def from_quantized(
        cls, qt: QuantizedTensor, *, num_experts: int, name: str
    ) -> QuantizedExpertWeights:
        """Pack a stacked ``QuantizedTensor`` [E * N, K] (row-wise spec) as E experts [N, K]."""
        rows, k = qt.shape
        if rows % num_experts:
            raise ValueError(f"{name}: {rows} rows do not split into {num_experts} experts")
        n = rows // num_experts

        def part(t: torch.Tensor | None, e: int) -> torch.Tensor | None:
            return None if t is None else t[e * n : (e + 1) * n]

        return cls(
            name,
            [
                QuantizedLinearWeight.from_quantized(
                    QuantizedTensor(
                        part(qt.codes, e), part(qt.scales, e), part(qt.zeros, e), qt.spec, (n, k)
                    ),
                    name=f"{name}.{e}",
                )
                for e in range(num_experts)
            ],
        )

    @classmethod
    def from_float(
        cls, weight: torch.Tensor, spec: QuantSpec, *, name: str
    ) -> QuantizedExpertWeights:
        """Quantize and pack ``weight`` [E, N, K] (stacked rows, groups along K)."""
        if weight.dim() != 3:
            raise ValueError(f"{name}: expert weights must be [E, N, K], got {tuple(weight.shape)}")
        e, _, k = weight.shape
        return cls.from_quantized(quantize(weight.reshape(-1, k), spec), num_experts=e, name=name)

    def __len__(self) -> int:
        return len(self.experts)

    def __getitem__(self, e: int) -> torch.Tensor:
        """Expert ``e``'s weight [N, K] dequantized to bf16 (the A16 matmul operand)."""
        return self.experts[e].dequantize(torch.bfloat16)

    @property
    def nbytes(self) -> int:
        """Stored bytes of every expert (codes, scales, zero points, shapes)."""
        return sum(x.nbytes for x in self.experts)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every expert's stored tensors by entry name (weight-sync checksums)."""
        return {k: v for x in self.experts for k, v in x.tensors().items()}

    def to_quantized(self) -> QuantizedTensor:
        """The canonical codes/scales/zeros of the stacked weight [E * N, K] (telemetry hashes)."""
        parts = [x.to_quantized() for x in self.experts]
        e, n, k = self.shape
        zeros = None if parts[0].zeros is None else torch.cat([p.zeros for p in parts])
        return QuantizedTensor(
            torch.cat([p.codes for p in parts]),
            torch.cat([p.scales for p in parts]),
            zeros,
            self.spec,
            (e * n, k),
        )

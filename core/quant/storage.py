"""Quantized weights as the rollout engine stores them: packing, entries, linear and expert weights.

Int4 packing in the compressed-tensors ``pack-quantized`` layout (what SGLang and vLLM load).

Layout: signed codes c in [-8, 7] are offset to unsigned nibbles u = c + 8 in [0, 15]; each run of
eight consecutive columns becomes one int32 with element i at bits 4i..4i+3 (element 0 in the
lowest nibble). Rows whose length is not a multiple of 8 are padded at the end with nibble 0
(code -8, as compressed-tensors does) and cropped on unpack using the original column count.
Zero points of asymmetric specs are packed along dim 0 (N) the same way, by transposition.
Packing is exact: ``unpack_int4(pack_int4(c), cols=C) == c`` for every in-range code.

Quantized weights as compressed-tensors style entries and safetensors files.

Names per weight ``<name>``: ``<name>.weight_packed`` (int32 [N, ceil(K/8)], ``pack-quantized``
specs) or ``<name>.weight`` (int8 / float8_e4m3fn codes [N, K], ``packing='none'``, as in the
compressed-tensors int-/float-quantized formats), ``<name>.weight_scale`` ([N, G], scale dtype),
``<name>.weight_shape`` (int64 [2]) and, for asymmetric specs, ``<name>.weight_zero_point``
(int32 [ceil(N/8), G] packed along N, or int8 [N, G] unpacked). The spec of each weight travels in
the safetensors metadata as JSON under ``<name>.quant_spec``; there is no global ``config.json``.

Weight-only quantized matmul for the rollout engine (W4A16, W8A16, FP8 weights; A16 = bf16).

Storage is the compressed-tensors entries themselves (``core.quant.storage``): int4 codes
packed eight per int32, int8 or float8_e4m3fn codes unpacked, scales in the spec's dtype, int4 zero
points packed along N. ``linear`` unpacks with shifts and masks, dequantizes per group to bf16
with the same ``dequantize`` the trainer's fake quant uses (so the rollout weight equals the QAT
forward weight bit for bit in bf16) and runs a bf16 matmul. Simplification: the dequantized weight
is rebuilt on every call (no fused kernel), so only the *stored* bytes shrink, not peak memory.

Packed quantized MoE expert weights for the rollout engine: E weights [N, K] behind ``[e]``.

Each expert is its own ``QuantizedLinearWeight`` (same spec, groups along K), which equals
quantizing the stacked [E * N, K] weight row by row. ``weights[e]`` returns expert e dequantized
to bf16, so the engine's expert loop (``x @ weights[e].t()``) runs W4A16 unchanged.
Simplification: the expert is dequantized on every call (no fused MoE kernel).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from core.quant.quantizer import QuantizedTensor, QuantSpec, dequantize, quantize

PACK_FACTOR = 8  # int4 values per int32
_OFFSET = 8  # signed int4 -> unsigned nibble


def packed_cols(cols: int) -> int:
    """Number of int32 words holding ``cols`` int4 values (rounded up)."""
    return -(-cols // PACK_FACTOR)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Pack int8 codes [R, C] in [-8, 7] into int32 [R, ceil(C / 8)] along dim 1.

    Checks the code range (one device sync: a weight-sync-time operation, not a hot path).
    """
    if codes.dtype != torch.int8 or codes.dim() != 2:
        raise ValueError(
            f"pack_int4 expects 2-D int8 codes, got {codes.dtype} {tuple(codes.shape)}"
        )
    if codes.numel() and bool((codes < -_OFFSET).any() | (codes > _OFFSET - 1).any()):
        raise ValueError("pack_int4: codes must lie in [-8, 7]")
    rows, cols = codes.shape
    words = packed_cols(cols)
    u = (codes.to(torch.int64) + _OFFSET).contiguous()  # [R, C] nibbles in [0, 15]
    u = torch.nn.functional.pad(u, (0, words * PACK_FACTOR - cols))  # [R, 8W], pad nibble 0
    shifts = torch.arange(PACK_FACTOR, device=codes.device, dtype=torch.int64) * 4  # [8]
    word = (u.view(rows, words, PACK_FACTOR) << shifts).sum(dim=-1)  # [R, W] in [0, 2^32)
    word = torch.where(word >= 2**31, word - 2**32, word)  # two's complement, no overflow
    return word.to(torch.int32)


def unpack_int4(packed: torch.Tensor, *, cols: int) -> torch.Tensor:
    """Unpack int32 [R, W] into int8 codes [R, cols] in [-8, 7] (shifts and masks; crops padding)."""
    if packed.dtype != torch.int32 or packed.dim() != 2:
        raise ValueError(f"unpack_int4 expects 2-D int32, got {packed.dtype} {tuple(packed.shape)}")
    rows, words = packed.shape
    if not (words - 1) * PACK_FACTOR < cols <= words * PACK_FACTOR:
        raise ValueError(f"unpack_int4: cols={cols} does not fit {words} packed words per row")
    shifts = torch.arange(PACK_FACTOR, device=packed.device, dtype=torch.int32) * 4  # [8]
    nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [R, W, 8] (arithmetic shift, then mask)
    return (nibbles.reshape(rows, words * PACK_FACTOR)[:, :cols] - _OFFSET).to(torch.int8)


def pack_int4_dim0(codes: torch.Tensor) -> torch.Tensor:
    """Pack int8 [R, C] along dim 0 into int32 [ceil(R / 8), C] (zero-point layout)."""
    return pack_int4(codes.t().contiguous()).t().contiguous()


def unpack_int4_dim0(packed: torch.Tensor, *, rows: int) -> torch.Tensor:
    """Inverse of ``pack_int4_dim0``: int32 [W, C] -> int8 [rows, C]."""
    return unpack_int4(packed.t().contiguous(), cols=rows).t().contiguous()


_SPEC_KEY = ".quant_spec"


def to_compressed(name: str, qt: QuantizedTensor) -> dict[str, torch.Tensor]:
    """The storage entries of one quantized weight (packing the codes if the spec says so)."""
    packed = qt.spec.packing == "pack-quantized"
    out = {
        f"{name}.weight_scale": qt.scales.contiguous(),
        f"{name}.weight_shape": torch.tensor(qt.shape, dtype=torch.int64),
    }
    if packed:
        out[f"{name}.weight_packed"] = pack_int4(qt.codes)
    else:
        out[f"{name}.weight"] = qt.codes.contiguous()
    if qt.zeros is not None:
        out[f"{name}.weight_zero_point"] = pack_int4_dim0(qt.zeros) if packed else qt.zeros
    return out


def from_compressed(
    name: str, entries: Mapping[str, torch.Tensor], *, spec: QuantSpec
) -> QuantizedTensor:
    """Inverse of ``to_compressed``: exact codes, scales and zero points of ``name``."""
    shape_key = f"{name}.weight_shape"
    if shape_key not in entries:
        raise KeyError(f"no quantized weight {name!r} (missing {shape_key})")
    n, k = (int(v) for v in entries[shape_key].tolist())
    scales = entries[f"{name}.weight_scale"]
    if scales.dtype != spec.torch_scale_dtype or tuple(scales.shape) != (n, spec.num_groups(k)):
        raise ValueError(
            f"{name}.weight_scale is {scales.dtype} {tuple(scales.shape)}, spec {spec.name!r} "
            f"expects {spec.torch_scale_dtype} {(n, spec.num_groups(k))}"
        )
    packed = spec.packing == "pack-quantized"
    if packed:
        codes = unpack_int4(entries[f"{name}.weight_packed"], cols=k)
    else:
        codes = entries[f"{name}.weight"]
    if codes.dtype != spec.code_dtype or tuple(codes.shape) != (n, k):
        raise ValueError(f"{name} codes are {codes.dtype} {tuple(codes.shape)}, expected {(n, k)}")
    zeros = None
    if not spec.symmetric:
        zp = entries[f"{name}.weight_zero_point"]
        zeros = unpack_int4_dim0(zp, rows=n) if packed else zp
    return QuantizedTensor(codes, scales, zeros, spec, (n, k))


def save_quantized(path: str | Path, weights: Mapping[str, QuantizedTensor]) -> None:
    """Write ``weights`` (name -> QuantizedTensor) to one safetensors file at ``path``."""
    tensors: dict[str, torch.Tensor] = {}
    metadata: dict[str, str] = {}
    for name, qt in weights.items():
        tensors.update({k: v.detach().cpu() for k, v in to_compressed(name, qt).items()})
        metadata[name + _SPEC_KEY] = json.dumps(qt.spec.as_dict(), sort_keys=True)
    save_file(tensors, str(path), metadata=metadata)


def load_quantized(path: str | Path, *, device: str = "cpu") -> dict[str, QuantizedTensor]:
    """Read every quantized weight saved by ``save_quantized`` (exact round trip)."""
    with safe_open(str(path), framework="pt", device=device) as f:
        metadata = f.metadata() or {}
        entries = {k: f.get_tensor(k) for k in f.keys()}
    out = {}
    for key, text in metadata.items():
        if key.endswith(_SPEC_KEY):
            name = key[: -len(_SPEC_KEY)]
            out[name] = from_compressed(name, entries, spec=QuantSpec(**json.loads(text)))
    return out


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

"""Quantized weights as compressed-tensors style entries and safetensors files.

Names per weight ``<name>``: ``<name>.weight_packed`` (int32 [N, ceil(K/8)], ``pack-quantized``
specs) or ``<name>.weight`` (int8 / float8_e4m3fn codes [N, K], ``packing='none'``, as in the
compressed-tensors int-/float-quantized formats), ``<name>.weight_scale`` ([N, G], scale dtype),
``<name>.weight_shape`` (int64 [2]) and, for asymmetric specs, ``<name>.weight_zero_point``
(int32 [ceil(N/8), G] packed along N, or int8 [N, G] unpacked). The spec of each weight travels in
the safetensors metadata as JSON under ``<name>.quant_spec``; there is no global ``config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from core.quant.packing import pack_int4, pack_int4_dim0, unpack_int4, unpack_int4_dim0
from core.quant.quantizer import QuantizedTensor
from core.quant.spec import QuantSpec

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

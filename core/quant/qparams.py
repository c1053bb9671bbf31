"""Telemetry rows (``qparams`` table) proving that every producer used the same quantizer.

Each producer (``qat_fake`` in the actor, ``offline_real`` at weight sync, ``rollout_load`` in the
rollout engine) emits one row per quantized tensor. Hashes are sha256 (first 16 hex chars) over a
canonical form: the header ``"<dtype>|<shape>|"`` followed by the raw little-endian bytes of the
*unpacked*, contiguous, row-major codes [N, K], scales [N, G] or zero points [N, G]. Two rows have
equal hashes exactly when the tensors are bit-identical (up to sha256 collisions), whatever the
storage packing; ``qparams_mismatch`` names the columns on which two rows disagree.
"""

from __future__ import annotations

import hashlib

import torch

from core.quant.quantizer import QuantizedTensor

PRODUCERS = ("qat_fake", "offline_real", "rollout_load")
SPEC_COLUMNS = (
    "bits",
    "qmin",
    "qmax",
    "group_size",
    "symmetric",
    "scale_dtype",
    "rounding",
    "packing",
)
HASH_COLUMNS = ("scale_hash", "code_hash", "zero_hash")
COLUMNS = (
    *SPEC_COLUMNS,
    *HASH_COLUMNS,
    "max_abs_err",
    "numel",
    "spec_name",
    "tensor",
    "producer",
    "policy_version",
)


def tensor_hash(t: torch.Tensor) -> str:
    """sha256[:16] of ``"<dtype>|<shape>|"`` + the raw bytes of ``t`` (any shape, row-major)."""
    t = t.detach().contiguous().cpu()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    header = f"{str(t.dtype).removeprefix('torch.')}|{tuple(t.shape)}|".encode()
    return hashlib.sha256(header + raw).hexdigest()[:16]


def qparams_row(
    name: str,
    qt: QuantizedTensor,
    *,
    producer: str,
    policy_version: int,
    max_abs_err: float | torch.Tensor,
) -> dict[str, object]:
    """One ``qparams`` row (columns ``COLUMNS``) for the quantized tensor ``name``.

    ``max_abs_err`` is max |w - dequantize(qt)| (see ``core.quant.quantizer.quant_error``); a
    tensor is moved to the host here, so call this at a sync point (end of weight sync).
    """
    if producer not in PRODUCERS:
        raise ValueError(f"producer={producer!r} is not allowed; choose one of {PRODUCERS}")
    s = qt.spec
    return {
        "bits": s.bits,
        "qmin": s.qmin,
        "qmax": s.qmax,
        "group_size": s.group_size,
        "symmetric": s.symmetric,
        "scale_dtype": s.scale_dtype,
        "rounding": s.rounding,
        "packing": s.packing,
        "scale_hash": tensor_hash(qt.scales),
        "code_hash": tensor_hash(qt.codes),
        "zero_hash": None if qt.zeros is None else tensor_hash(qt.zeros),
        "max_abs_err": float(max_abs_err),
        "numel": qt.shape[0] * qt.shape[1],
        "spec_name": s.name,
        "tensor": name,
        "producer": producer,
        "policy_version": int(policy_version),
    }


def qparams_mismatch(a: dict[str, object], b: dict[str, object]) -> list[str]:
    """Spec and hash columns on which rows ``a`` and ``b`` (same tensor) differ; [] = identical."""
    return [c for c in (*SPEC_COLUMNS, *HASH_COLUMNS, "numel") if a[c] != b[c]]

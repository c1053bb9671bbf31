"""Int4 packing in the compressed-tensors ``pack-quantized`` layout (what SGLang and vLLM load).

Layout: signed codes c in [-8, 7] are offset to unsigned nibbles u = c + 8 in [0, 15]; each run of
eight consecutive columns becomes one int32 with element i at bits 4i..4i+3 (element 0 in the
lowest nibble). Rows whose length is not a multiple of 8 are padded at the end with nibble 0
(code -8, as compressed-tensors does) and cropped on unpack using the original column count.
Zero points of asymmetric specs are packed along dim 0 (N) the same way, by transposition.
Packing is exact: ``unpack_int4(pack_int4(c), cols=C) == c`` for every in-range code.
"""

from __future__ import annotations

import torch

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

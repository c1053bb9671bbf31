"""Token-In-Token-Out (TITO) checks: the trainer must score the exact token IDs the rollout sampled.

Design. ``retokenize`` is the bug being guarded against (decode to text, encode again): BPE maps a
text to one canonical ID sequence, but a sampler may emit a non-canonical one (``"4","6"`` where
the vocabulary has ``"46"``), so the round trip silently changes the actions. ``tito_violations``
counts masked positions where rollout and trainer IDs differ. ``prefix_hashes`` gives each position
a 62-bit fingerprint of the prefix up to and including it, so telemetry can store one int64 per
token and a contract can compare rollout and trainer prefixes without storing whole sequences.

Hash format: two polynomial rolling hashes h_t = (P * h_{t-1} + id_t + 1) mod M, h_{-1} = 0, with
(M1, P1) = (2**31 - 1, 1_000_003) and (M2, P2) = (2**31 - 19, 911_382_323), combined as
``h1 * M2 + h2`` in [0, 2**62). Vectorized as h_t = P^t * (sum_{s<=t} (id_s + 1) * P^-s) mod M:
every factor is < 2**31, so each product is < 2**62 and a cumsum of T < 2**32 terms fits int64 —
exact integer math, identical on every device. Not cryptographic: collisions are ~2**-62 events.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from core.tokenizer.tokenizer import Tokenizer

HASH_PARAMS: tuple[tuple[int, int], ...] = ((2**31 - 1, 1_000_003), (2**31 - 19, 911_382_323))
"""(modulus M, base P) of the two rolling hashes; both moduli are prime."""


def retokenize(ids: Sequence[int], tok: Tokenizer) -> list[int]:
    """Decode ``ids`` (specials kept) and encode the text again: the TITO bug, for tests/probes."""
    return tok.encode(tok.decode(list(ids), skip_special_tokens=False))


def tito_violations(
    rollout_ids: torch.Tensor, trainer_ids: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-sample count of masked positions where the trainer's IDs differ from the rollout's.

    Args:
        rollout_ids: [B, T] integer token IDs the rollout engine sampled (prompt + response).
        trainer_ids: [B, T] integer token IDs the trainer feeds to the actor.
        mask: [B, T] bool, True where the comparison counts (typically response tokens).

    Returns:
        [B] int64 counts; all zeros iff TITO holds on the masked positions.
    """
    if rollout_ids.shape != trainer_ids.shape or rollout_ids.shape != mask.shape:
        raise ValueError(
            f"rollout_ids {tuple(rollout_ids.shape)}, trainer_ids {tuple(trainer_ids.shape)} and "
            f"mask {tuple(mask.shape)} must have the same [B, T] shape"
        )
    if rollout_ids.dim() != 2:
        raise ValueError(f"expected [B, T] tensors, got {rollout_ids.dim()} dimensions")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool, got {mask.dtype}")
    return ((rollout_ids != trainer_ids) & mask).sum(dim=-1, dtype=torch.int64)  # [B]


def prefix_hashes(ids: torch.Tensor) -> torch.Tensor:
    """Rolling hash of each prefix ``ids[b, :t+1]``.

    Args:
        ids: [B, T] integer token IDs (any int dtype, non-negative or not).

    Returns:
        [B, T] int64 in [0, 2**62); equal prefixes give equal hashes, on any device.
    """
    if ids.dim() != 2:
        raise ValueError(f"ids must be [B, T], got shape {tuple(ids.shape)}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"ids must be an integer tensor, got {ids.dtype}")
    ids = ids.to(torch.int64)
    seq_len = ids.shape[1]
    hashes = []
    for modulus, base in HASH_PARAMS:
        pow_t = _powers(base, seq_len, modulus, ids.device)  # [T]  P^t
        inv_pow_t = _powers(pow(base, -1, modulus), seq_len, modulus, ids.device)  # [T]  P^-t
        terms = (torch.remainder(ids, modulus) + 1) * inv_pow_t % modulus  # [B, T]  < 2**31
        prefix_sums = torch.cumsum(terms, dim=1) % modulus  # [B, T]
        hashes.append(prefix_sums * pow_t % modulus)  # [B, T]
    h1, h2 = hashes
    return h1 * HASH_PARAMS[1][0] + h2  # [B, T]  h1 * M2 + h2 < 2**62


def _powers(base: int, length: int, modulus: int, device: torch.device) -> torch.Tensor:
    """``base ** t mod modulus`` for t = 0..length-1 by vectorized binary exponentiation; [T]."""
    remaining = torch.arange(length, device=device, dtype=torch.int64)  # [T] exponents
    result = torch.ones_like(remaining)  # [T]
    square = torch.tensor(base % modulus, dtype=torch.int64, device=device)
    for _ in range(max(length - 1, 0).bit_length()):
        result = torch.where((remaining & 1).bool(), result * square % modulus, result)
        square = square * square % modulus
        remaining = remaining >> 1
    return result


def unpadded_prefix_hashes(ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``prefix_hashes`` of each sample's real tokens, independent of its left padding.

    Args:
        ids: [B, T] token IDs, left-padded; valid: [B, T] bool, True on real tokens (a contiguous
            run after the padding).
    Returns:
        [B, T] int64: at a real slot, the hash of the sample's real tokens up to that slot (what a
        reader recomputes from the stored per-token rows); 0 on padding.
    """
    b, t = ids.shape
    offset = (~valid).long().cumprod(dim=1).sum(dim=1, keepdim=True)  # [B, 1] leading pads
    src = (torch.arange(t, device=ids.device)[None, :] + offset).clamp_max(t - 1)  # [B, T]
    left = prefix_hashes(ids.gather(1, src))  # [B, T] hashes of the left-aligned sequence
    back = (torch.arange(t, device=ids.device)[None, :] - offset).clamp_min(0)  # [B, T]
    return torch.where(valid, left.gather(1, back), torch.zeros_like(left))

"""Deterministic causal Top-k key selection for DSA sparse attention, and its telemetry hash.

Design
------
Input: indexer scores ``[B, Tq, Tk]`` (cast to float32) and query positions ``q_pos [Tq]`` (int);
key ``s`` is *causal* for query ``t`` when ``s <= q_pos[t]`` (and, given the optional per-row mask
``allowed [B, Tq, Tk]``, the key is allowed: padded batches, see ``core.model.dsa_engines``).
Output (``TopkSelection``):

- ``indices [B, Tq, k]`` int64 — the selected key positions in **ascending** order, followed by
  ``-1`` padding when fewer than ``k`` causal keys exist (then every causal key is selected);
- ``valid [B, Tq, k]`` bool — False exactly on the ``-1`` padding;
- ``boundary_ties [B, Tq]`` int32 — see below.

Total order (deterministic mode). Scores are canonicalized — NaN -> -inf, -0.0 -> +0.0 — and a key
``a`` ranks before ``b`` when ``score(a) > score(b)``, or the scores are equal and ``pos(a) <
pos(b)``. The order is realised as one unique int64 key per (query, key): the order-preserving
int32 image of the float32 score in the high 32 bits and ``2**32 - 1 - pos`` in the low 32 bits;
non-causal keys get the smallest high word, below -inf, so they are only ever picked as padding and
then marked invalid. All keys are distinct, so ``torch.topk`` over them has no ties and the result
does not depend on its tie behaviour or on sort stability, on any device. Because the order is a
total order on (score, pos), the top-k of the union of per-shard top-k lists equals the global
top-k: the merge rule across devices is "re-select with the same key".

Nondeterministic mode (emulates a non-deterministic kernel, for fault scenarios): scores get
additive Gaussian noise ``noise_scale * N(0, 1)`` and ties are broken by a random permutation
instead of by position, both drawn from ``generator``. The result is still a valid causal selection.

``boundary_ties`` is a property of the (canonical, unperturbed) scores only, identical in both
modes: with ``v_k`` the k-th largest causal score counted with multiplicity, it is the number of
causal keys *other than one* whose score equals ``v_k`` — i.e. ``#{causal s: score(s) == v_k} - 1``;
0 means the boundary is unambiguous; it is 0 by definition when the query has ``<= k`` causal keys
(every causal key is selected, there is no boundary). It counts tied keys inside and outside the
selection, so ``boundary_ties > 0`` flags rows whose selected *set* depends on the tie rule.

``index_hash`` maps each selected set to a non-negative int64 (62 bits) with pure integer torch
ops: it is order-independent and ignores padding. Not cryptographic; meant for telemetry equality.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

TOPK_MODES = ("deterministic", "nondeterministic")


def check_topk_kernel(section: str, mode: str, noise: float) -> None:
    """ValueError naming ``section.topk_mode`` / ``section.topk_noise`` unless ``mode`` is a Top-k
    kernel and ``noise`` (the nondeterministic kernel's score-noise std) is finite and >= 0."""
    if mode not in TOPK_MODES:
        raise ValueError(f"{section}.topk_mode={mode!r} not in {list(TOPK_MODES)}")
    if not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f"{section}.topk_noise={noise} must be a finite float >= 0")


_LOW_MASK = (1 << 32) - 1  # low word of the composite key
_BELOW_NEG_INF = -(1 << 31)  # int32 min: below the order image of -inf (-2139095041)


class TopkSelection(NamedTuple):
    """The keys chosen for each query (see the module docstring for the exact contract)."""

    indices: torch.Tensor
    """[B, Tq, k] int64: selected key positions, ascending, then -1 padding."""
    valid: torch.Tensor
    """[B, Tq, k] bool: False exactly on padding slots."""
    boundary_ties: torch.Tensor
    """[B, Tq] int32: causal keys, besides one, whose score equals the k-th largest causal score."""


def canonical_scores(scores: torch.Tensor) -> torch.Tensor:
    """float32 copy of ``scores`` with NaN -> -inf and -0.0 -> +0.0 (same shape)."""
    out = scores.to(torch.float32)
    out = torch.where(out.isnan(), float("-inf"), out)  # +-inf are kept as they are
    return out + 0.0  # IEEE: -0.0 + 0.0 == +0.0; other values unchanged


def _order_image(x: torch.Tensor) -> torch.Tensor:
    """Order-preserving map float32 (no NaN) -> int32 -> int64: a < b iff image(a) < image(b)."""
    bits = x.contiguous().view(torch.int32)
    # negative floats: flip the 31 magnitude bits so larger magnitude sorts lower
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(torch.int64)


def causal_mask(q_pos: torch.Tensor, tk: int) -> torch.Tensor:
    """[Tq, Tk] bool, True where key s <= q_pos[t]. ``q_pos`` is [Tq] int."""
    keys = torch.arange(tk, device=q_pos.device)
    return keys[None, :] <= q_pos.to(torch.int64)[:, None]


def select_topk(
    scores: torch.Tensor,
    q_pos: torch.Tensor,
    *,
    k: int,
    mode: str = "deterministic",
    noise_scale: float = 0.0,
    generator: torch.Generator | None = None,
    allowed: torch.Tensor | None = None,
) -> TopkSelection:
    """Select the top-``k`` causal keys of every query.

    Args:
        scores: [B, Tq, Tk] indexer scores (any float dtype; compared in float32).
        q_pos: [Tq] int absolute positions of the queries; keys are positions 0..Tk-1.
        k: keys per query, >= 1.
        mode: ``deterministic`` or ``nondeterministic``.
        noise_scale: std of the additive score noise, nondeterministic mode only, >= 0.
        generator: RNG on ``scores.device`` for the nondeterministic mode (None: global RNG).
        allowed: optional [B, Tq, Tk] bool, per-row keys that may be chosen (e.g. not padding);
            a key counts as causal only where it is also allowed (None: every key is allowed).

    Returns:
        TopkSelection with indices/valid [B, Tq, k] and boundary_ties [B, Tq].
    """
    if mode not in TOPK_MODES:
        raise ValueError(f"mode must be one of {TOPK_MODES}, got {mode!r}")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    if scores.dim() != 3 or q_pos.shape != (scores.shape[1],):
        raise ValueError(
            f"scores must be [B, Tq, Tk] and q_pos [Tq]; got {tuple(scores.shape)} and "
            f"{tuple(q_pos.shape)}"
        )
    b, tq, tk = scores.shape
    canon = canonical_scores(scores)  # [B, Tq, Tk]
    causal = causal_mask(q_pos, tk).expand(b, tq, tk)  # [B, Tq, Tk]
    if allowed is not None:
        causal = causal & allowed  # [B, Tq, Tk]
    pos = torch.arange(tk, device=scores.device).expand(b, tq, tk)  # [B, Tq, Tk]

    if mode == "deterministic":
        ranked, tiebreak = canon, pos
    else:
        noise = torch.randn(
            canon.shape, generator=generator, device=canon.device, dtype=torch.float32
        )
        ranked = canon + noise_scale * noise  # -inf stays -inf
        u = torch.rand(canon.shape, generator=generator, device=canon.device)
        tiebreak = u.argsort(dim=-1, stable=True).argsort(dim=-1, stable=True)  # random ranks

    high = torch.where(causal, _order_image(ranked), _BELOW_NEG_INF)  # [B, Tq, Tk]
    key = high * (1 << 32) + (_LOW_MASK - tiebreak)  # unique per row  [B, Tq, Tk]
    kk = min(k, tk)
    top = key.topk(kk, dim=-1, sorted=False).indices  # [B, Tq, kk]
    top_valid = causal.gather(-1, top)  # [B, Tq, kk]
    # ascending positions, padding (pushed to tk) last
    ordered = torch.where(top_valid, top, tk).sort(dim=-1).values  # [B, Tq, kk]
    valid = ordered < tk
    indices = torch.where(valid, ordered, -1)
    if kk < k:
        pad = (b, tq, k - kk)
        indices = torch.cat([indices, indices.new_full(pad, -1)], dim=-1)
        valid = torch.cat([valid, valid.new_zeros(pad)], dim=-1)

    return TopkSelection(indices, valid, _boundary_ties(canon, causal, k=k))


def _boundary_ties(canon: torch.Tensor, causal: torch.Tensor, *, k: int) -> torch.Tensor:
    """[B, Tq] int32 boundary ties of canonical scores [B, Tq, Tk] under causal [B, Tq, Tk]."""
    b, tq, tk = canon.shape
    n_causal = causal.sum(dim=-1)  # [B, Tq]
    if tk <= k:  # n_causal <= tk <= k everywhere: no boundary
        return torch.zeros((b, tq), dtype=torch.int32, device=canon.device)
    masked = canon.masked_fill(~causal, float("-inf"))
    v_k = masked.topk(k, dim=-1).values[..., -1:]  # k-th largest value; tie-independent  [B, Tq, 1]
    n_equal = (causal & (canon == v_k)).sum(dim=-1)  # [B, Tq]
    return torch.where(n_causal > k, n_equal - 1, 0).to(torch.int32)


# --- telemetry hash -------------------------------------------------------------------------

_P = (1 << 31) - 1  # Mersenne prime; lane values < P so every product stays < 2**62
_LANES = ((1_103_515_245, 12_345, 2_654_435_761 % _P), (69_069, 1_013_904_223, 40_503))


def _mix(x: torch.Tensor, a: int, c: int, d: int) -> torch.Tensor:
    """Pseudo-random map of int64 values in [0, P) to [0, P)."""
    u = (x * a + c) % _P
    u = (u * u + d) % _P
    return (u * u + c) % _P


def index_hash(indices: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Order-independent hash of each row's selected set.

    Args:
        indices: [..., k] int key positions (values on ``~valid`` slots are ignored).
        valid: [..., k] bool.

    Returns:
        [...] int64 in [0, 2**62): ``hash_a * 2**31 + hash_b`` where each lane is
        ``sum_{valid j} mix_lane(indices[j] mod P) mod P``; the empty set hashes to 0.
    """
    x = indices.to(torch.int64).clamp(min=0) % _P
    lanes = []
    for a, c, d in _LANES:
        m = torch.where(valid, _mix(x, a, c, d), 0)  # [..., k]
        lanes.append(m.sum(dim=-1) % _P)  # sum < k * 2**31: no overflow for k < 2**32
    return lanes[0] * (1 << 31) + lanes[1]

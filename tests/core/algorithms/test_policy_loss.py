"""Clipped policy loss: per-case goldens, clip_fraction, loop reference per aggregation mode,
gradient structure (zero on masked/clipped tokens, −Â·r/denominator elsewhere), determinism."""

from __future__ import annotations

import math

import pytest
import torch

from core.algorithms.policy import AGG_MODES, clipped_policy_loss
from tests.core.algorithms.reference import naive_aggregate, naive_clipped_per_token

EPS_L, EPS_H = 0.2, 0.28  # clip band [0.8, 1.28]

# One token per sequence, old_logp = 0, logp = ln r, so ratio = r (to 1 fp32 ulp).
# Per-token loss = −min(r·Â, clip(r, 0.8, 1.28)·Â):
CASES = [
    # (r,   Â,   loss,  clipped?)
    (1.1, 1.0, -1.1, False),  # inside the band: both branches equal 1.1
    (1.5, 1.0, -1.28, True),  # Â>0, r>1.28: min(1.5, 1.28) → clipped branch, no gradient
    (0.5, 1.0, -0.5, False),  # Â>0, r<0.8: min(0.5, 0.8) → unclipped (pessimistic) branch
    (0.9, -1.0, 0.9, False),  # inside the band, negative advantage
    (0.5, -1.0, 0.8, True),  # Â<0, r<0.8: min(−0.5, −0.8) = −0.8 → clipped branch
    (1.5, -1.0, 1.5, False),  # Â<0, r>1.28: min(−1.5, −1.28) = −1.5 → unclipped branch
    (1.0, 2.0, -2.0, False),  # on-policy ratio 1
    (3.0, 0.0, 0.0, False),  # Â = 0: both branches 0, a tie is not "clipped"
]
# Σ losses = −1.1 − 1.28 − 0.5 + 0.9 + 0.8 + 1.5 − 2.0 + 0 = −1.68.


def _cases() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logp = torch.tensor([[math.log(c[0])] for c in CASES])  # [8, 1]
    adv = torch.tensor([c[1] for c in CASES])  # [8]
    return logp, torch.zeros_like(logp), adv


def test_golden_cases_token_mean():
    logp, old, adv = _cases()
    mask = torch.ones_like(logp, dtype=torch.bool)
    loss, metrics = clipped_policy_loss(logp, old, adv, mask, eps_low=EPS_L, eps_high=EPS_H)
    torch.testing.assert_close(loss, torch.tensor(-1.68 / 8), rtol=1e-6, atol=0.0)
    # 2 of 8 tokens take the clipped branch.
    torch.testing.assert_close(metrics["clip_fraction"], torch.tensor(2 / 8))
    ratios = [c[0] for c in CASES]
    torch.testing.assert_close(metrics["ratio"][:, 0], torch.tensor(ratios), rtol=1e-6, atol=0.0)
    torch.testing.assert_close(
        metrics["ratio_mean"], torch.tensor(sum(ratios) / 8), rtol=1e-6, atol=0.0
    )


def test_golden_cases_with_a_masked_token():
    logp, old, adv = _cases()
    mask = torch.ones_like(logp, dtype=torch.bool)
    mask[1] = False  # drop (r=1.5, Â=1): Σ = −1.68 + 1.28 = −0.4 over 7 tokens
    loss, metrics = clipped_policy_loss(logp, old, adv, mask)
    torch.testing.assert_close(loss, torch.tensor(-0.4 / 7), rtol=1e-6, atol=1e-7)
    # clip_fraction's denominator is the trusted tokens: 1 clipped (r=0.5, Â=−1) of 7.
    torch.testing.assert_close(metrics["clip_fraction"], torch.tensor(1 / 7))


def test_per_token_advantages_equal_broadcast_sequence_advantages():
    logp, old, adv = _cases()
    mask = torch.ones_like(logp, dtype=torch.bool)
    a, _ = clipped_policy_loss(logp, old, adv, mask)
    b, _ = clipped_policy_loss(logp, old, adv[:, None].expand_as(logp), mask)
    assert torch.equal(a, b)


def _random_batch(seed: int, b: int = 6, t: int = 24):
    g = torch.Generator().manual_seed(seed)
    old = -2.0 * torch.rand(b, t, generator=g)
    logp = old + 0.3 * torch.randn(b, t, generator=g)  # ratios spread across and beyond the band
    adv = torch.randn(b, generator=g)
    mask = torch.rand(b, t, generator=g) < 0.75
    mask[2] = False  # a sequence with no trusted token
    return logp, old, adv, mask


@pytest.mark.parametrize("mode", AGG_MODES)
def test_matches_loop_reference(mode):
    logp, old, adv, mask = _random_batch(0)
    denom = float(mask.numel())
    loss, metrics = clipped_policy_loss(logp, old, adv, mask, agg_mode=mode, denominator=denom)
    per_token, clipped = naive_clipped_per_token(logp, old, adv, eps_low=EPS_L, eps_high=EPS_H)
    ref = naive_aggregate(per_token, mask.tolist(), mode, denom)
    # Tolerance: fp32 exp (≤ 1 ulp) and fp32 sums of ≤ 144 O(1) terms vs a float64 loop; the
    # accumulated error is a few 1e-7, so 1e-6 (~8 ulps at 1.0) is tight yet not flaky.
    torch.testing.assert_close(loss, torch.tensor(ref), rtol=1e-6, atol=1e-6)
    flags = [c for row, mrow in zip(clipped, mask.tolist()) for c, m in zip(row, mrow) if m]
    assert 0 < sum(flags) < len(flags)  # both branches exercised
    torch.testing.assert_close(metrics["clip_fraction"], torch.tensor(sum(flags) / len(flags)))


@pytest.mark.parametrize("mode", ["token-mean", "global-token"])
def test_gradient_zero_on_masked_and_clipped_tokens(mode):
    logp, old, adv, mask = _random_batch(1)
    logp.requires_grad_(True)
    denom = float(mask.numel()) if mode == "global-token" else mask.sum().item()
    loss, metrics = clipped_policy_loss(
        logp, old, adv, mask, agg_mode=mode, denominator=denom if mode == "global-token" else None
    )
    loss.backward()
    ratio = metrics["ratio"]
    # Precondition: no ratio within 1e-5 of a clip edge (where min/clamp have subgradient ties).
    assert ((ratio - 0.8).abs() > 1e-5).all() and ((ratio - 1.28).abs() > 1e-5).all()
    a = adv[:, None].expand_as(ratio)
    is_clipped = ((a > 0) & (ratio > 1.0 + EPS_H)) | ((a < 0) & (ratio < 1.0 - EPS_L))
    active = mask & ~is_clipped
    assert (mask & is_clipped).any() and active.any() and (~mask).any()
    # d/dlogp of −r·Â / D is −Â·r / D on active tokens (dr/dlogp = r); 0 on masked and clipped ones.
    expected = torch.where(active, -a * ratio / denom, torch.zeros_like(ratio))
    torch.testing.assert_close(logp.grad, expected, rtol=1e-6, atol=0.0)
    assert (logp.grad[~mask] == 0).all() and (logp.grad[mask & is_clipped] == 0).all()


def test_masked_garbage_leaks_into_neither_loss_nor_gradient():
    logp, old, adv, mask = _random_batch(2)
    clean_loss, _ = clipped_policy_loss(logp, old, adv, mask)
    dirty_logp, dirty_old = logp.clone(), old.clone()
    masked = (~mask).nonzero()
    # Padding / rejected tokens with −inf on both sides (Δ = NaN) or a huge Δ (exp → inf).
    dirty_logp[tuple(masked[0])], dirty_old[tuple(masked[0])] = float("-inf"), float("-inf")
    dirty_logp[tuple(masked[1])] = 200.0
    dirty_logp[tuple(masked[2])] = float("nan")
    dirty_logp.requires_grad_(True)
    loss, metrics = clipped_policy_loss(dirty_logp, dirty_old, adv, mask)
    assert torch.equal(loss, clean_loss)
    assert torch.isfinite(metrics["ratio_mean"]) and torch.isfinite(metrics["clip_fraction"])
    loss.backward()
    assert torch.isfinite(dirty_logp.grad).all() and (dirty_logp.grad[~mask] == 0).all()


def test_deterministic():
    outs = []
    for _ in range(2):
        logp, old, adv, mask = _random_batch(3)
        logp.requires_grad_(True)
        loss, metrics = clipped_policy_loss(logp, old, adv, mask, agg_mode="seq-mean-token-mean")
        loss.backward()
        outs.append((loss.detach(), metrics, logp.grad))
    (l1, m1, g1), (l2, m2, g2) = outs
    assert torch.equal(l1, l2) and torch.equal(g1, g2)
    for k in m1:
        assert torch.equal(m1[k], m2[k]), k


def test_unknown_agg_mode_raises_naming_the_option():
    logp, old, adv = _cases()
    with pytest.raises(ValueError, match=r"loss_agg_mode='sum'"):
        clipped_policy_loss(logp, old, adv, torch.ones_like(logp, dtype=torch.bool), agg_mode="sum")

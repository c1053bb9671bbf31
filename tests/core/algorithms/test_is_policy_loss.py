"""Unclipped importance-weighted policy loss (the seed's async update): goldens where the clipped
loss would differ, gradient −ρ·Â/denominator on every trusted token (no clip ever zeroes it),
masked tokens with ±inf log-probs, and the loop reference per aggregation mode."""

from __future__ import annotations

import math

import pytest
import torch

from core.algorithms.policy import AGG_MODES, clipped_policy_loss, is_policy_loss, policy_loss
from tests.core.algorithms.reference import naive_aggregate

# One token per sequence, old_logp = 0, logp = ln ρ. Per-token loss = −ρ·Â (no clip):
CASES = [
    # (ρ,  Â,   loss)
    (1.1, 1.0, -1.1),
    (1.5, 1.0, -1.5),  # the clipped loss would give −1.28 here (and no gradient)
    (0.5, -1.0, 0.5),  # the clipped loss would give 0.8 here (and no gradient)
    (4.0, -1.0, 4.0),  # an untrusted ratio carries its full weight
    (1.0, 2.0, -2.0),
]
TOTAL = -1.1 - 1.5 + 0.5 + 4.0 - 2.0  # = −0.1


def _cases():
    logp = torch.tensor([[math.log(c[0])] for c in CASES], requires_grad=True)  # [5, 1]
    adv = torch.tensor([c[1] for c in CASES])  # [5]
    return logp, torch.zeros(len(CASES), 1), adv


def test_golden_token_mean_and_metrics():
    logp, old, adv = _cases()
    mask = torch.ones(len(CASES), 1, dtype=torch.bool)
    loss, m = is_policy_loss(logp, old, adv, mask)
    torch.testing.assert_close(loss, torch.tensor(TOTAL / 5), rtol=1e-5, atol=1e-7)
    assert float(m["clip_fraction"]) == 0.0
    ratios = torch.tensor([c[0] for c in CASES])
    torch.testing.assert_close(m["ratio"][:, 0], ratios, rtol=1e-6, atol=0.0)
    torch.testing.assert_close(m["ratio_mean"], ratios.mean(), rtol=1e-6, atol=0.0)


def test_gradient_is_minus_ratio_times_advantage_on_every_trusted_token():
    logp, old, adv = _cases()
    mask = torch.ones(len(CASES), 1, dtype=torch.bool)
    mask[4] = False
    loss, _ = is_policy_loss(logp, old, adv, mask, agg_mode="global-token", denominator=10.0)
    loss.backward()
    expect = torch.tensor([-c[0] * c[1] / 10.0 for c in CASES])
    expect[4] = 0.0
    torch.testing.assert_close(logp.grad[:, 0], expect, rtol=1e-6, atol=1e-8)
    # where ρ is inside the clip band the two losses have the same gradient
    lp2 = logp.detach().clone().requires_grad_(True)
    clipped, _ = clipped_policy_loss(lp2, old, adv, mask, agg_mode="global-token", denominator=10.0)
    clipped.backward()
    torch.testing.assert_close(lp2.grad[0], logp.grad[0])
    assert float(lp2.grad[1, 0]) == 0.0 and float(logp.grad[1, 0]) != 0.0  # clipped vs not


def test_masked_infinite_logprobs_do_not_leak():
    logp = torch.tensor([[0.0, -math.inf], [-0.1, math.nan]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0], [-math.inf, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[True, False], [False, False]])
    loss, _ = is_policy_loss(logp, old, adv, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    torch.testing.assert_close(loss, torch.tensor(-1.0))


@pytest.mark.parametrize("mode", AGG_MODES)
def test_matches_loop_reference(mode):
    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(4, 6, generator=g) * 3
    old = logp + 0.3 * torch.randn(4, 6, generator=g)
    adv = torch.randn(4, generator=g)
    mask = torch.rand(4, 6, generator=g) > 0.3
    loss, _ = is_policy_loss(logp, old, adv, mask, agg_mode=mode, denominator=17.0)
    per_token = [
        [-math.exp(float(logp[b, t] - old[b, t])) * float(adv[b]) for t in range(6)]
        for b in range(4)
    ]
    ref = naive_aggregate(per_token, mask.tolist(), mode=mode, denominator=17.0)
    torch.testing.assert_close(loss, torch.tensor(ref, dtype=torch.float32), rtol=1e-5, atol=1e-6)


def test_policy_loss_dispatches_by_kind():
    logp, old, adv = _cases()
    mask = torch.ones(len(CASES), 1, dtype=torch.bool)
    for kind, fn in (("clip", clipped_policy_loss), ("is", is_policy_loss)):
        got, _ = policy_loss(logp, old, adv, mask, kind=kind)
        want, _ = fn(logp, old, adv, mask)
        torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="algorithm.policy_loss='ppo' not in"):
        policy_loss(logp, old, adv, mask, kind="ppo")

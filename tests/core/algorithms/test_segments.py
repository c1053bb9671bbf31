"""CompactionRL's cross-segment discount and token-level loss normalisation, by hand."""

from __future__ import annotations

import pytest
import torch

from core.algorithms.policy import aggregate, policy_loss
from core.algorithms.value import (
    cross_segment_discount,
    later_trainable_tokens,
    trajectory_key,
)


def test_three_segment_example():
    # One trajectory (id 10) of three segments with 3, 2 and 4 trainable tokens, plus an
    # uncompacted trajectory (id 20), rows in arbitrary order.
    traj = torch.tensor([10, 20, 10, 10])
    seg = torch.tensor([2, 0, 0, 1])
    n = torch.tensor([4, 5, 3, 2])
    # N_{>s}: segment 2 → 0; segment 0 → 2 + 4 = 6; segment 1 → 4; the lone trajectory → 0
    assert later_trainable_tokens(traj, seg, n).tolist() == [0, 0, 6, 4]
    factor, m = cross_segment_discount(traj, seg, n, gamma=0.9, lam=0.5)  # γλ = 0.45
    expected = torch.tensor([1.0, 1.0, 0.45**6, 0.45**4], dtype=torch.float32)
    # 0.45^6 = 0.008303765625, 0.45^4 = 0.04100625
    torch.testing.assert_close(factor, expected, rtol=1e-6, atol=0)
    assert m["n_later"].tolist() == [0, 0, 6, 4]


def test_naive_loop_agrees():
    gen = torch.Generator().manual_seed(3)
    traj = torch.randint(0, 4, (12,), generator=gen)
    seg = torch.randint(0, 4, (12,), generator=gen)
    n = torch.randint(0, 9, (12,), generator=gen)
    got = later_trainable_tokens(traj, seg, n).tolist()
    ref = [
        sum(int(n[j]) for j in range(12) if traj[j] == traj[i] and seg[j] > seg[i])
        for i in range(12)
    ]
    assert got == ref


def test_gamma_lambda_one_is_no_discount():
    f, _ = cross_segment_discount(
        torch.tensor([1, 1]), torch.tensor([0, 1]), torch.tensor([50, 50]), gamma=1.0, lam=1.0
    )
    assert f.tolist() == [1.0, 1.0]


def test_trajectory_key():
    assert trajectory_key(torch.tensor([5, 6, 7]), torch.tensor([-1, 5, 5])).tolist() == [5, 5, 5]


def test_bad_hyperparameters():
    with pytest.raises(ValueError, match="gamma"):
        cross_segment_discount(
            torch.tensor([1]), torch.tensor([0]), torch.tensor([1]), gamma=2.0, lam=1.0
        )


def test_token_level_vs_segment_mean_on_unequal_segments():
    # Two segments of one trajectory: segment 0 has 1 trainable token with per-token loss 1,
    # segment 1 has 3 trainable tokens with loss 0 each (4 trainable tokens in all).
    values = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, False, False, False], [True, True, True, False]])
    # token level over the set of all trainable tokens: (1 + 0 + 0 + 0) / 4 = 0.25
    token = aggregate(values, mask, mode="global-token", denominator=mask.sum())
    # mean of segment means: (1/1 + 0/3) / 2 = 0.5 — the short segment counts double
    seg_mean = aggregate(values, mask, mode="seq-mean-token-mean")
    assert float(token) == pytest.approx(0.25, abs=1e-7)
    assert float(seg_mean) == pytest.approx(0.5, abs=1e-7)


def test_policy_loss_gradient_weights_tokens_equally():
    # The seed's async update −sg(ρ)·Â·logp at ρ = 1: with the global-token denominator every
    # trainable token's gradient is −Â/|M| whatever its segment's length; with segment means the
    # one-token segment's gradient is 1/(2·1) and the others 1/(2·3).
    logp = torch.zeros(2, 4, requires_grad=True)
    old = torch.zeros(2, 4)
    adv = torch.ones(2, 4)
    mask = torch.tensor([[True, False, False, False], [True, True, True, False]])
    loss, _ = policy_loss(
        logp, old, adv, mask, kind="is", agg_mode="global-token", denominator=mask.sum()
    )
    (g,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(g[mask], torch.full((4,), -0.25))
    loss, _ = policy_loss(logp, old, adv, mask, kind="is", agg_mode="seq-mean-token-mean")
    (g,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(g[mask], torch.tensor([-0.5, -1 / 6, -1 / 6, -1 / 6]))

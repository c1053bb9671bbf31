"""GRPO group advantage: hand-derived goldens, the eps effect, degenerate groups, loop reference."""

from __future__ import annotations

import math

import torch

from core.algorithms.policy import grpo_advantages
from tests.core.algorithms.reference import naive_advantages

# fp32 tolerance used throughout: results are O(1); each value goes through a mean, a std and one
# division, i.e. a handful of fp32 roundings (eps_fp32 = 1.2e-7), so agreement to ~8 ulps at 1.0.
TOL = {"rtol": 1e-6, "atol": 1e-6}


def test_golden_three_groups():
    rewards = torch.tensor(
        [
            [1.0, 0.0, 1.0, 0.0],  # mean 0.5; deviations ±0.5 → var 0.25, std 0.5
            [0.7, 0.7, 0.7, 0.7],  # all equal → degenerate, every Â exactly 0
            [0.0, 0.0, 0.0, 4.0],  # mean 1; deviations −1,−1,−1,3 → var (1+1+1+9)/4 = 3
        ]
    )
    adv, metrics = grpo_advantages(rewards, eps=0.0)
    s3 = math.sqrt(3.0)
    expected = torch.tensor(
        [
            [1.0, -1.0, 1.0, -1.0],  # ±0.5 / 0.5, exact in fp32
            [0.0, 0.0, 0.0, 0.0],
            [-1 / s3, -1 / s3, -1 / s3, 3 / s3],
        ]
    )
    torch.testing.assert_close(adv, expected, **TOL)
    assert adv.dtype == torch.float32
    assert adv[1].eq(0).all()  # exactly 0, not NaN, even though eps=0 makes it 0/0 before masking
    assert metrics["degenerate"].tolist() == [False, True, False]
    # 1 of 3 groups is degenerate.
    torch.testing.assert_close(metrics["degenerate_fraction"], torch.tensor(1 / 3))
    # Batch-wide statistics over all 12 rewards: Σ = 2 + 2.8 + 4 = 8.8, Σ r² = 2 + 4·0.49 + 16 = 19.96.
    torch.testing.assert_close(metrics["reward_mean"], torch.tensor(8.8 / 12), **TOL)
    std = math.sqrt(19.96 / 12 - (8.8 / 12) ** 2)
    torch.testing.assert_close(metrics["reward_std"], torch.tensor(std), **TOL)


def test_eps_shrinks_advantages():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0]])  # std 0.5
    # Â = ±0.5 / (0.5 + eps): eps 0 → ±1 exactly; eps 0.5 → ±0.5 exactly; default 1e-6 → ±0.999998.
    adv0, _ = grpo_advantages(rewards, eps=0.0)
    adv_half, _ = grpo_advantages(rewards, eps=0.5)
    adv_default, _ = grpo_advantages(rewards)
    assert adv0.tolist() == [[1.0, -1.0, 1.0, -1.0]]
    assert adv_half.tolist() == [[0.5, -0.5, 0.5, -0.5]]
    d = 0.5 / (0.5 + 1e-6)
    torch.testing.assert_close(adv_default, torch.tensor([[d, -d, d, -d]]), rtol=1e-6, atol=0.0)


def test_tiny_spread_is_not_degenerate_but_eps_dominates():
    # Rewards differ by x = fp32(1e-6): mean x/2, deviations ±x/2, std x/2 (not 0 → not degenerate).
    # Â = ±(x/2) / (x/2 + 1e-6) ≈ ±(5e-7 / 1.5e-6) = ±1/3 instead of ±1: eps damps the noise.
    rewards = torch.tensor([[0.0, 1e-6]])
    adv, metrics = grpo_advantages(rewards, eps=1e-6)
    assert metrics["degenerate"].tolist() == [False]
    torch.testing.assert_close(adv, torch.tensor([[-1 / 3, 1 / 3]]), rtol=1e-6, atol=0.0)


def test_group_of_one_is_degenerate():
    adv, metrics = grpo_advantages(torch.tensor([[3.0], [-1.0]]))
    assert adv.tolist() == [[0.0], [0.0]]
    assert metrics["degenerate"].tolist() == [True, True]


def test_matches_loop_reference():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(16, 8, generator=g)
    rewards[3] = 1.0  # degenerate groups mixed in (binary-reward all-correct / all-wrong)
    rewards[7] = 0.0
    rewards[11] = torch.randint(0, 2, (8,), generator=g).float()  # binary group
    adv, metrics = grpo_advantages(rewards, eps=1e-6)
    ref_adv, ref_deg = naive_advantages(rewards, eps=1e-6)
    torch.testing.assert_close(adv, torch.tensor(ref_adv), **TOL)
    assert metrics["degenerate"].tolist() == ref_deg
    assert sum(ref_deg) == 2


def test_deterministic():
    rewards = torch.rand(8, 4, generator=torch.Generator().manual_seed(1))
    a1, m1 = grpo_advantages(rewards)
    a2, m2 = grpo_advantages(rewards.clone())
    assert torch.equal(a1, a2)
    for k in m1:
        assert torch.equal(m1[k], m2[k]), k

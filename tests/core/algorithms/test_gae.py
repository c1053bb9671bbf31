"""Skip-observation GAE: hand-derived golden values, the standard recursion without observations,
the naive per-action loop on random interleavings, and outcome rewards."""

from __future__ import annotations

import random

import pytest
import torch

from core.algorithms.value import outcome_rewards, skip_observation_gae
from tests.core.algorithms.gae_reference import per_action_gae, standard_gae

G, L = 0.9, 0.8  # γ, λ; γλ = 0.72


def test_two_actions_with_an_observation_between():
    # slots: [prompt, a0, a1, obs, obs, b0, b1]; the observation's values (9.0) must be ignored.
    trainable = torch.tensor([[False, True, True, False, False, True, True]])
    values = torch.tensor([[3.0, 0.5, 0.6, 9.0, 9.0, 0.7, 0.8]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 5.0, 5.0, 0.0, 1.0]])  # obs rewards ignored too
    adv, ret, _ = skip_observation_gae(rewards, values, trainable, gamma=G, lam=L)
    # b1 (last token, bootstrap 0):  δ = 1 + 0.9·0 − 0.8 = 0.2;           Â = 0.2
    # b0:                              δ = 0 + 0.9·0.8 − 0.7 = 0.02;        Â = 0.02 + 0.72·0.2 = 0.164
    # a1 = a_{1,N} links to b0 = a_{2,0} over the observation:
    #                                  δ = 0 + 0.9·V(b0) − V(a1) = 0.63 − 0.6 = 0.03
    #                                  Â = 0.03 + 0.72·Â(b0) = 0.03 + 0.11808 = 0.14808
    # a0:                              δ = 0 + 0.9·0.6 − 0.5 = 0.04;        Â = 0.04 + 0.72·0.14808 = 0.1466176
    expected = torch.tensor([[0.0, 0.1466176, 0.14808, 0.0, 0.0, 0.164, 0.2]])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-6)
    # returns = Â + V on trainable tokens: 0.6466176, 0.74808, 0.864, 1.0
    expected_ret = torch.tensor([[0.0, 0.6466176, 0.74808, 0.0, 0.0, 0.864, 1.0]])
    torch.testing.assert_close(ret, expected_ret, rtol=0, atol=1e-6)


def test_observation_values_change_nothing():
    trainable = torch.tensor([[True, True, False, False, True]])
    values = torch.tensor([[0.1, 0.2, 0.0, 0.0, 0.3]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    a, _, _ = skip_observation_gae(rewards, values, trainable, gamma=G, lam=L)
    noisy = values.clone()
    noisy[0, 2:4] = torch.tensor([100.0, -100.0])
    b, _, _ = skip_observation_gae(rewards, noisy, trainable, gamma=G, lam=L)
    assert torch.equal(a, b)


@pytest.mark.parametrize("seed", range(5))
def test_equals_standard_gae_without_observations(seed):
    gen = torch.Generator().manual_seed(seed)
    b, t = 3, 9
    values = torch.randn(b, t, generator=gen, dtype=torch.float64)
    rewards = torch.randn(b, t, generator=gen, dtype=torch.float64)
    lengths = [9, 5, 1]  # right-padded rows: no observation anywhere
    trainable = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    adv, ret, _ = skip_observation_gae(rewards, values, trainable, gamma=0.97, lam=0.93)
    for i, n in enumerate(lengths):
        ref_adv, ref_ret = standard_gae(rewards[i, :n].tolist(), values[i, :n].tolist(), 0.97, 0.93)
        torch.testing.assert_close(adv[i, :n], torch.tensor(ref_adv, dtype=torch.float64))
        torch.testing.assert_close(ret[i, :n], torch.tensor(ref_ret, dtype=torch.float64))
        assert not adv[i, n:].any()


def _random_trajectory(rng: random.Random, t: int):
    """Roles over t slots: prompt, then actions and observations alternating, then padding."""
    kinds = ["p"] * rng.randint(1, 3)
    while len(kinds) < t - 2:
        kinds += ["a"] * rng.randint(1, 3)
        kinds += ["o"] * rng.randint(0, 3)
    kinds = kinds[:t]
    return kinds + ["pad"] * (t - len(kinds))


@pytest.mark.parametrize("seed", range(4))
def test_vectorized_matches_per_action_loop(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    b, t = 6, 24
    kinds = [_random_trajectory(rng, t) for _ in range(b)]
    trainable = torch.tensor([[k == "a" for k in row] for row in kinds])
    values = torch.randn(b, t, generator=gen, dtype=torch.float64)
    rewards = torch.randn(b, t, generator=gen, dtype=torch.float64)
    adv, _, _ = skip_observation_gae(rewards, values, trainable, gamma=0.95, lam=0.9)
    for i, row in enumerate(kinds):
        actions, slots, prev = [], [], None
        for s, k in enumerate(row):
            if k == "a":
                if prev != "a":
                    actions.append([])
                    slots.append([])
                actions[-1].append((float(rewards[i, s]), float(values[i, s])))
                slots[-1].append(s)
            prev = k
        ref = per_action_gae(actions, 0.95, 0.9)
        for act_slots, act_ref in zip(slots, ref, strict=True):
            torch.testing.assert_close(
                adv[i, act_slots],
                torch.tensor(act_ref, dtype=torch.float64),
                rtol=1e-12,
                atol=1e-12,
            )
        assert not adv[i][~trainable[i]].any()


def test_fp32_matches_fp64_reference():
    gen = torch.Generator().manual_seed(7)
    values = torch.rand(4, 32, generator=gen)
    trainable = torch.rand(4, 32, generator=gen) > 0.3
    rewards = outcome_rewards(torch.tensor([1.0, 0.0, 1.0, 0.0]), trainable)
    a32, _, _ = skip_observation_gae(rewards, values, trainable, gamma=1.0, lam=0.95)
    a64, _, _ = skip_observation_gae(
        rewards.double(), values.double(), trainable, gamma=1.0, lam=0.95
    )
    torch.testing.assert_close(a32.double(), a64, rtol=0, atol=1e-5)


def test_gamma_lambda_one_is_reward_minus_value():
    # γ = λ = 1: Â_t = Σ_{k≥t} r_k − V_t (the Monte-Carlo return minus the baseline)
    trainable = torch.tensor([[True, False, True, True]])
    values = torch.tensor([[0.25, 7.0, 0.5, 0.75]])
    rewards = outcome_rewards(torch.tensor([1.0]), trainable)
    adv, ret, _ = skip_observation_gae(rewards, values, trainable, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.75, 0.0, 0.5, 0.25]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 0.0, 1.0, 1.0]]))


def test_outcome_rewards_on_last_trainable_token():
    trainable = torch.tensor([[False, True, True, False], [False, False, False, False]])
    r = outcome_rewards(torch.tensor([2.0, 1.0]), trainable)
    assert r.tolist() == [[0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_bad_hyperparameters_name_the_field():
    x = torch.zeros(1, 2)
    m = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="critic.gamma"):
        skip_observation_gae(x, x, m, gamma=1.5, lam=0.9)
    with pytest.raises(ValueError, match="critic.lam"):
        skip_observation_gae(x, x, m, gamma=1.0, lam=-0.1)
    with pytest.raises(ValueError, match="same"):
        skip_observation_gae(x, torch.zeros(1, 3), m, gamma=1.0, lam=0.9)

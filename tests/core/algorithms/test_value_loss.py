"""The critic's value loss and explained variance, by hand."""

from __future__ import annotations

import math

import torch

from core.algorithms.value import explained_variance, value_loss


def test_golden_loss_and_gradient():
    values = torch.tensor([[0.5, 9.0, 0.0]], requires_grad=True)
    returns = torch.tensor([[1.0, 0.0, 1.0]])
    mask = torch.tensor([[True, False, True]])
    loss, m = value_loss(values, returns, mask)
    # ½(0.5 − 1)² = 0.125, ½(0 − 1)² = 0.5; token mean over 2 = 0.3125 (the masked 9.0 ignored)
    assert float(loss.detach()) == 0.3125
    (g,) = torch.autograd.grad(loss, values)
    # ∂/∂V = (V − G)/2 on masked tokens: −0.25, −0.5; 0 on the masked-out one
    assert g.tolist() == [[-0.25, 0.0, -0.5]]
    assert float(m["value_mean"]) == 0.25 and float(m["return_mean"]) == 1.0


def test_explained_variance():
    mask = torch.ones(1, 4, dtype=torch.bool)
    g = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # Var(G) = 0.25
    assert float(explained_variance(g, g, mask)) == 1.0
    assert float(explained_variance(torch.full_like(g, 0.5), g, mask)) == 0.0  # constant
    # V = 1 − G: G − V = 2G − 1 ∈ {−1, 1}, Var = 1 → 1 − 1/0.25 = −3
    assert float(explained_variance(1.0 - g, g, mask)) == -3.0
    assert math.isnan(float(explained_variance(g, torch.ones_like(g), mask)))  # Var(G) = 0

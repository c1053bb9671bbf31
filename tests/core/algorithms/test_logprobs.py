"""token_logprobs: temperature-scaled log-softmax and entropy vs hand computations."""

from __future__ import annotations

import math

import torch

from core.algorithms.policy import token_logprobs

LN3 = math.log(3.0)


def test_golden_temperature():
    # Logits [2 ln 3, 0, 0].
    #   T = 2: scaled [ln 3, 0, 0] → probs [3, 1, 1] / 5 → logp(0) = ln 0.6, logp(1) = ln 0.2;
    #          entropy = −(0.6 ln 0.6 + 2 · 0.2 ln 0.2) = 0.950270…
    #   T = 1: probs [9, 1, 1] / 11 → logp(0) = ln(9/11); entropy = −(9/11 ln 9/11 + 2/11 ln 1/11).
    logits = torch.tensor([[[2 * LN3, 0.0, 0.0], [2 * LN3, 0.0, 0.0]]])  # [1, 2, 3]
    targets = torch.tensor([[0, 1]])  # [1, 2]
    logp, ent = token_logprobs(logits, targets, temperature=2.0)
    h2 = -(0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2))
    torch.testing.assert_close(
        logp, torch.tensor([[math.log(0.6), math.log(0.2)]]), rtol=1e-6, atol=1e-6
    )
    torch.testing.assert_close(ent, torch.tensor([[h2, h2]]), rtol=1e-6, atol=1e-6)

    logp1, ent1 = token_logprobs(logits, targets, temperature=1.0)
    h1 = -(9 / 11 * math.log(9 / 11) + 2 / 11 * math.log(1 / 11))
    expected = torch.tensor([[math.log(9 / 11), math.log(1 / 11)]])
    torch.testing.assert_close(logp1, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent1, torch.tensor([[h1, h1]]), rtol=1e-6, atol=1e-6)


def test_uniform_logits_ignore_temperature():
    # Equal logits stay equal after scaling: logp = −ln V, entropy = ln V for any T.
    logits = torch.full((2, 3, 5), 7.0)
    targets = torch.randint(0, 5, (2, 3), generator=torch.Generator().manual_seed(0))
    for temp in (0.5, 1.0, 1.7):
        logp, ent = token_logprobs(logits, targets, temperature=temp)
        torch.testing.assert_close(logp, torch.full((2, 3), -math.log(5)), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(ent, torch.full((2, 3), math.log(5)), rtol=1e-6, atol=1e-6)


def test_bf16_logits_scored_in_fp32():
    logits = torch.tensor([[[2.0, 0.0, -2.0]]], dtype=torch.bfloat16)  # exactly representable
    logp, ent = token_logprobs(logits, torch.tensor([[2]]), temperature=2.0)
    assert logp.dtype == ent.dtype == torch.float32
    # Scaled [1, 0, −1]: logp(2) = −1 − ln(e + 1 + 1/e).
    lse = math.log(math.e + 1.0 + 1.0 / math.e)
    torch.testing.assert_close(logp, torch.tensor([[-1.0 - lse]]), rtol=1e-6, atol=1e-6)


def test_matches_loop_reference():
    g = torch.Generator().manual_seed(0)
    logits = 3.0 * torch.randn(2, 4, 11, generator=g)
    targets = torch.randint(0, 11, (2, 4), generator=g)
    temp = 0.7
    logp, ent = token_logprobs(logits, targets, temperature=temp)
    for b in range(2):
        for t in range(4):
            z = [v / temp for v in logits[b, t].tolist()]  # float64 from here on
            top = max(z)
            lse = top + math.log(sum(math.exp(v - top) for v in z))
            ref_logp = z[targets[b, t].item()] - lse
            ref_ent = -sum(math.exp(v - lse) * (v - lse) for v in z)
            # O(1–10) values through one fp32 log-softmax: a few ulps → 1e-6 relative / 1e-5 abs.
            assert math.isclose(logp[b, t].item(), ref_logp, rel_tol=1e-6, abs_tol=1e-5)
            assert math.isclose(ent[b, t].item(), ref_ent, rel_tol=1e-6, abs_tol=1e-5)


def test_deterministic():
    g = torch.Generator().manual_seed(1)
    logits, targets = torch.randn(2, 3, 7, generator=g), torch.randint(0, 7, (2, 3), generator=g)
    a = token_logprobs(logits, targets, temperature=0.9)
    b = token_logprobs(logits.clone(), targets.clone(), temperature=0.9)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])

"""Sampler: log-prob modes, temperature, top-k / top-p, seeded determinism (hand-derived)."""

import math

import pytest
import torch

from core.rollout.sampling import SamplingParams, sample_tokens


def test_processed_logprob_uses_temperature():
    # logits [0, ln 3]: at T=1 p = [1/4, 3/4]; at T=2 logits/2 = [0, ln√3] → p = [1/(1+√3), √3/(1+√3)]
    logits = torch.tensor([[0.0, math.log(3.0)]])
    _, lp = sample_tokens(logits, SamplingParams(temperature=2.0), None, greedy=True)
    assert lp.item() == pytest.approx(math.log(math.sqrt(3) / (1 + math.sqrt(3))), abs=1e-6)
    _, raw = sample_tokens(
        logits, SamplingParams(temperature=2.0, logprob_mode="raw"), None, greedy=True
    )
    assert raw.item() == pytest.approx(math.log(0.75), abs=1e-6)


def test_top_k_renormalizes_over_kept_tokens():
    # p ∝ [1, 2, 5]: top_k=2 keeps {1, 2} with p = [2/7, 5/7]
    logits = torch.log(torch.tensor([[1.0, 2.0, 5.0]]))
    tok, lp = sample_tokens(logits, SamplingParams(top_k=2), None, greedy=True)
    assert tok.item() == 2 and lp.item() == pytest.approx(math.log(5 / 7), abs=1e-6)


def test_top_p_keeps_smallest_prefix_reaching_mass():
    # p = [0.1, 0.3, 0.6]: top_p=0.6 keeps {2} alone (its mass already reaches 0.6)
    logits = torch.log(torch.tensor([[0.1, 0.3, 0.6]]))
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        tok, lp = sample_tokens(logits, SamplingParams(top_p=0.6), g)
        assert tok.item() == 2 and lp.item() == pytest.approx(0.0, abs=1e-6)


def test_seeded_sampling_is_deterministic():
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(1))
    a = sample_tokens(logits, SamplingParams(), torch.Generator().manual_seed(5))
    b = sample_tokens(logits, SamplingParams(), torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize(
    "kw",
    [
        {"temperature": 0.0},
        {"top_p": 0.0},
        {"top_k": -1},
        {"max_new_tokens": 0},
        {"logprob_mode": "tempered"},
    ],
)
def test_bad_params(kw):
    with pytest.raises(ValueError, match="rollout."):
        SamplingParams(**kw)

"""Deterministic token sampling by sample_id hash."""

import numpy as np
import pytest
import torch

from observability.sampling import keep_tokens_for, sample_hash_unit

MASK = (1 << 64) - 1


def splitmix64_loop(x: int) -> int:
    """Reference splitmix64 output for state ``x`` (one step), plain Python ints."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def test_golden_value_of_splitmix64_seed_zero():
    # The published first output of splitmix64 seeded with 0 is 0xE220A8397B1DCDAF; we keep
    # its top 53 bits as a fraction of 2**53.
    assert splitmix64_loop(0) == 0xE220A8397B1DCDAF
    assert sample_hash_unit(np.array([0]))[0] == (0xE220A8397B1DCDAF >> 11) / 2**53


def test_vectorized_matches_loop_reference_including_negative_ids():
    ids = np.array([0, 1, 2, 12345, 2**40 + 7, -1, -(2**63)], dtype=np.int64)
    expected = [(splitmix64_loop(int(i) & MASK) >> 11) / 2**53 for i in ids]
    np.testing.assert_array_equal(sample_hash_unit(ids), expected)


def test_rates_edges_nesting_and_fraction():
    ids = np.arange(20_000)
    assert keep_tokens_for(ids, 1.0).all() and not keep_tokens_for(ids, 0.0).any()
    low, high = keep_tokens_for(ids, 0.1), keep_tokens_for(ids, 0.3)
    assert not (low & ~high).any()  # the kept set only grows with the rate
    # 20k Bernoulli(0.3) draws: std of the mean is sqrt(.3*.7/20000) ~ 0.0032; allow 5 sigma.
    assert abs(high.mean() - 0.3) < 0.016
    np.testing.assert_array_equal(keep_tokens_for(torch.arange(20_000), 0.3), high)
    np.testing.assert_array_equal(keep_tokens_for(list(range(20_000)), 0.3), high)


def test_bad_rate():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        keep_tokens_for(np.arange(3), 1.5)

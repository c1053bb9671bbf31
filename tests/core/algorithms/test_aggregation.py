"""Token aggregation: each mode's explicit denominator, empty masks, masked garbage, bad modes."""

from __future__ import annotations

import pytest
import torch

from core.algorithms.policy import AGG_MODES, aggregate
from tests.core.algorithms.reference import naive_aggregate

VALUES = torch.tensor(
    [
        [1.0, 2.0, 3.0, 4.0],
        [10.0, 20.0, 30.0, 40.0],
        [5.0, 5.0, 5.0, 5.0],
    ]
)
MASK = torch.tensor(
    [
        [True, True, False, False],  # Σ = 3 over 2 tokens
        [True, False, False, False],  # Σ = 10 over 1 token
        [False, False, False, False],  # no trusted token
    ]
)

# Numerator Σ m·x = 1 + 2 + 10 = 13 in every token-level mode; the modes differ in the denominator.
GOLDEN = [
    ("token-mean", None, 13 / 3),  # ÷ 3 trusted tokens
    (
        "seq-mean-token-mean",
        None,
        (3 / 2 + 10 / 1) / 2,
    ),  # = 5.75; ÷ 2 non-empty sequences (not B=3)
    ("seq-mean-token-sum", None, (3 + 10) / 2),  # = 6.5; ÷ 2 non-empty sequences (not B=3)
    ("global-token", 8.0, 13 / 8),  # ÷ caller's count (e.g. 8 action tokens before trust masking)
    ("global-token", torch.tensor(8), 13 / 8),  # tensor denominators too
    ("global-token", 0.0, 13.0),  # a 0 denominator is clamped to 1, never a division by zero
]


@pytest.mark.parametrize("mode,denominator,expected", GOLDEN)
def test_golden(mode, denominator, expected):
    out = aggregate(VALUES, MASK, mode=mode, denominator=denominator)
    assert out.shape == () and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor(expected), rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_empty_mask_gives_zero(mode):
    out = aggregate(VALUES, torch.zeros_like(MASK), mode=mode, denominator=8.0)
    assert out.item() == 0.0


@pytest.mark.parametrize("mode", AGG_MODES)
def test_masked_out_garbage_does_not_leak(mode):
    # Values at masked positions (padding, rejected tokens) may be ±inf/NaN; the result must equal
    # the clean one bit for bit (a product m·x would turn 0·inf into NaN).
    dirty = VALUES.clone()
    dirty[0, 2], dirty[1, 1], dirty[2, 0] = float("inf"), float("nan"), float("-inf")
    clean = aggregate(VALUES, MASK, mode=mode, denominator=8.0)
    assert torch.equal(aggregate(dirty, MASK, mode=mode, denominator=8.0), clean)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_matches_loop_reference(mode):
    g = torch.Generator().manual_seed(0)
    values = torch.randn(6, 20, generator=g)
    mask = torch.rand(6, 20, generator=g) < 0.6
    mask[4] = False  # one sequence with no trusted token
    out = aggregate(values, mask, mode=mode, denominator=100.0)
    ref = naive_aggregate(values.tolist(), mask.tolist(), mode, 100.0)
    # fp32 sums of ≤ 120 O(1) terms in a different order than the float64 loop: ~1e-7 error.
    torch.testing.assert_close(out, torch.tensor(ref), rtol=1e-6, atol=1e-6)


def test_unknown_mode_raises_naming_the_option():
    with pytest.raises(ValueError, match=r"loss_agg_mode='seq-mean'.*'token-mean'"):
        aggregate(VALUES, MASK, mode="seq-mean")


def test_global_token_needs_a_denominator():
    with pytest.raises(ValueError, match="global-token.*denominator"):
        aggregate(VALUES, MASK, mode="global-token")

"""Trust masks (IcePop, DIS, none): exact boundaries, reason codes, loop reference, bad inputs.

Boundary arithmetic, fp32. fp32(ln 2) = 0.693147182464599609375 exceeds ln 2 by 1.9e-9, so
exp(±fp32(ln 2)) = 2^±1·(1 ± 1.9e-9): within half an ulp of 2.0 (ulp 2.4e-7) and of 0.5 (ulp below
0.5 is 3.0e-8). A correctly rounded exp therefore returns exactly 2.0 and 0.5; torch's CPU exp does,
and ``_exact_boundary_deltas`` asserts it so a platform whose exp is off by an ulp fails loudly
there instead of silently testing the wrong thing. Δ = train − rollout is exact for the values
below (one operand is always 0), so ρ hits 2.0 and 0.5 exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

from core.algorithms.policy import (
    DIS_HIGH,
    DIS_LOW,
    ICEPOP,
    KEPT,
    NOT_ACTION,
    REASONS,
    TRUST_RULES,
    trust_mask,
)
from tests.core.algorithms.reference import naive_trust_reasons

LN2 = math.log(2.0)


def _exact_boundary_deltas() -> tuple[float, float]:
    up = torch.tensor(LN2, dtype=torch.float32)
    assert torch.exp(up).item() == 2.0, "precondition: exp(fp32(ln 2)) must round to exactly 2.0"
    assert torch.exp(-up).item() == 0.5, "precondition: exp(−fp32(ln 2)) must round to exactly 0.5"
    return up.item(), -up.item()


def test_reason_codes_match_telemetry_enum():
    assert [REASONS[c] for c in (KEPT, ICEPOP, DIS_LOW, DIS_HIGH, NOT_ACTION)] == [
        "kept", "icepop", "dis_low", "dis_high", "not_action",
    ]  # fmt: skip


def test_icepop_golden_keeps_exact_boundaries():
    up, down = _exact_boundary_deltas()
    # Columns: ρ = 1, 2 (=β), 0.5 (=1/β), 2.5, 0.4, 1 on a non-action token.
    train = torch.tensor([[0.0, up, down, math.log(2.5), math.log(0.4), 0.0]])
    rollout = torch.zeros_like(train)
    action = torch.tensor([[True, True, True, True, True, False]])
    mask, metrics = trust_mask(train, rollout, action, rule="icepop", beta=2.0)
    assert metrics["ratio"][0, :3].tolist() == [1.0, 2.0, 0.5]  # exactly on the boundaries
    assert metrics["reason"].tolist() == [[KEPT, KEPT, KEPT, ICEPOP, ICEPOP, NOT_ACTION]]
    assert metrics["reason"].dtype == torch.int8
    assert mask.dtype == torch.bool
    assert mask.tolist() == [[True, True, True, False, False, False]]
    # masked_fraction counts action tokens only: 2 masked of 5 action tokens.
    torch.testing.assert_close(metrics["masked_fraction"], torch.tensor(0.4))


def test_icepop_boundary_with_nonzero_rollout_logp():
    up, down = _exact_boundary_deltas()
    # ρ = exp(train − rollout): 0 − (−ln2) = ln2 and (−ln2) − 0 = −ln2, both exact subtractions.
    train = torch.tensor([[0.0, down]])
    rollout = torch.tensor([[down, 0.0]])
    mask, metrics = trust_mask(train, rollout, torch.ones(1, 2, dtype=torch.bool), beta=2.0)
    assert metrics["ratio"].tolist() == [[2.0, 0.5]]
    assert mask.tolist() == [[True, True]]


def test_dis_golden_default_band():
    # Band (1 − 0.2, 1 + 0.28) = (0.8, 1.28), open. The Python thresholds are compared in fp32
    # (0.800000011920929, 1.2799999713897705); the ratios below are far from them.
    rho = [1.0, 0.9, 1.2, 0.7, 1.5, 1.0]
    train = torch.tensor([[math.log(r) for r in rho]])
    action = torch.tensor([[True] * 5 + [False]])
    mask, metrics = trust_mask(train, torch.zeros_like(train), action, rule="dis")
    assert metrics["reason"].tolist() == [[KEPT, KEPT, KEPT, DIS_LOW, DIS_HIGH, NOT_ACTION]]
    assert mask.tolist() == [[True, True, True, False, False, False]]
    torch.testing.assert_close(metrics["masked_fraction"], torch.tensor(0.4))


def test_dis_excludes_its_boundaries_where_icepop_keeps_them():
    up, down = _exact_boundary_deltas()
    # eps_low = 0.5, eps_high = 1.0 make the DIS band (0.5, 2.0): the same exact ρ = 0.5 and 2.0
    # that IcePop(β=2) keeps are *outside* DIS's open interval.
    train = torch.tensor([[down, up, 0.0]])
    rollout, action = torch.zeros_like(train), torch.ones(1, 3, dtype=torch.bool)
    _, dis = trust_mask(train, rollout, action, rule="dis", eps_low=0.5, eps_high=1.0)
    _, ice = trust_mask(train, rollout, action, rule="icepop", beta=2.0)
    assert dis["reason"].tolist() == [[DIS_LOW, DIS_HIGH, KEPT]]
    assert ice["reason"].tolist() == [[KEPT, KEPT, KEPT]]


@pytest.mark.parametrize("rule", TRUST_RULES)
def test_non_action_tokens_never_kept(rule):
    # ρ = 1 everywhere (the most trustworthy ratio), yet non-action tokens must stay masked.
    train = torch.zeros(3, 4)
    action = torch.tensor([[True, False, True, False]] * 3)
    mask, metrics = trust_mask(train, train.clone(), action, rule=rule)
    assert not mask[~action].any()
    assert (metrics["reason"][~action] == NOT_ACTION).all()
    assert mask[action].all()
    assert metrics["masked_fraction"].item() == 0.0


def test_none_rule_trusts_every_action_token():
    train = torch.tensor([[math.log(100.0), math.log(0.01), 0.0]])
    action = torch.tensor([[True, True, False]])
    mask, metrics = trust_mask(train, torch.zeros_like(train), action, rule="none")
    assert mask.tolist() == [[True, True, False]]
    assert metrics["masked_fraction"].item() == 0.0


def test_nan_ratio_is_masked_not_kept():
    # train = rollout = −inf gives Δ = NaN. A NaN fails every comparison, so the mask must be
    # written as "not inside the band"; otherwise garbage tokens would be trusted.
    ninf = float("-inf")
    train = torch.tensor([[ninf, 0.0]])
    rollout = torch.tensor([[ninf, 0.0]])
    action = torch.ones(1, 2, dtype=torch.bool)
    ice_mask, ice = trust_mask(train, rollout, action, rule="icepop")
    dis_mask, dis = trust_mask(train, rollout, action, rule="dis")
    assert ice_mask.tolist() == [[False, True]] and ice["reason"][0, 0].item() == ICEPOP
    assert dis_mask.tolist() == [[False, True]] and dis["reason"][0, 0].item() == DIS_HIGH


@pytest.mark.parametrize("rule", TRUST_RULES)
def test_matches_loop_reference(rule):
    g = torch.Generator().manual_seed(0)
    rollout = -3.0 * torch.rand(8, 32, generator=g)
    train = rollout + 0.6 * torch.randn(8, 32, generator=g)  # ~25% of tokens outside [1/2, 2]
    action = torch.rand(8, 32, generator=g) < 0.8
    kw = {"beta": 2.0, "eps_low": 0.2, "eps_high": 0.28}
    mask, metrics = trust_mask(train, rollout, action, rule=rule, **kw)
    # The float64 reference sees the same fp32 inputs; no ratio may sit within 1e-5 of a
    # threshold, where fp32 vs float64 exp could legitimately disagree (precondition, not luck).
    rho = torch.exp((train - rollout).double())
    for edge in (0.5, 2.0, 0.8, 1.28):
        assert ((rho - edge).abs() > 1e-5).all()
    ref = naive_trust_reasons(train, rollout, action, rule=rule, **kw)
    assert metrics["reason"].tolist() == ref
    assert torch.equal(mask, torch.tensor(ref) == KEPT)
    n_action = action.sum().item()
    n_masked = sum(
        c != KEPT for row, arow in zip(ref, action.tolist()) for c, a in zip(row, arow) if a
    )
    torch.testing.assert_close(
        metrics["masked_fraction"].float(), torch.tensor(n_masked / n_action), rtol=1e-6, atol=0.0
    )
    if rule != "none":
        assert 0 < n_masked < n_action  # the reference exercised both branches


def test_deterministic():
    g = torch.Generator().manual_seed(2)
    train, rollout = torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)
    action = torch.rand(4, 16, generator=g) < 0.7
    m1, a = trust_mask(train, rollout, action)
    m2, b = trust_mask(train.clone(), rollout.clone(), action.clone())
    assert torch.equal(m1, m2)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_unknown_rule_raises_naming_the_option():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=r"trust_rule='icepop2'.*'icepop', 'dis', 'none'"):
        trust_mask(x, x, torch.ones(1, 2, dtype=torch.bool), rule="icepop2")

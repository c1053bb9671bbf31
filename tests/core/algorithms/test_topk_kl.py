"""Top-k reverse KL: a hand-derived value, zero gradient at π_θ = π_T on K, equality with the full
reverse KL when K = V (float64 reference), the loop reference, masking."""

from __future__ import annotations

import math

import torch

from core.algorithms.distill import topk_reverse_kl
from tests.core.algorithms.reference import naive_topk_kl_per_position


def test_hand_derived_two_token_vocabulary():
    # Student logits [0, 0] → π_θ = (1/2, 1/2); teacher π_T = (0.8, 0.2), K = {token 0}:
    #   ℓ = 0.5·ln(0.5/0.8) − 0.5 + 0.8 = 0.5·(−0.470004) + 0.3 = 0.064998
    logits = torch.zeros(1, 1, 2, dtype=torch.float64)
    ids = torch.tensor([[[0]]])
    tlp = torch.tensor([[[math.log(0.8)]]], dtype=torch.float64)
    loss, m = topk_reverse_kl(logits, ids, tlp, torch.ones(1, 1, dtype=torch.bool))
    expected = 0.5 * math.log(0.5 / 0.8) - 0.5 + 0.8
    assert abs(float(loss) - expected) < 1e-12
    assert (
        abs(float(m["teacher_mass"]) - 0.8) < 1e-12 and abs(float(m["student_mass"]) - 0.5) < 1e-12
    )


def _random_case(b=3, t=4, v=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64) * 2
    teacher_logits = torch.randn(b, t, v, generator=g, dtype=torch.float64) * 2
    return logits, teacher_logits.log_softmax(-1)


def test_equals_full_reverse_kl_when_k_is_the_vocabulary():
    logits, t_logp_all = _random_case()
    b, t, v = logits.shape
    ids = torch.arange(v).expand(b, t, v).contiguous()
    mask = torch.ones(b, t, dtype=torch.bool)
    loss, m = topk_reverse_kl(logits, ids, t_logp_all, mask)
    s_logp = logits.log_softmax(-1)
    full = (s_logp.exp() * (s_logp - t_logp_all)).sum(-1)  # KL(π_θ ‖ π_T) per position, float64
    torch.testing.assert_close(m["per_position"], full, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(loss, full.mean(), rtol=1e-12, atol=1e-12)
    assert abs(float(m["teacher_mass"]) - 1.0) < 1e-12  # K = V: all the teacher's mass


def test_gradient_is_zero_where_student_equals_teacher_on_k():
    # The student matches the teacher on K = the teacher's top 4 and differs everywhere else
    # (the remaining mass is spread differently): the Top-k loss is 0 and so is its gradient
    # with respect to every logit, although the full reverse KL is not 0 there.
    logits_t, t_logp_all = _random_case(b=2, t=3, v=9, seed=1)
    k = 4
    t_logp, ids = t_logp_all.topk(k, dim=-1)  # [B, T, K]
    g = torch.Generator().manual_seed(7)
    rest = torch.randn(*t_logp_all.shape, generator=g, dtype=torch.float64)
    # student log-probs: exactly the teacher's on K; outside K the teacher's leftover mass split
    # in other proportions
    s_logp = torch.full_like(t_logp_all, -math.inf)
    s_logp.scatter_(-1, ids, t_logp)
    outside = torch.ones_like(t_logp_all, dtype=torch.bool).scatter_(-1, ids, False)
    left = 1 - t_logp.exp().sum(-1, keepdim=True)  # [B, T, 1]
    w = torch.where(outside, rest.exp(), torch.zeros_like(rest))
    s_logp = torch.where(outside, (left * w / w.sum(-1, keepdim=True)).log(), s_logp)
    logits = s_logp.clone().requires_grad_(True)  # logits = log-probs (softmax is shift-invariant)
    mask = torch.ones(2, 3, dtype=torch.bool)
    loss, _ = topk_reverse_kl(logits, ids, t_logp, mask)
    loss.backward()
    assert abs(float(loss.detach())) < 1e-12
    assert logits.grad.abs().max() < 1e-12
    full = (s_logp.exp() * (s_logp - t_logp_all)).sum(-1)
    assert float(full.min()) > 1e-3  # the distributions do differ off K


def test_gradient_pushes_towards_the_teacher_on_k():
    # π_θ(v) below π_T(v) on K: the loss decreases when that logit grows (negative gradient).
    logits = torch.zeros(1, 1, 3, dtype=torch.float64, requires_grad=True)  # π_θ = 1/3 each
    ids = torch.tensor([[[0, 1]]])
    tlp = torch.tensor([[[math.log(0.7), math.log(0.2)]]], dtype=torch.float64)
    loss, _ = topk_reverse_kl(logits, ids, tlp, torch.ones(1, 1, dtype=torch.bool))
    loss.backward()
    assert logits.grad[0, 0, 0] < 0 < logits.grad[0, 0, 1]


def test_matches_loop_reference_and_masks_positions():
    logits, t_logp_all = _random_case(b=3, t=5, v=7, seed=2)
    t_logp, ids = t_logp_all.topk(3, dim=-1)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 0, 1, 1, 1]], dtype=torch.bool)
    t_logp = torch.where(mask[..., None], t_logp, torch.full_like(t_logp, math.nan))  # garbage
    loss, m = topk_reverse_kl(logits.float(), ids, t_logp.float(), mask)
    ref = torch.tensor(naive_topk_kl_per_position(logits, ids, t_logp), dtype=torch.float64)
    kept = ref[mask]
    torch.testing.assert_close(m["per_position"][mask].double(), kept, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(loss) and m["per_position"][~mask].eq(0).all()
    torch.testing.assert_close(loss.double(), kept.mean(), rtol=1e-5, atol=1e-6)
    # global-token: Σ ℓ over kept positions / a caller-given count (here 20 slots)
    g_loss, _ = topk_reverse_kl(
        logits.float(), ids, t_logp.float(), mask, agg_mode="global-token", denominator=20
    )
    torch.testing.assert_close(g_loss.double(), kept.sum() / 20, rtol=1e-5, atol=1e-6)


def test_temperature_scales_the_student_logits():
    logits, t_logp_all = _random_case(b=1, t=2, v=5, seed=4)
    ids = torch.arange(5).expand(1, 2, 5).contiguous()
    mask = torch.ones(1, 2, dtype=torch.bool)
    a, _ = topk_reverse_kl(logits, ids, t_logp_all, mask, temperature=2.0)
    b, _ = topk_reverse_kl(logits / 2.0, ids, t_logp_all, mask)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)

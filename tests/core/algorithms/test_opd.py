"""OPD advantage: a hand-derived example, masking, the loop reference, the slime-style sum."""

from __future__ import annotations

import math

import torch

from core.algorithms.distill import combine_advantages, opd_token_advantages
from tests.core.algorithms.reference import naive_opd

TOL = {"rtol": 1e-6, "atol": 1e-7}


def test_hand_derived_example():
    # One sample, three slots: a prompt slot and two generated tokens.
    #   token 1: teacher p = 1/2, student p = 1/4 → Â = ln(1/2) − ln(1/4) = ln 2 ≈ 0.693147
    #   token 2: teacher p = 1/8, student p = 1/2 → Â = ln(1/8) − ln(1/2) = −ln 4 ≈ −1.386294
    # The prompt slot holds garbage log-probs (−inf) and gets exactly 0.
    teacher = torch.tensor([[-math.inf, math.log(0.5), math.log(0.125)]])
    student = torch.tensor([[0.0, math.log(0.25), math.log(0.5)]])
    tokens = torch.tensor([[False, True, True]])
    adv, m = opd_token_advantages(teacher, student, tokens)
    torch.testing.assert_close(adv, torch.tensor([[0.0, math.log(2), -math.log(4)]]), **TOL)
    # mean Â = (ln 2 − 2 ln 2)/2 = −ln2/2; sampled reverse KL = −mean = ln 2 / 2 ≈ 0.346574
    torch.testing.assert_close(m["reverse_kl"], torch.tensor(math.log(2) / 2), **TOL)
    torch.testing.assert_close(m["adv_mean"], torch.tensor(-math.log(2) / 2), **TOL)
    # population std of {ln 2, −2 ln 2} around −ln2/2: both deviations are 1.5 ln 2
    torch.testing.assert_close(m["adv_std"], torch.tensor(1.5 * math.log(2)), **TOL)
    assert int(m["n_tokens"]) == 2


def test_no_gradient_through_the_advantage():
    student = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv, _ = opd_token_advantages(torch.tensor([[-0.5, -0.5]]), student, torch.ones(1, 2).bool())
    assert not adv.requires_grad  # sg(·): the advantage is a constant of the loss


def test_matches_loop_reference_on_random_batch():
    g = torch.Generator().manual_seed(3)
    teacher = -torch.rand(5, 9, generator=g) * 4
    student = -torch.rand(5, 9, generator=g) * 4
    tokens = torch.rand(5, 9, generator=g) > 0.4
    adv, m = opd_token_advantages(teacher, student, tokens)
    torch.testing.assert_close(adv, torch.tensor(naive_opd(teacher, student, tokens)), **TOL)
    kept = [t - s for t, s, k in zip(teacher.flatten(), student.flatten(), tokens.flatten()) if k]
    torch.testing.assert_close(m["reverse_kl"], -torch.stack(kept).mean(), **TOL)


def test_no_scored_token_gives_zero_metrics_not_nan():
    adv, m = opd_token_advantages(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3).bool())
    assert adv.eq(0).all() and float(m["reverse_kl"]) == 0.0 and float(m["adv_std"]) == 0.0


def test_combine_is_task_plus_weighted_opd():
    task = torch.tensor([[0.0, 1.0, 1.0]])
    opd = torch.tensor([[0.0, 0.5, -2.0]])
    # Â = Â_task + 0.5·Â_opd = [0, 1.25, 0]
    assert combine_advantages(task, opd, opd_weight=0.5).tolist() == [[0.0, 1.25, 0.0]]
    assert combine_advantages(None, opd, opd_weight=2.0).tolist() == [[0.0, 1.0, -4.0]]
    assert combine_advantages(task, None, opd_weight=2.0) is task

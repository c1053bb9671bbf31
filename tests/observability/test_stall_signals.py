"""Stall suspects (``observability.stall_signals``) on a small hand-written store: each level
derived by hand in the comments, and the suspects table ranks the missing signal first."""

from __future__ import annotations

import numpy as np
import pytest

from observability import DuckDBTelemetry, TelemetryConfig, open_run
from observability import analysis as A
from observability.stall_signals import stall_levels

STEPS = 12


def _run(
    path, *, group_rewards, kl=None, penalty=None, penalty_weight=-0.6, explained_variance=None
):
    """``STEPS`` steps; per step two groups of two samples with rewards ``group_rewards(step)``
    -> [[a, b], [c, d]]; ``kl``: route -> KL per step (teacher_routes); ``penalty``: length values
    per step (weight ``penalty_weight``, beside a weight-1 verifier); ``explained_variance`` per
    step."""
    tel = DuckDBTelemetry(path, config=TelemetryConfig(compact_on_close=False))
    for step in range(STEPS):
        ev = None if explained_variance is None else explained_variance[step]
        tel.emit("steps", {"step": step, "policy_version": step, "clip_fraction": 0.0,
                           "value_explained_variance": ev})  # fmt: skip
        rewards = np.array(group_rewards(step), dtype=np.float64).ravel()
        ids = np.arange(4 * step, 4 * step + 4)
        teacher = ["same", "same", "far", "far"] if kl else None  # OPD samples name their teacher
        tel.emit("samples", {"step": step, "sample_id": ids, "group_id": [0, 0, 1, 1],
                             "reward": rewards, "advantage": 0.0, "status": "trained",
                             "staleness": 0, "policy_version_rollout": step,
                             "teacher_id": teacher})  # fmt: skip
        for route, values in (kl or {}).items():
            domain, teacher = route.split("->")
            tel.emit("teacher_routes", {"step": step, "domain": domain, "teacher_id": teacher,
                                        "payload": "sampled", "n_tokens": 10,
                                        "reverse_kl": values[step]})  # fmt: skip
        if penalty is not None:
            terms = (("verifier", 1.0, rewards), ("length", penalty_weight, penalty[step]))
            for comp, w, v in terms:
                tel.emit("reward_components", {"step": step, "sample_id": ids, "component": comp,
                                               "weight": w, "value": v})  # fmt: skip
    tel.close()
    return open_run(path)


def test_zero_variance_groups_trailing_mean_and_rank(tmp_path):
    # step 0: group 0 [1, 1] flat, group 1 [0, 1] not → 0.5; every later step both flat → 1.0;
    # trailing 3: [0.5, 0.75, 0.8333, 1, 1, ...]
    def rewards(step):
        return [[1, 1], [0, 1]] if step == 0 else [[1, 1], [0, 0]]

    con = _run(tmp_path / "r", group_rewards=rewards)
    levels = stall_levels(con, A.resolve_run_id(con, None))
    np.testing.assert_allclose(levels["zero_variance_groups"][:4], [0.5, 0.75, 5 / 6, 1.0])
    # the advantage of samples outside flat groups: step 0's group 1 (advantage 0) → 1 − 0 = 1
    assert (
        levels["advantage_magnitude"][0] == 1.0 and levels["advantage_magnitude"][1:].isna().all()
    )
    table = A.suspects(con)
    # zero_variance_groups: excess (level − floor 0.7)/0.1 = [0, 0.5, 1.33, 3 ×9]: strength
    # (0.5 + 1.3333 + 27)/12 = 2.40278, first moved index 2 → earliness 1 − 2/12
    top = table.iloc[0]
    assert top["suspect"] == "zero_variance_groups" and top["first_step"] == 2
    assert top["strength"] == pytest.approx((0.5 + 4 / 3 + 27) / 12)
    assert top["score"] == pytest.approx(np.log2(1 + top["strength"]) * (0.5 + 0.5 * (10 / 12)))
    # advantage_magnitude moved at step 0 only: strength (1/0.5)/12, earliness 1
    adv = table.set_index("suspect").loc["advantage_magnitude"]
    assert adv["score"] == pytest.approx(np.log2(1 + 2 / 12)) and adv["score"] < top["score"]


def test_teacher_routes_near_zero_and_not_falling(tmp_path):
    kl = {
        "addition->same": np.zeros(STEPS),  # teaches nothing: 1 − 0/0.01 = 1 every step
        # KL never falls, it rises: 0.5 for 10 steps, then 0.8
        "subtraction->far": np.array([0.5] * 10 + [0.8] * 2),
    }
    con = _run(tmp_path / "r", group_rewards=lambda s: [[0, 1], [0, 1]], kl=kl)
    levels = stall_levels(con, A.resolve_run_id(con, None))
    assert (levels["opd_signal:addition->same"] == 1.0).all()
    assert (levels["opd_signal:subtraction->far"] == 0.0).all()
    far = levels["teacher_kl:subtraction->far"]
    # warm-up, then trailing 5 / start 0.5: (4·0.5 + 0.8)/5 = 0.56 → 1.12; (3·0.5 + 1.6)/5 → 1.24
    assert far[:10].isna().all() and np.allclose(far[10:], [1.12, 1.24])
    assert levels["teacher_kl:addition->same"].isna().all()  # start KL < 0.01: near zero instead
    table = A.suspects(con).set_index("suspect")
    # near zero: excess (1 − 0)/0.5 = 2 every step → log2(3) · 1; not falling: excess
    # (ratio − 0.9)/0.1 = 2.2, 3.4 at steps 10, 11 → strength 5.6/12, earliness 1 − 10/12
    assert table.loc["opd_signal:addition->same", "score"] == pytest.approx(np.log2(3))
    assert table.loc["teacher_kl:subtraction->far", "score"] == pytest.approx(
        np.log2(1 + 5.6 / 12) * (0.5 + 0.5 * 2 / 12)
    )
    assert table.index[0] == "opd_signal:addition->same"


def test_falling_component_and_critic(tmp_path):
    # length (weight −0.6) 0 for 6 steps, then 1: contribution [0 ×6, −0.6 ×6]; trailing 5 (from
    # the 3rd step) at steps 6..8 = −0.12, −0.24, −0.36; start = mean of the first
    # max(3, 12 // 10) = 3 steps = 0; the verifier (accuracy 0.5 every step) did not fall
    penalty = [0.0] * 6 + [1.0] * 6
    ev = [-0.5] * STEPS  # the critic explains less than the mean: level 0.5 every step
    con = _run(
        tmp_path / "r",
        group_rewards=lambda s: [[0, 1], [0, 1]],
        penalty=penalty,
        explained_variance=ev,
    )
    levels = stall_levels(con, A.resolve_run_id(con, None))
    falling = levels["reward_falling:length"]
    assert falling[:2].isna().all()  # fewer than 3 steps in the trailing window
    np.testing.assert_allclose(falling[2:9], [0, 0, 0, 0, 0.12, 0.24, 0.36])
    assert "reward_falling:verifier" not in levels  # the task reward itself is not a suspect
    np.testing.assert_allclose(levels["critic_explained_variance"], 0.5)
    table = A.suspects(con).set_index("suspect")
    # critic: excess (0.5 − 0.1)/0.2 = 2 every step → log2(3)
    assert table.loc["critic_explained_variance", "score"] == pytest.approx(np.log2(3))
    assert table.loc["reward_falling:length", "moved"]
    assert table.loc["reward_falling:length", "first_step"] == 7  # 0.24 / τ 0.2 ≥ 1


def test_component_falling_with_the_task_reward_is_no_suspect(tmp_path):
    # every answer right for 6 steps, then every answer wrong: the verifier's accuracy falls by
    # the same trailing amounts as the length contribution (weight −1, value = 1 − accuracy)
    def rewards(step):
        return [[1, 1], [1, 1]] if step < 6 else [[0, 0], [0, 0]]

    penalty = [0.0] * 6 + [1.0] * 6
    con = _run(tmp_path / "r", group_rewards=rewards, penalty=penalty, penalty_weight=-1.0)
    levels = stall_levels(con, A.resolve_run_id(con, None))
    np.testing.assert_allclose(levels["reward_falling:length"][2:], 0.0, atol=1e-12)

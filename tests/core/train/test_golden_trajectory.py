"""The loop's math is pinned: a fixed-seed 20-step run reproduces its per-step loss, reward,
train/rollout mismatch and masked fraction, and the final weights' checksum.

Refactors of the loop must leave this test passing unchanged. It drives only stable interfaces
(the CLI, the run's telemetry, the run's checkpoint). The run uses a bf16 rollout engine and a
tight IcePop band (β = 1.05) so that the mismatch and the masked fraction are real signals, not
float noise. Tolerances: the values were produced on one x86 CPU with one torch thread; another
CPU's BLAS kernels change float bits (~1e-7 relative per matmul), so the loss and the mismatch
are compared at 1e-3 relative, the masked fraction within about one token of ~200, the reward
exactly. A change of the math moves far more: one sample flipped in the batch moves the reward
by 1/64. The weights checksum is a float projection of every parameter (their sum, and their
sum against a fixed pseudo-random sign vector), not a byte hash, for the same reason.
"""

from __future__ import annotations

import math

import pytest
import torch

GOLDEN_STEPS = 20
# fmt: off
# per step: (loss, reward_mean, mismatch_abs_mean, masked_fraction)
GOLDEN = {
    "steps": [
        (-0.0058318087831139565, 0.5, 0.003705920884385705, 0.010000000000000009),
        (-0.007767025846987963, 0.484375, 0.0024778288789093494, 0.004464285714285698),
        (-0.03565245494246483, 0.640625, 0.004243598785251379, 0.015000000000000013),
        (-0.013106515631079674, 0.671875, 0.005093604326248169, 0.01990049751243783),
        (-3.725290298461914e-09, 0.328125, 0.0035774295683950186, 0.0),
        (-0.005425306968390942, 0.625, 0.0063299923203885555, 0.02336448598130836),
        (6.38621200366174e-09, 0.609375, 0.005028023384511471, 0.013215859030836996),
        (-0.026376351714134216, 0.578125, 0.004005108028650284, 0.015000000000000013),
        (-0.011864322237670422, 0.59375, 0.0034045919310301542, 0.004464285714285698),
        (-0.0035049517173320055, 0.234375, 0.005464052315801382, 0.013392857142857095),
        (-0.03104150854051113, 0.546875, 0.006147539708763361, 0.02777777777777779),
        (-0.007440311834216118, 0.453125, 0.007082722149789333, 0.01851851851851849),
        (-0.021565455943346024, 0.546875, 0.0047204699367284775, 0.009756097560975618),
        (-0.008056038059294224, 0.546875, 0.004434429109096527, 0.00462962962962965),
        (-0.03069017082452774, 0.625, 0.005376759450882673, 0.014423076923076872),
        (-0.029493296518921852, 0.609375, 0.004964150954037905, 0.02314814814814814),
        (-0.025124097242951393, 0.53125, 0.00941651314496994, 0.009478672985781977),
        (0.009139718487858772, 0.5625, 0.008770940825343132, 0.05238095238095242),
        (-0.018287070095539093, 0.75, 0.005505014676600695, 0.013392857142857095),
        (-0.022660357877612114, 0.71875, 0.005408724769949913, 0.015000000000000013),
    ],
    "weights_sum": 793.5660673126235,
    "weights_signed_sum": 26.7882752066522,
}
# fmt: on


def _weights_checksum(path) -> tuple[float, float]:
    from safetensors.torch import load_file

    weights = load_file(str(path / "model.safetensors"))
    total, signed = 0.0, 0.0
    g = torch.Generator().manual_seed(12345)
    for name in sorted(weights):
        w = weights[name].double().flatten()
        sign = torch.randint(0, 2, w.shape, generator=g, dtype=torch.int64).double() * 2 - 1
        total += float(w.sum())
        signed += float((w * sign).sum())
    return total, signed


def golden_run(tmp_path):
    from core.cli import main
    from observability import open_run

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rc = main(
            [
                "train",
                "--steps",
                str(GOLDEN_STEPS),
                "--seed",
                "0",
                "--run-dir",
                str(tmp_path),
                "--set",
                "train.eval_every=0",
                "--set",
                "train.eval_size=16",
                "--set",
                'rollout.precision="bf16"',
                "--set",
                "algorithm.icepop_beta=1.05",
            ]
        )
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    (run_dir,) = list(tmp_path.iterdir())
    rows = (
        open_run(run_dir)
        .execute(
            "SELECT step, loss, reward_mean, mismatch_abs_mean, masked_fraction "
            "FROM steps ORDER BY step"
        )
        .fetchall()
    )
    return rows, _weights_checksum(run_dir / "checkpoint")


@pytest.mark.slow
def test_fixed_seed_run_reproduces_the_pinned_trajectory(tmp_path):
    rows, (total, signed) = golden_run(tmp_path)
    assert [r[0] for r in rows] == list(range(GOLDEN_STEPS))
    for got, want in zip(rows, GOLDEN["steps"], strict=True):
        step, loss, reward, mismatch, masked = got
        assert math.isclose(loss, want[0], rel_tol=1e-3, abs_tol=1e-6), (step, loss, want[0])
        assert math.isclose(reward, want[1], rel_tol=1e-9), (step, reward, want[1])
        assert math.isclose(mismatch, want[2], rel_tol=1e-3), (step, mismatch, want[2])
        assert math.isclose(masked, want[3], abs_tol=6e-3), (step, masked, want[3])
    assert math.isclose(total, GOLDEN["weights_sum"], rel_tol=1e-5), total
    assert math.isclose(signed, GOLDEN["weights_signed_sum"], abs_tol=1e-3), signed

"""The loop's math is pinned: a fixed-seed 20-step run reproduces its per-step reward, loss,
train/rollout mismatch and masked fraction, and the final weights' checksum.

Refactors of the loop must leave this test passing unchanged. It drives only stable interfaces
(the CLI, the run's telemetry, the run's checkpoint). The rollout engine runs in bf16, so the
train/rollout mismatch is a real signal (~5e-3 nats per token), not float noise.

What is pinned exactly is what no CPU changes: the step indices, every step's reward (64 sampled
answers, verified), and the masked fraction. IcePop keeps its default band (β = 2): the bf16
mismatch of a token moves by up to one bf16 ulp of a logit (0.03 to 0.06 nats) with the CPU's
kernels, so at a tight band (β = 1.05, an earlier version of this test) a token near the band's
edge was kept on one CPU and masked on another, and the two runs forked at step 10 (loss off by
60%, rewards off from step 17). At β = 2 no token comes near the edge: nothing is masked on any
kernel set measured. IcePop's masking itself is tested in tests/core/algorithms/test_trust.py.

Floats are compared with tolerances measured across kernel sets, with one torch thread: native
(AVX2 on an AMD EPYC), ATEN_CPU_CAPABILITY=default, ATEN_CPU_CAPABILITY=avx2, and default with
MKL_CBWR=COMPATIBLE and ONEDNN_MAX_CPU_ISA=SSE41 (another BLAS code path):
- loss: identical to the last bit on all four; rel 1e-3 (abs 1e-6: on most steps the token-mean
  of on-policy GRPO terms is ~1e-9, float noise around zero; a changed step moves it by ~1e-2);
- mismatch per step: up to 2.4% apart (one token's logit crossing a bf16 rounding boundary; the
  CPU of the earlier pins: 1.9% at step 0); rel 0.1. Its 20-step mean: up to 0.18% apart; rel 0.03.
  The fp32 engine's mismatch is ~1e-7, so a change of the rollout's precision shows at once;
- weights: sum up to 1.7e-9 relative apart, signed sum up to 7e-6 apart; rel 1e-5 and abs 1e-3.
  The checksum is a float projection of every parameter (their sum, and their sum against a fixed
  pseudo-random sign vector), not a byte hash: the kernels change the low bits.
A change of the math moves far more: one sample flipped in the batch moves the reward by 1/64.
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
        (-2.38418573772492e-09, 0.5, 0.003637013491243124, 0.0),
        (-5.321843521421954e-10, 0.484375, 0.0025794750545173883, 0.0),
        (-7.1525572131747595e-09, 0.65625, 0.006165328435599804, 0.0),
        (0.006422842387109995, 0.671875, 0.003937823232263327, 0.0),
        (-3.725290298461914e-09, 0.328125, 0.004528833553195, 0.0),
        (8.912843796338166e-09, 0.625, 0.004262350033968687, 0.0),
        (-2.100604135080175e-09, 0.640625, 0.0034493040293455124, 0.0),
        (-2.38418573772492e-09, 0.5625, 0.007390908431261778, 0.0),
        (-5.321843521421954e-10, 0.59375, 0.0031387191265821457, 0.0),
        (4.257474817137563e-09, 0.234375, 0.007616930175572634, 0.0),
        (3.86326393098102e-09, 0.5625, 0.00770955067127943, 0.0),
        (6.622738357719982e-09, 0.421875, 0.010361943393945694, 0.0),
        (1.2793192283311328e-08, 0.546875, 0.004847841337323189, 0.0),
        (-4.4151589051466544e-09, 0.546875, 0.004571573343127966, 0.0),
        (-2.292486422916795e-09, 0.625, 0.004217342007905245, 0.0),
        (4.691106170184867e-09, 0.671875, 0.005362964700907469, 0.0),
        (-0.018355339765548706, 0.546875, 0.0062375436536967754, 0.0),
        (0.03104151226580143, 0.59375, 0.00701137725263834, 0.0),
        (-5.3218434103996515e-09, 0.75, 0.004626796580851078, 0.0),
        (2.6822091214739885e-09, 0.671875, 0.007018751930445433, 0.0),
    ],
    "weights_sum": 793.8800029129011,
    "weights_signed_sum": 26.86194215461893,
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
@pytest.mark.float_sensitive
def test_fixed_seed_run_reproduces_the_pinned_trajectory(tmp_path):
    rows, (total, signed) = golden_run(tmp_path)
    assert [r[0] for r in rows] == list(range(GOLDEN_STEPS))
    # exact: what no CPU changes
    assert [r[2] for r in rows] == [want[1] for want in GOLDEN["steps"]]
    assert [r[4] for r in rows] == [want[3] for want in GOLDEN["steps"]]
    for got, want in zip(rows, GOLDEN["steps"], strict=True):
        step, loss, _, mismatch, _ = got
        assert math.isclose(loss, want[0], rel_tol=1e-3, abs_tol=1e-6), (step, loss, want[0])
        assert math.isclose(mismatch, want[2], rel_tol=0.1), (step, mismatch, want[2])
    mean_mismatch = sum(r[3] for r in rows) / GOLDEN_STEPS
    want_mean = sum(w[2] for w in GOLDEN["steps"]) / GOLDEN_STEPS
    assert math.isclose(mean_mismatch, want_mean, rel_tol=0.03), (mean_mismatch, want_mean)
    assert math.isclose(total, GOLDEN["weights_sum"], rel_tol=1e-5), total
    assert math.isclose(signed, GOLDEN["weights_signed_sum"], abs_tol=1e-3), signed

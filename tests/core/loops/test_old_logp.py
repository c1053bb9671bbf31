"""π_old of the update, through the real loop: the trainer's recompute by default, the same
recompute as its own forward with ``algorithm.old_logp = "separate"`` (identical while the actor is
deterministic, noisy under a nondeterministic Top-k kernel), the rollout's reported log-probs with
``algorithm.old_logp = "rollout"`` (the seed's async update), recorded in ``tokens.old_logp``."""

from __future__ import annotations

from contracts import run_gate
from observability import open_run
from tests.conftest import make_run

REPEAT = "sparse_version.trainer_forward_repeatable"

SQL = """
SELECT count(*) AS n,
       max(abs(old_logp - rollout_logp)) AS d_rollout,
       max(abs(old_logp - train_logp)) AS d_train,
       bool_and(ratio = exp(train_logp - rollout_logp)) AS ratio_vs_rollout
FROM tokens WHERE role = 'action'
"""


def test_default_old_logp_is_the_trainer_recompute(tiny_run_bf16):
    n, d_rollout, d_train, _ = open_run(tiny_run_bf16).execute(SQL).fetchone()
    assert n > 0 and d_train == 0.0 and d_rollout > 0.0  # bf16 rollout: the two differ
    gate = run_gate(tiny_run_bf16, record=False)  # a shared fixture: read only
    assert gate.result(REPEAT).status == "not_applicable"  # no second forward


def test_async_is_update_uses_rollout_logprobs(tmp_path):
    run = make_run(
        tmp_path,
        [
            'rollout.precision="bf16"',
            'algorithm.policy_loss="is"',
            'algorithm.old_logp="rollout"',
            'algorithm.trust_rule="dis"',
        ],
        name="async-is",
    )
    con = open_run(run)
    n, d_rollout, d_train, _ = con.execute(SQL).fetchone()
    assert n > 0 and d_rollout == 0.0 and d_train > 0.0
    loss, clip = con.execute("SELECT max(abs(loss)), max(clip_fraction) FROM steps").fetchone()
    assert loss > 0.0 and clip == 0.0  # the IS loss never clips


def test_separate_old_logp_pass_equals_the_recompute_for_a_deterministic_actor(tmp_path):
    run = make_run(tmp_path, ['algorithm.old_logp="separate"'], name="separate")
    n, _, d_train, _ = open_run(run).execute(SQL).fetchone()
    assert n > 0 and d_train == 0.0  # the same fp32 forward twice: bitwise equal on the CPU
    assert run_gate(run).result(REPEAT).status == "pass"


def test_separate_old_logp_pass_carries_a_nondeterministic_actor_kernel(tmp_path):
    run = make_run(
        tmp_path,
        [
            "model.dsa_topk=4",
            'train.topk_mode="nondeterministic"',
            "train.topk_noise=3.0",
            'algorithm.old_logp="separate"',
        ],
        name="separate-nd",
    )
    n, _, d_train, _ = open_run(run).execute(SQL).fetchone()
    assert n > 0 and d_train > 0.1  # π_old and π_θ attended to different key sets: ratio ≠ 1
    # the gate catches the nondeterministic trainer kernel, naming the worst token
    result = run_gate(run).result(REPEAT)
    assert result.status == "fail" and result.n_violations > 0
    assert result.observed == result.examples[0]["repeat_abs"] > 0.1

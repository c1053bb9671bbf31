"""The emit API's building blocks: ``Trajectory`` validation, its ``samples`` / ``tokens``
columns, the step rollups (hand-derived golden values and a per-token loop reference),
``emit_step`` through the real sink, and ``unrecorded_in``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from observability import DuckDBTelemetry, Trajectory, emit_step, open_run, step_columns
from observability.emit_step import unrecorded_in
from observability.rollup import step_rollup
from observability.trajectory import token_columns


def golden() -> list[Trajectory]:
    """Two samples whose rollups are derived by hand in ``test_rollup_golden_values``."""
    a = Trajectory(
        sample_id=0,
        token_ids=[10, 11, 12, 13, 14],
        n_prompt=2,
        rollout_logp=[0.0, 0.0, -1.0, -0.5, -2.0],
        train_logp=[0.0, 0.0, -1.1, -0.5, -1.7],
        trust_mask=[True, True, True, False, True],
        train_token_ids=[10, 11, 12, 99, 14],
        entropy=[0.0, 0.0, 1.0, 2.0, 3.0],
        reward=1.0,
        sample={"group_id": 7},
    )
    b = Trajectory(
        sample_id=1,
        token_ids=[20, 21, 22, 23],
        n_prompt=1,
        action=[False, True, False, True],  # position 2: tool output
        rollout_logp=[np.nan, -0.2, np.nan, -0.4],
        train_logp=[np.nan, -0.2, np.nan, -0.6],
        trust_mask=[False, True, False, True],
        train_token_ids=np.ma.masked_array([20, 21, 22, 0], mask=[0, 0, 0, 1]),  # one short
        reward=0.0,
        sample={"group_id": 7},
    )
    return [a, b]


def test_rollup_golden_values():
    r = step_rollup(golden())
    # |train - rollout| on the five action tokens: A 0.1, 0.0, 0.3; B 0.0, 0.2 -> mean 0.6 / 5
    assert r["mismatch_abs_mean"] == pytest.approx(0.12, abs=1e-12)
    # sorted [0, 0, 0.1, 0.2, 0.3]; linear p99 at index 0.99 * 4 = 3.96: 0.2 + 0.96 * 0.1
    assert r["mismatch_abs_p99"] == pytest.approx(0.296, abs=1e-12)
    # loss tokens = actions (5); the trust mask drops A's position 3 -> 4 kept, 1/5 masked
    assert (r["n_loss_tokens"], r["n_trusted_tokens"]) == (5, 4)
    assert r["masked_fraction"] == pytest.approx(0.2)
    # trainer ids differ at A pos 3 and are missing at B pos 3: 2 of 5 action tokens
    assert r["retokenized_fraction"] == pytest.approx(0.4)
    assert r["n_tokens"] == 9
    assert "entropy" not in r  # B records none: not a rollup of part of the step
    # rewards 1 and 0: mean 0.5, population std 0.5; one group with differing rewards
    assert (r["reward_mean"], r["reward_std"], r["degenerate_group_fraction"]) == (0.5, 0.5, 0.0)
    # a sample left out of the loss: its 2 trusted action tokens count as masked (2 of 7)
    out = Trajectory(
        sample_id=2,
        token_ids=[1, 2, 3],
        n_prompt=1,
        loss_mask=[False, False, False],
        trust_mask=[True, True, True],
        status="masked",
    )
    r = step_rollup([*golden(), out])
    assert (r["n_loss_tokens"], r["n_trusted_tokens"]) == (5, 4)
    assert r["masked_fraction"] == pytest.approx(1 - 4 / 7)


def test_rollup_matches_a_per_token_loop():
    rng = np.random.default_rng(3)
    trajs = []
    for i in range(6):
        n, p = int(rng.integers(3, 12)), int(rng.integers(1, 3))
        trajs.append(
            Trajectory(
                sample_id=i,
                token_ids=rng.integers(0, 50, n),
                n_prompt=p,
                action=rng.random(n) < 0.8,
                rollout_logp=-rng.random(n),
                train_logp=-rng.random(n),
            )
        )
    deltas = []
    for tr in trajs:
        for t in range(tr.n_tokens):
            if t >= tr.n_prompt and tr.action[t]:
                deltas.append(abs(tr.train_logp[t] - tr.rollout_logp[t]))
    deltas.sort()
    k = 0.99 * (len(deltas) - 1)
    lo = math.floor(k)
    p99 = deltas[lo] + (k - lo) * (deltas[min(lo + 1, len(deltas) - 1)] - deltas[lo])
    r = step_rollup(trajs)
    assert r["mismatch_abs_mean"] == pytest.approx(sum(deltas) / len(deltas), rel=1e-12)
    assert r["mismatch_abs_p99"] == pytest.approx(p99, rel=1e-12)


def test_token_columns_roles_nulls_and_trainer_ids():
    cols = token_columns(3, golden())
    assert cols["pos"].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert cols["role"].tolist() == [0, 0, 1, 1, 1, 0, 1, 2, 1]  # prompt/action/observation
    assert cols["loss_mask"].tolist() == [False, False, True, True, True, False, True, False, True]
    rollout = cols["rollout_logp"]
    assert np.ma.getmaskarray(rollout).tolist() == [not x for x in cols["loss_mask"]]
    np.testing.assert_allclose(cols["ratio"].compressed(), np.exp([-0.1, 0, 0.3, 0, -0.2]), 1e-6)
    assert cols["trust_mask"].tolist() == [
        False,
        False,
        True,
        False,
        True,
        False,
        True,
        False,
        True,
    ]
    assert cols["train_token_id"].tolist() == [10, 11, 12, 99, 14, 20, 21, 22, None]
    assert (cols["step"] == 3).all() and cols["sample_id"].tolist() == [0] * 5 + [1] * 4


def test_trajectory_rejects_bad_input_naming_sample_and_field():
    with pytest.raises(ValueError, match="sample_id=5: train_logp has shape"):
        Trajectory(sample_id=5, token_ids=[1, 2, 3], n_prompt=1, train_logp=[-1.0])
    with pytest.raises(ValueError, match=r"sample_id=5: n_prompt=4 outside \[0, 3\]"):
        Trajectory(sample_id=5, token_ids=[1, 2, 3], n_prompt=4)
    with pytest.raises(ValueError, match="status 'done' not in"):
        Trajectory(sample_id=5, token_ids=[1, 2, 3], n_prompt=1, status="done")
    with pytest.raises(ValueError, match="token_ids: integer values expected"):
        Trajectory(sample_id=5, token_ids=[1.5, 2.0], n_prompt=1)
    # non-finite log-probs become nulls (the gate's logp_finite reports them)
    tr = Trajectory(sample_id=1, token_ids=[1, 2], n_prompt=1, rollout_logp=[0.0, np.inf])
    assert np.isnan(tr.rollout_logp[1])


def test_emit_step_writes_a_readable_run_and_declares_what_it_lacks(tmp_path):
    trajs = golden()
    columns = step_columns(0, trajs, policy_version=1, loss=0.25)
    unrecorded = unrecorded_in(columns)
    assert "tokens.entropy" not in unrecorded  # A records it (B's rows are null)
    assert {"tokens.old_logp", "steps.lr", "topk", "samples.tokenizer_rev"} <= set(unrecorded)
    assert not {"steps.loss", "samples.reward", "tokens.train_token_id"} & set(unrecorded)
    sink = DuckDBTelemetry(tmp_path / "run", run_info={"unrecorded": unrecorded})
    emit_step(sink, 0, trajs, policy_version=1, loss=0.25)
    sink.close()
    con = open_run(tmp_path / "run")
    assert con.execute("SELECT count(*) FROM tokens").fetchone() == (9,)
    step = con.execute("SELECT loss, mismatch_abs_mean, policy_version FROM steps").fetchone()
    assert step == (0.25, pytest.approx(0.12), 1)
    assert con.execute("SELECT list(status ORDER BY sample_id) FROM samples").fetchone() == (
        ["trained", "trained"],
    )
    with pytest.raises(ValueError, match="sample_ids repeat"):
        step_columns(1, [trajs[0], trajs[0]], policy_version=2)

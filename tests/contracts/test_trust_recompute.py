"""The SQL recomputation of the trust mask against the core's ``trust_mask`` (the reference).

Synthetic runs through the real writer: log-probs with ratios on both sides of every bound,
reasons from ``core.algorithms.policy.trust_mask`` for each declared rule; the check must agree
on every judged token, skip only tokens within the policy's tolerance of a bound, and flag a
single flipped token.
"""

import math

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import torch

from contracts.checks.action import trust_mask_recomputed
from contracts.context import CheckContext
from contracts.policy import Policy
from core.algorithms.policy import REASONS, trust_mask
from observability import DuckDBTelemetry, TelemetryConfig, open_run
from tests.contracts.store_edit import edit_rows

B, T, N_PROMPT = 4, 48, 6
BETA, EPS_LOW, EPS_HIGH = 2.0, 0.2, 0.28
RULE_INFO = {
    "icepop": {"icepop_beta": BETA},
    "dis": {"dis_eps_low": EPS_LOW, "dis_eps_high": EPS_HIGH},
    "none": {},
}


def write_run(run_dir, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A run whose tokens carry the core's trust mask; returns (log-ratio [B, T], action [B, T])."""
    g = torch.Generator().manual_seed(0)
    train = -1.5 - torch.rand(B, T, generator=g) * 3  # [B, T] in [-4.5, -1.5]
    delta = (torch.rand(B, T, generator=g) * 2 - 1) * 1.2  # log-ratio in [-1.2, 1.2]
    # Hand-placed ratios: 1 (kept by every rule), 3 and 1/3 (outside IcePop beta=2),
    # 1.3 (above DIS 1 + 0.28) and 0.75 (below DIS 1 - 0.2).
    delta[0, N_PROMPT : N_PROMPT + 5] = torch.log(torch.tensor([1.0, 3.0, 1 / 3, 1.3, 0.75]))
    # Ratios on a bound (beta, 1/beta, 1 + eps_high, 1 - eps_low): which side fp32 rounding
    # lands on is arbitrary, so the check must skip them rather than judge them.
    delta[1, N_PROMPT : N_PROMPT + 4] = torch.log(
        torch.tensor([BETA, 1 / BETA, 1 + EPS_HIGH, 1 - EPS_LOW])
    )
    rollout = train - delta  # [B, T] <= -0.3 < 0 since |delta| <= 1.2
    action = torch.zeros(B, T, dtype=torch.bool)
    action[:, N_PROMPT:] = True
    mask, m = trust_mask(
        train, rollout, action, rule=rule, beta=BETA, eps_low=EPS_LOW, eps_high=EPS_HIGH
    )
    reason = m["reason"]
    golden = {
        "icepop": ["kept", "icepop", "icepop", "kept", "kept"],
        "dis": ["kept", "dis_high", "dis_low", "dis_high", "dis_low"],
        "none": ["kept"] * 5,
    }[rule]
    assert [REASONS[i] for i in reason[0, N_PROMPT : N_PROMPT + 5].tolist()] == golden

    info = {
        "vocab_size": 320,
        "staleness_limit": 4,
        "config": {"algorithm": {"trust_rule": rule}},
        **RULE_INFO[rule],
    }
    tel = DuckDBTelemetry(run_dir, run_info=info, config=TelemetryConfig(compact_on_close=False))
    tel.emit(
        "samples",
        {
            "sample_id": np.arange(B),
            "step": 0,
            "status": "trained",
            "policy_version_rollout": 0,
            "policy_version_train": 0,
            "staleness": 0,
        },
    )
    act = action.flatten().numpy()
    tel.emit(
        "tokens",
        {
            "step": 0,
            "sample_id": np.repeat(np.arange(B), T),
            "pos": np.tile(np.arange(T, dtype=np.int32), B),
            "token_id": 5,
            "role": np.where(act, "action", "prompt"),
            "loss_mask": act,
            "rollout_logp": pa.array(rollout.flatten().numpy(), mask=~act),  # null on prompts
            "train_logp": pa.array(train.flatten().numpy(), mask=~act),
            "trust_mask": mask.flatten().numpy(),
            "mask_reason": np.asarray(REASONS, dtype=object)[reason.flatten().numpy()],
        },
    )
    tel.close()
    return train - rollout, action  # the float32 log-ratio the SQL recomputes from


@pytest.mark.parametrize("rule", ["icepop", "dis", "none"])
def test_sql_recompute_agrees_with_the_core_trust_mask(tmp_path, rule):
    run = tmp_path / "run"
    log_ratio, action = write_run(run, rule)
    policy = Policy()
    ctx = CheckContext(open_run(run), run_dir=run, policy=policy)
    result = trust_mask_recomputed(ctx)
    # Tokens within tol of a bound (in log-ratio) are not judged; computed here in float64
    # from the stored float32 log-probs, as the SQL does.
    bounds = {
        "icepop": [math.log(BETA), -math.log(BETA)],
        "dis": [math.log(1 + EPS_HIGH), math.log(1 - EPS_LOW)],
        "none": [],
    }[rule]
    d = log_ratio[action].double()
    near = torch.zeros_like(d, dtype=torch.bool)
    for b in bounds:
        near |= (d - b).abs() <= policy.thresholds.trust_boundary_tol
    assert (result.status, result.n_violations) == ("pass", 0)
    assert int(near.sum()) == len(bounds)  # exactly the hand-placed boundary tokens
    assert result.n_rows == int(action.sum()) - int(near.sum())

    # One kept token flipped to masked: exactly that token is reported.
    edit_rows(
        run,
        "tokens",
        (pl.col("sample_id") == 0) & (pl.col("pos") == N_PROMPT),
        {"trust_mask": False},
    )
    result = trust_mask_recomputed(CheckContext(open_run(run), run_dir=run, policy=policy))
    assert (result.status, result.n_violations) == ("fail", 1)
    (ex,) = result.examples
    assert (ex["sample_id"], ex["pos"], ex["expected_reason"]) == (0, N_PROMPT, "kept")

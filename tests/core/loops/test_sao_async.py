"""SAO through the async orchestrator: single-trajectory groups consumed as they finish, K critic
updates per policy update, skip-observation GAE over the tool environment's observations, the
agentic and long-horizon contracts hold."""

from __future__ import annotations

from pathlib import Path

from contracts import run_gate
from core.config import load_config
from core.driver import run_training
from observability import open_run

SAO_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "sao_tiny.toml"
SMALL = [
    "train.steps=3",
    "algorithm.prompts_per_step=4",
    "critic.warmup_steps=1",
    "train.eval_size=8",
    "train.eval_every=0",
    "telemetry.flush_seconds=0.5",
    "tool.latency_median_s=0.002",
    "rollout.in_flight_groups=4",
]


def test_async_sao_run(tmp_path):
    cfg = load_config(SAO_CONFIG, SMALL)
    assert cfg.rollout.mode == "async" and cfg.algorithm.group_size == 1
    run, summary = run_training(cfg, runs_root=tmp_path, telemetry="duckdb", progress=False)
    steps = summary["steps"]
    assert [m["critic_updates"] for m in steps] == [2, 2, 2]
    assert steps[0]["skip_reason"] == "critic_warmup" and not steps[0]["optimizer_stepped"]
    assert all(m["n_trajectories"] <= 4 for m in steps)
    con = open_run(run)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    assert q("SELECT count(DISTINCT group_id) = count(*) FROM samples")[0][0]  # groups of one
    assert q("SELECT count(*) FROM turns")[0][0] > 0
    # values / returns / advantages on generated tokens only; observations skipped
    assert q(
        "SELECT count(*) FROM tokens WHERE role = 'observation' AND (value IS NOT NULL "
        "OR advantage IS NOT NULL OR loss_mask)"
    ) == [(0,)]
    assert q("SELECT count(*) FROM tokens WHERE role = 'action' AND value IS NULL") == [(0,)]
    gate = run_gate(run)
    status = {r.id: r.status for r in gate.results}
    for c in (
        "long_horizon.values_finite",
        "long_horizon.critic_attention_frozen",
        "long_horizon.loss_denominator",
        "agentic.observations_not_in_loss",
        "agentic.tito_prefix_across_turns",
        "action.trust_mask_recomputed",
    ):
        assert status[c] == "pass", (c, status[c])

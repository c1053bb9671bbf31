"""The async GRPO loop end to end: its telemetry and contracts, no gradient through observation
tokens, stale samples dropped with their reason."""

from __future__ import annotations

import torch

from contracts import run_gate
from core.algorithms.policy import policy_loss
from core.config import load_config
from core.loops.async_grpo import run_async
from core.loops.session import Session
from core.loops.step import actor_forward, trainer_inputs
from core.model.actor import Actor
from core.model.checkpoint import load_checkpoint
from core.rollout.group_batch import groups_to_batch
from core.tokenizer.tokenizer import Tokenizer
from observability import open_run
from observability.telemetry import NullTelemetry
from tests.conftest import AGENTIC, AGENTIC_CONFIG
from tests.core.rollout.orchestration import orchestrator
from tests.core.rollout.script_env import ScriptSource

TOK = Tokenizer.load()


def test_async_run_records_the_agentic_telemetry_and_passes_its_contracts(agentic_run):
    con = open_run(agentic_run)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    assert q("SELECT count(*) FROM turns")[0][0] > 0
    assert q("SELECT count(*) FROM tokens WHERE role = 'observation' AND loss_mask")[0][0] == 0
    assert q("SELECT count(*) FROM tokens WHERE role = 'observation'")[0][0] > 0
    assert q("SELECT count(*) FROM tokens WHERE kv_version <> policy_version_rollout")[0][0] == 0
    assert q("SELECT count(*) FROM samples WHERE worker IS NULL AND status = 'trained'")[0][0] == 0
    phases = {r[0] for r in q("SELECT phase FROM weight_syncs WHERE engine LIKE 'worker-%'")}
    assert phases == {"send", "switch", "ack"}
    row = q("SELECT min(queue_depth), min(worker_busy_fraction), sum(n_weight_switches) FROM steps")
    assert None not in row[0]
    assert q("SELECT count(*) FROM samples WHERE status = 'env_failure'")[0][0] > 0  # injected
    gate = run_gate(agentic_run)
    agentic = [r for r in gate.results if r.contract == "agentic"]
    assert {r.check for r in agentic} >= {
        "observations_not_in_loss",
        "tito_prefix_across_turns",
        "kv_version_equals_token_version",
        "versions_monotonic_per_worker",
        "env_failures_not_trained",
    }
    # tokens of env-failed samples and dropped groups are recorded as 'dropped', as recomputed
    assert gate.result("action.trust_mask_recomputed").status == "pass"
    assert all(r.status in ("pass", "not_applicable") for r in agentic), [
        (r.check, r.status, r.message) for r in agentic
    ]


def test_observation_tokens_carry_no_gradient():
    obs = (TOK.user_id, *TOK.encode("=2"), TOK.assistant_id)
    orch, cfg, _ = orchestrator(ScriptSource(TOK, observation=obs), TOK, in_flight=1)
    orch.start()
    try:
        group = orch.take_groups(1, timeout=120).groups[0]
    finally:
        orch.stop()
    traj = groups_to_batch([group], [], tok=TOK, group_size=4).traj
    trainer_inputs(traj, tok=TOK, retokenize=False)
    weights, cfg, _ = load_checkpoint("core/assets/base_model")
    actor = Actor(cfg, seed=0)
    actor.load_weights(weights)
    fwd = actor_forward(actor, traj, temperature=1.0, replay=False)
    fwd.logits.retain_grad()
    actions = traj.targets(traj.generated & traj.train_valid)
    loss, _ = policy_loss(
        fwd.logp,
        traj.targets(traj.rollout_logp),
        torch.ones_like(fwd.logp),
        actions,
        kind="is",
        eps_low=0.2,
        eps_high=0.28,
        agg_mode="token-mean",
        denominator=actions.sum(),
    )
    loss.backward()
    grad = fwd.logits.grad.abs().sum(-1)  # [B, T-1]: slot t predicts token t + 1
    observation = traj.targets(traj.is_role("observation"))
    assert observation.any() and float(grad[observation].max()) == 0.0
    assert float(grad[actions].min()) > 0.0


def test_stale_samples_are_dropped_with_their_reason():
    # τ = 0 and rollout running ahead: the second step's samples all come from version 0
    cfg = load_config(
        AGENTIC_CONFIG,
        [
            *AGENTIC,
            "train.steps=2",
            "algorithm.staleness_limit=0",
            "rollout.in_flight_groups=6",
            "tool.crash_rate=0.0",
            "tool.malformed_rate=0.0",
            "optim.reset_on_sync=true",
        ],
    )
    s = Session(cfg, NullTelemetry(), tok=TOK)
    out = run_async(s, steps=2)
    first, second = out["steps"]
    assert first["stale_fraction"] == 0.0 and first["optimizer_stepped"]
    assert first["optimizer_reset"] and not second["optimizer_reset"]  # reset after each sync
    state = [v for st in s.optimizer.state.values() for v in st.values()]
    assert state and all(float(v.abs().sum()) == 0.0 for v in state)  # AdamW as new
    assert second["stale_fraction"] == 1.0 and second["skip_reason"] == "stale"
    assert second["staleness_max"] >= 1

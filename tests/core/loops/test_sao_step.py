"""SAO steps through the real session: K critic optimizer steps per policy step, the critic's
frozen attention untouched by the loop, skip-observation GAE on a two-turn environment (values,
returns and advantages only on generated tokens), a token-count loss denominator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.config import ConfigError, load_config
from core.loops.sao import sao_step
from core.loops.session import Session
from core.rollout.episode import ROLE
from tests.core.envs.scripted import ScriptedSource
from tests.core.loops.sinks import RecordingSink

SAO = [
    'algorithm.name="sao"',
    "algorithm.group_size=1",
    "algorithm.prompts_per_step=4",
    'algorithm.trust_rule="dis"',
    'algorithm.policy_loss="is"',
    'algorithm.old_logp="rollout"',
    'algorithm.loss_agg_mode="global-token"',
    "critic.updates_per_step=2",
]


def _steps(st) -> int:
    return max(int(v["step"]) for v in st.values())


def test_k_value_steps_per_policy_step_and_frozen_attention():
    sink = RecordingSink()
    s = Session(load_config(None, SAO), sink)
    critic = s.models.critic
    frozen = {n: p.detach().clone() for n, p in critic.module.frozen_parameters().items()}
    for step in range(2):
        m = sao_step(s, step)
        assert m["critic_updates"] == 2 and m["optimizer_stepped"]
        assert _steps(critic.optimizer.state) == 2 * (step + 1)  # K AdamW steps per step
        assert _steps(s.optimizer.state) == step + 1  # one policy step
    for n, p in critic.module.frozen_parameters().items():
        assert torch.equal(p, frozen[n]), n
    checksums = [row["critic_frozen_checksum"][0] for row in sink.tables["steps"]]
    assert len(set(checksums)) == 1
    row = sink.last("steps")
    tok = sink.last("tokens")
    n_loss = int(np.asarray(tok["loss_mask"]).sum())
    assert row["loss_denominator"] == [n_loss] and row["n_trajectories"] == [4]
    assert s.memory.live_owner_bytes().get("critic", 0) > 0  # its own ledger owner


def test_skip_observation_gae_in_the_loop():
    sink = RecordingSink()
    cfg = load_config(None, [*SAO, "rollout.max_turns=2", "rollout.max_new_tokens=4"])
    s = Session(cfg, sink)
    obs = tuple(s.tok.encode("=46"))
    s.envs = ScriptedSource(s.tok, observation=obs)
    sao_step(s, 0)
    tok = sink.last("tokens")
    role = np.asarray(tok["role"])
    gen = (role == ROLE["action"]) | (role == ROLE["summary"])
    for col in ("value", "return", "advantage"):
        present = ~np.ma.getmaskarray(tok[col])
        assert (present == gen).all(), col
    assert (role == ROLE["observation"]).sum() == 4 * len(obs)
    assert not np.asarray(tok["loss_mask"])[role == ROLE["observation"]].any()
    # γ = 1, λ = 0.95, V from a zero head at the first step: Â = Σ (γλ)^k δ, all δ = 0 except the
    # last token's R − 0: the advantage of a token is R·0.95^(generated tokens after it)
    sid = np.asarray(tok["sample_id"])
    adv = np.ma.filled(tok["advantage"], np.nan)
    rewards = dict(
        zip(sink.last("samples")["sample_id"], sink.last("samples")["reward"], strict=True)
    )
    for s_id in np.unique(sid):
        a = adv[(sid == s_id) & gen]
        expected = rewards[s_id] * 0.95 ** np.arange(len(a) - 1, -1, -1)
        np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-6)


def test_sao_needs_group_size_one():
    with pytest.raises(ConfigError, match="algorithm.group_size"):
        load_config(None, ['algorithm.name="sao"', "algorithm.group_size=4"])
    with pytest.raises(ConfigError, match="algorithm.name"):
        load_config(None, ['algorithm.name="ppo"'])

"""A GRPO step over a scripted two-turn environment: the records carry observation tokens with
their role, outside the loss, and per-token versions only on generated tokens."""

from __future__ import annotations

import numpy as np

from core.algorithms.policy import REASON
from core.config import load_config
from core.loops.grpo import train_step
from core.loops.session import Session
from core.rollout.episode import ROLE
from tests.core.envs.scripted import ScriptedSource
from tests.core.loops.sinks import RecordingSink


def test_two_turn_step_records_observations_outside_the_loss():
    sink = RecordingSink()
    cfg = load_config(
        None,
        [
            "algorithm.prompts_per_step=2",
            "algorithm.group_size=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens=4",
        ],
    )
    s = Session(cfg, sink)
    obs = tuple(s.tok.encode("=46"))
    s.envs = ScriptedSource(s.tok, observation=obs)
    m = train_step(s, 0)
    tok = sink.last("tokens")
    role = np.asarray(tok["role"])
    is_obs = role == ROLE["observation"]
    assert is_obs.sum() == 4 * len(obs)
    assert not np.asarray(tok["loss_mask"])[is_obs].any()
    assert (np.asarray(tok["mask_reason"])[is_obs] == REASON["not_action"]).all()
    assert np.ma.getmaskarray(tok["train_logp"])[is_obs].all()  # null off generated tokens
    assert np.ma.getmaskarray(tok["policy_version_rollout"])[is_obs].all()
    acts = role == ROLE["action"]
    assert not np.ma.getmaskarray(tok["rollout_logp"])[acts].any()
    assert list(sink.last("samples")["n_turns"]) == [2] * 4
    assert m["n_loss_tokens"] == int(acts.sum())

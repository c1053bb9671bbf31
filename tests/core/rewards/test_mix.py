"""Mixed rewards: rules, recomposition of the total from components and weights, agreement."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from core.config import ConfigError, load_config
from core.envs.protocol import StepResult
from core.rewards.config import RewardConfig
from core.rewards.mix import RewardMixer, judge_agreement, total_reward
from core.rewards.rules import format_reward, length_penalty
from core.rollout.episode import EpisodeRecord
from core.rollout.trajectories import assemble
from core.tokenizer.tokenizer import Tokenizer

NAN = math.nan


class _Env:
    """A finished one-turn episode whose response text and verdict are given."""

    domain, prompt_id = "addition", "p"

    def __init__(self, text, verifier):
        self.text, self.verifier = text, verifier

    def reset(self):
        return [1, 3, 20, 4]

    def step(self, action_ids, *, finished):
        return StepResult(done=True, rewards={"verifier": self.verifier})

    def render(self, ids):
        return self.text


def _traj(tok, cases):
    """Trajectories from (response ids, finished, text, verifier) cases."""
    eps = []
    for ids, finished, text, verifier in cases:
        e = EpisodeRecord(_Env(text, verifier), [1, 3, 20, 4])
        e.add(ids, "action", [-0.1] * len(ids), 0)
        e.finished, e.turns, e.done = finished, 1, True
        e.rewards = {"verifier": verifier}
        eps.append(e)
    n = len(eps)
    return assemble(eps, tok=tok, sample_ids=torch.arange(n), group_ids=torch.arange(n))


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def test_rules_format_and_length(tok):
    eos = tok.eos_id
    traj = _traj(
        tok,
        [
            (tok.encode("82") + [eos], True, "82", 1.0),  # bare integer, ended on EOS
            (tok.encode("-7") + [eos], True, "-7", 0.0),
            (tok.encode("8a") + [eos], True, "8a", 0.0),  # not an integer
            (tok.encode("12345"), False, "12345", 0.0),  # cut off: no EOS
        ],
    )
    assert format_reward(traj, pattern="-?[0-9]+").tolist() == [1.0, 1.0, 0.0, 0.0]
    # generated tokens (EOS counted; digits are one token each): 3, 3, 3, 5 → beyond 3: 0,0,0,2
    assert length_penalty(traj, budget=3).tolist() == [0.0, 0.0, 0.0, 2.0]


def test_total_recomputes_from_components_and_signed_weights():
    # sample 0: 1·1.0 + 0.5·0.0 − 0.1·2 = 0.8; sample 1: the judge is null, so no judge term
    # (not a 0): 1·0.0 − 0.1·0 = 0.0; sample 2: 1·1 + 0.5·1 − 0.1·4 = 1.1
    comps = {
        "verifier": torch.tensor([1.0, 0.0, 1.0]),
        "judge": torch.tensor([0.0, NAN, 1.0]),
        "length": torch.tensor([2.0, 0.0, 4.0]),
    }
    weights = {"verifier": 1.0, "judge": 0.5, "length": -0.1}
    total = total_reward(comps, weights)
    torch.testing.assert_close(total, torch.tensor([0.8, 0.0, 1.1]), rtol=0, atol=1e-7)
    assert total.dtype == torch.float32


def test_judge_agreement_over_samples_with_both():
    comps = {"verifier": torch.tensor([1.0, 0.0, 1.0, 0.0]), "judge": torch.tensor([1, 1, NAN, 0])}
    assert judge_agreement(comps) == pytest.approx(2 / 3)  # samples 0 and 3 agree, 2 has no verdict
    assert judge_agreement({"verifier": torch.ones(2)}) is None


def test_mixer_records_every_component_weight_and_reason(tok):
    eos = tok.eos_id
    traj = _traj(
        tok,
        [
            (tok.encode("82") + [eos], True, "82", 1.0),
            (tok.encode("1234") + [eos], True, "1234", 0.0),
        ],
    )
    cfg = RewardConfig(
        weights={"verifier": 1.0, "format": 0.25}, penalties={"length": 0.5}, length_budget=3
    )
    mixer = RewardMixer(cfg, tok=tok, repo_root=Path("."), student={})
    metrics = mixer.apply(traj)
    assert set(traj.reward_components) == {"verifier", "format", "length"}
    assert traj.reward_weights == {"verifier": 1.0, "format": 0.25, "length": -0.5}
    # 1 + 0.25 − 0.5·0 = 1.25; 0 + 0.25 − 0.5·(5 − 3) = −0.75
    torch.testing.assert_close(traj.reward, torch.tensor([1.25, -0.75]))
    assert traj.reward_failures == {"format": [None, None], "length": [None, None]}
    assert metrics == {"judge_verifier_agreement": None}


def test_plain_verifier_reward_is_left_as_the_environment_gave_it(tok):
    traj = _traj(tok, [([5, tok.eos_id], True, "5", 1.0)])
    before = traj.reward.clone()
    RewardMixer(RewardConfig(), tok=tok, repo_root=Path("."), student={}).apply(traj)
    assert torch.equal(traj.reward, before) and traj.reward_weights == {"verifier": 1.0}


def test_reward_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="rewards.penalties\\['tokens'\\]"):
        load_config(None, ["rewards.penalties={tokens = 1.0}"])
    with pytest.raises(ConfigError, match="set rewards.judge"):
        load_config(None, ["rewards.weights={judge = 1.0}"])
    with pytest.raises(ConfigError, match="must be >= 0"):
        load_config(None, ["rewards.weights={verifier = -1.0}"])


def test_unknown_component_in_weights_is_an_error(tok):
    traj = _traj(tok, [([5, tok.eos_id], True, "5", 1.0)])
    mixer = RewardMixer(
        RewardConfig(weights={"verifier": 1.0, "helpfulness": 1.0}),
        tok=tok,
        repo_root=Path("."),
        student={},
    )
    with pytest.raises(ValueError, match="helpfulness"):
        mixer.apply(traj)

"""Multi-turn collection into ``Trajectories`` on the real engine: roles, TITO across turns, per-token
versions when a weight switch lands between turns, and observation tokens that carry no gradient."""

from __future__ import annotations

import pytest
import torch

from core.algorithms.policy import policy_loss, token_logprobs, trust_mask
from core.rollout.episode import ROLE
from core.rollout.trajectories import collect
from tests.core.envs.scripted import ScriptedEnv
from tests.core.rollouts import session


class RecordingEngine:
    """Forwards to a real engine and records every batch of contexts it was asked to extend."""

    def __init__(self, engine) -> None:
        self.engine, self.contexts = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, params, **kw):
        self.contexts.append([list(p) for p in prompts])
        return self.engine.generate(prompts, params, **kw)


@pytest.fixture(scope="module")
def s():
    return session("rollout.max_new_tokens=4")


def two_turns(s, *, n=4, between_turns=None, engine=None):
    obs = tuple(s.tok.encode("=46"))  # "46" is one merged token: a re-tokenization would differ
    envs = [ScriptedEnv(s.tok, observation=obs) for _ in range(n)]
    engine = engine or s.engine
    traj = collect(
        engine,
        envs,
        s.cfg.rollout.sampling(),
        tok=s.tok,
        sample_ids=torch.arange(n),
        group_ids=torch.zeros(n, dtype=torch.int64),
        generator=torch.Generator().manual_seed(3),
        max_turns=2,
        between_turns=between_turns,
    )
    return traj, envs, obs


def test_observations_are_recorded_with_their_role_and_never_in_the_loss(s):
    traj, envs, obs = two_turns(s)
    assert traj.n_turns.tolist() == [2] * 4
    for i, env in enumerate(envs):
        post = traj.ids[i, traj.n_prompt :][traj.valid[i, traj.n_prompt :]].tolist()
        first, second = env.actions
        assert post == first + list(obs) + second  # the exact ids, in order
        roles = traj.role[i, traj.n_prompt :][traj.valid[i, traj.n_prompt :]].tolist()
        assert roles == [ROLE["action"]] * len(first) + [ROLE["observation"]] * len(obs) + [
            ROLE["action"]
        ] * len(second)
    observation = traj.is_role("observation")
    assert observation.sum() == 4 * len(obs)
    assert not (traj.loss_mask & observation).any()
    assert (traj.rollout_logp[observation] == 0).all() and (traj.version[observation] == -1).all()


def test_turn_two_context_is_turn_one_context_plus_actions_plus_observation(s):
    """TITO across turns: the history is extended with exact ids, never re-tokenized."""
    rec = RecordingEngine(s.engine)
    traj, envs, obs = two_turns(s, engine=rec)
    turn1, turn2 = rec.contexts
    for i, env in enumerate(envs):
        assert turn2[i] == turn1[i] + env.actions[0] + list(obs)


def test_a_weight_switch_between_turns_gives_each_token_its_own_version(s):
    v0 = s.engine.policy_version

    def switch(turn: int) -> None:
        s.engine.load_weights(s.engine.weights, version=v0 + 3)  # a sync landing between turns

    traj, envs, _ = two_turns(s, between_turns=switch)
    for i, env in enumerate(envs):
        gen = traj.version[i][traj.generated[i]].tolist()
        n1 = len(env.actions[0])
        assert gen == [v0] * n1 + [v0 + 3] * (len(gen) - n1)
    v_train = v0 + 5
    assert traj.staleness(v_train).tolist() == [5] * 4  # v_train − min(action versions)


def test_observation_tokens_carry_no_gradient(s):
    """Perturbing the logits that predict observation tokens changes no parameter gradient."""
    traj, _, _ = two_turns(s)
    ids, valid = traj.ids, traj.valid
    actions = traj.targets(traj.generated)  # [B, T-1]
    observation = traj.targets(traj.is_role("observation"))  # [B, T-1]
    adv = torch.where(actions, 1.0, 0.0) * torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None]

    def grads(perturb: float) -> list[torch.Tensor]:
        s.actor.zero_grad(set_to_none=True)
        logits = s.actor.logits(ids, valid)[:, :-1]  # [B, T-1, V]
        logits = logits + perturb * observation[..., None] * torch.randn_like(logits)
        logp, _ = token_logprobs(logits, ids[:, 1:])
        trusted, _ = trust_mask(
            logp.detach(), traj.targets(traj.rollout_logp), actions, rule="icepop", beta=2.0
        )
        loss, _ = policy_loss(logp, logp.detach(), adv, trusted, denominator=actions.sum())
        loss.backward()
        return [p.grad.clone() for p in s.actor.parameters() if p.grad is not None]

    torch.manual_seed(0)
    base, perturbed = grads(0.0), grads(10.0)
    assert observation.any() and any(g.abs().sum() > 0 for g in base)
    assert all(torch.equal(a, b) for a, b in zip(base, perturbed, strict=True))

"""The critic: megatron trunk from the SFT base, frozen attention bit-identical after K value
updates, gradients only into the MLP projections and the head, token-aligned values."""

from __future__ import annotations

import pytest
import torch

from core.algorithms.value import outcome_rewards
from core.loops.config import OptimConfig
from core.loops.critic import CriticConfig, build_critic, critic_updates
from core.loops.session import REPO_ROOT
from core.model.checkpoint import load_checkpoint
from core.model.critic import FINAL_NORM, Critic
from core.rollout.episode import ROLE
from core.rollout.trajectories import Trajectories


@pytest.fixture(scope="module")
def base():
    weights, cfg, _ = load_checkpoint(REPO_ROOT / "core/assets/base_model")
    return weights, cfg


def _traj(b: int = 3, t: int = 10) -> Trajectories:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 300, (b, t), generator=gen)
    role = torch.full((b, t), ROLE["prompt"], dtype=torch.int8)
    role[:, 4:6] = ROLE["action"]
    role[:, 6:8] = ROLE["observation"]
    role[:, 8:] = ROLE["action"]
    valid = torch.ones(b, t, dtype=torch.bool)
    gen_mask = (role == ROLE["action"]) | (role == ROLE["summary"])
    traj = Trajectories(
        ids=ids,
        valid=valid,
        role=role,
        loss_mask=gen_mask.clone(),
        rollout_logp=torch.zeros(b, t),
        version=torch.zeros(b, t, dtype=torch.int64),
        sample_id=torch.arange(b),
        group_id=torch.arange(b),
        prompt_id=["p"] * b,
        domain=["d"] * b,
        env_name=["e"] * b,
        status=["trained"] * b,
        failure_reason=[None] * b,
        finished=torch.ones(b, dtype=torch.bool),
        n_turns=torch.full((b,), 2),
        reward_components={},
        reward=torch.tensor([1.0, 0.0, 1.0]),
        response_text=[""] * b,
        n_prompt=4,
    )
    traj.returns = outcome_rewards(traj.reward, gen_mask)  # any fixed targets
    return traj


def test_loads_the_base_trunk(base):
    weights, cfg = base
    critic = Critic(cfg)
    critic.load_base(weights)
    state = critic.gpt.state_dict()
    for k, v in weights.items():
        if k.startswith(("embedding.", "decoder.layers.")):
            assert torch.equal(state[k], v), k
    assert torch.equal(critic.final_norm.weight, weights[FINAL_NORM])
    assert not hasattr(critic.gpt, "output_layer")  # no LM head: post_process=False


def test_only_mlp_and_head_train(base):
    weights, cfg = base
    critic = Critic(cfg)
    trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    assert trainable and all(".mlp." in n or n.startswith("head.") for n in trainable)
    assert any("linear_fc1" in n for n in trainable) and any("linear_fc2" in n for n in trainable)
    frozen = set(critic.frozen_parameters())
    assert any("self_attention.linear_qkv" in n for n in frozen)
    assert any("self_attention.linear_proj" in n for n in frozen)
    unfrozen = Critic(cfg, freeze_attention=False)
    assert all(
        n.startswith("gpt.embedding.")
        for n, p in unfrozen.named_parameters()
        if not p.requires_grad
    )


def test_frozen_attention_bit_identical_after_k_updates(base):
    weights, cfg = base
    model = build_critic(
        cfg, weights, CriticConfig(updates_per_step=2, lr=1e-2), OptimConfig(), seed=0
    )
    critic = model.module
    frozen = {n: p.detach().clone() for n, p in critic.frozen_parameters().items()}
    mlp = {n: p.detach().clone() for n, p in critic.named_parameters() if p.requires_grad}
    checksum = critic.frozen_checksum()
    results = critic_updates(model, _traj(), k=2)
    assert [r.stepped for r in results] == [True, True]  # K optimizer steps
    for n, p in critic.frozen_parameters().items():
        assert torch.equal(p, frozen[n]), n
        assert p.grad is None, n
    assert critic.frozen_checksum() == checksum
    moved = [
        n for n, p in critic.named_parameters() if p.requires_grad and not torch.equal(p, mlp[n])
    ]
    assert any("linear_fc1" in n for n in moved) and "head.weight" in moved
    states = [st["step"] for st in model.optimizer.state.values()]
    assert states and all(int(s) == 2 for s in states)  # each update its own AdamW step


def test_value_loss_falls_over_updates(base):
    weights, cfg = base
    model = build_critic(cfg, weights, CriticConfig(lr=1e-3), OptimConfig(), seed=0)
    traj = _traj()
    losses = [float(r.loss) for r in critic_updates(model, traj, k=8)]
    assert losses[-1] < losses[0]


def test_values_are_token_aligned(base):
    weights, cfg = base
    critic = Critic(cfg)
    critic.load_base(weights)
    torch.nn.init.normal_(critic.head.weight, std=0.1)
    traj = _traj()
    with torch.no_grad():
        out = critic(traj.ids, traj.valid)  # [B, T]: state after token t
        v = critic.values(traj.ids, traj.valid)  # [B, T]: state that generates token t
    assert v.shape == traj.ids.shape and not v[:, 0].any()
    assert torch.equal(v[:, 1:], out[:, :-1])
    with torch.no_grad():  # causal: a later token does not change earlier values
        ids2 = traj.ids.clone()
        ids2[:, -1] = 7
        v2 = critic.values(ids2, traj.valid)
    assert torch.equal(v2, v)

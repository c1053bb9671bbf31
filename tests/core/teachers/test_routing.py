"""Hard routing by domain: each sample scored by its domain's teacher, on the rollout's ids."""

from __future__ import annotations

import pytest
import torch

from core.config import ConfigError, load_config
from core.envs.arithmetic import ArithmeticSource
from core.model.checkpoint import load_checkpoint
from core.rollout.engine import RolloutEngine
from core.rollout.sampling import SamplingParams
from core.rollout.trajectories import collect
from core.sync.convert import actor_to_rollout
from core.tasks.arithmetic import ArithmeticConfig
from core.teachers.routing import load_teachers, route, score_with_teachers
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV
from core.tokenizer.tokenizer import Tokenizer
from tests.teacher_artifacts import BASE


def test_route_by_domain_with_a_wildcard_and_unrouted_domains():
    routes = {"addition": "A", "subtraction": "S"}
    assert route(["addition", "subtraction", "addition"], routes) == ["A", "S", "A"]
    assert route(["tool_use"], routes) == [None]  # no route and no "*": no teacher
    assert route(["tool_use", "addition"], {"*": "W", "addition": "A"}) == ["W", "A"]


def _student(tok):
    return {
        "tokenizer_rev": tok.revision,
        "vocab_hash": tok.vocab_hash,
        "chat_template_rev": CHAT_TEMPLATE_REV,
        "vocab_size": tok.vocab_size,
    }


def test_scores_each_sample_with_its_domains_teacher(teacher_dirs):
    tok = Tokenizer.load()
    cfg = load_config(
        None,
        [
            f'teachers.routes={{addition = "{teacher_dirs["same"]}", '
            f'subtraction = "{teacher_dirs["other"]}", extra = "{teacher_dirs["same"]}"}}'
        ],
    )
    routes, teachers = load_teachers(cfg.teachers, repo_root=BASE, **_student(tok))
    assert len(teachers) == 2  # a checkpoint routed from two domains is one engine
    assert routes["addition"] == routes["extra"] != routes["subtraction"]
    weights, mcfg, _ = load_checkpoint(BASE)
    engine = RolloutEngine(mcfg)
    engine.load_weights(actor_to_rollout(weights, mcfg), version=0)
    envs = ArithmeticSource(ArithmeticConfig(max_digits=2), tok).sample(12, seed=5)
    traj = collect(
        engine,
        envs,
        SamplingParams(max_new_tokens=6),
        tok=tok,
        sample_ids=torch.arange(12),
        group_ids=torch.arange(12),
        generator=torch.Generator().manual_seed(0),
    )
    assert {"addition", "subtraction"} <= set(traj.domain)
    out = score_with_teachers(traj, teachers, routes, mode="sampled", k=4, temperature=1.0)
    assert traj.teacher_id == [routes[d] for d in traj.domain]
    gen = traj.targets(traj.generated)  # [B, T-1] generated tokens of every (routed) sample
    assert torch.equal(out.scored, gen)
    for tid, teacher in teachers.items():
        rows = torch.tensor([x == tid for x in traj.teacher_id])
        ref = teacher.engine.prefill_logprobs(traj.ids[rows], traj.valid[rows])
        got = traj.targets(traj.teacher_logp)[rows]
        torch.testing.assert_close(got[gen[rows]], ref[gen[rows]], rtol=0, atol=1e-6)
    assert traj.teacher_logp[~traj.generated].eq(0).all()
    assert out.nbytes == int(gen.sum()) * 4 == sum(out.bytes_by_teacher.values())


def test_config_requires_teachers_for_opd_and_a_distribution_for_topk():
    with pytest.raises(ConfigError, match="needs teachers"):
        load_config(None, ['algorithm.advantage="opd"', "algorithm.group_size=1"])
    with pytest.raises(ConfigError, match="opd_loss='topk' needs teachers.payload"):
        load_config(
            None,
            [
                'algorithm.advantage="grpo+opd"',
                'algorithm.opd_loss="topk"',
                'teachers.routes={"*" = "x"}',
            ],
        )
    with pytest.raises(ConfigError, match="algorithm.group_size=1 must be >= 2"):
        load_config(
            None,
            [
                'algorithm.advantage="grpo+opd"',
                'teachers.routes={"*" = "x"}',
                "algorithm.group_size=1",
            ],
        )
    cfg = load_config(
        None, ['algorithm.advantage="opd"', "algorithm.group_size=1", 'teachers.routes={"*" = "x"}']
    )
    assert cfg.algorithm.group_size == 1 and cfg.teachers.routes == {"*": "x"}
    only_sync_grpo = "applied by the sync GRPO loop only"
    with pytest.raises(ConfigError, match=only_sync_grpo):
        load_config(None, ['rollout.mode="async"', 'teachers.routes={"*" = "x"}'])
    with pytest.raises(ConfigError, match=only_sync_grpo):
        load_config(None, ['rollout.mode="async"', "rewards.penalties={length = 0.1}"])
    with pytest.raises(ConfigError, match="algorithm.advantage='opd' needs algorithm.name='grpo'"):
        load_config(
            None,
            [
                'algorithm.name="sao"',
                "algorithm.group_size=1",
                'algorithm.advantage="opd"',
                'teachers.routes={"*" = "x"}',
            ],
        )
    with pytest.raises(ConfigError, match="teachers.payload='logits'"):
        load_config(None, ['teachers.payload="logits"'])

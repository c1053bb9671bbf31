"""The multi-turn calculator environment: problems, the tool protocol, episodes, latency and faults."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.envs.protocol import Environment, Forkable
from core.envs.tool import ToolConfig, ToolEnv, ToolSource, make_tool_problems, tool_eval_set
from core.envs.tool_protocol import TOOL_TEMPLATE_REV, encode_observation, parse_call
from core.tasks.arithmetic import is_held_out
from core.tokenizer.chat_template import CHAT_TEMPLATE_REV
from core.tokenizer.tokenizer import Tokenizer

TOK = Tokenizer.load()


def _ids(text: str, eos: bool = True) -> list[int]:
    return TOK.encode(text) + ([TOK.eos_id] if eos else [])


def test_problems_are_well_formed_and_the_eval_split_is_held_out():
    train = make_tool_problems(300, seed=1, cfg=ToolConfig())
    held = tool_eval_set(64)
    for p in train + held:
        assert 10 <= p.inner <= 99 and p.answer >= 0
        assert p.question == f"({p.a}{p.op1}{p.b}){p.op2}{p.c}="
    assert not any(is_held_out(p.question) for p in train)
    assert all(is_held_out(p.question) for p in held) and len({p.question for p in held}) == 64
    assert make_tool_problems(5, seed=1, cfg=ToolConfig()) == train[:5]  # seeded


def test_protocol_parses_calls_and_has_its_own_revision():
    assert parse_call("[37+48]") == (37, "+", 48) and parse_call("[85-19]") == (85, "-", 19)
    assert parse_call("[37+]") is None and parse_call("37+48") is None
    assert TOOL_TEMPLATE_REV != CHAT_TEMPLATE_REV and len(TOOL_TEMPLATE_REV) == 64
    obs = encode_observation("85", tok=TOK)
    assert obs[0] == TOK.user_id and obs[-1] == TOK.assistant_id


def test_an_episode_calls_the_tool_twice_and_answers():
    env = ToolSource(ToolConfig(), TOK).sample(1, seed=0)[0]
    assert isinstance(env, Environment) and isinstance(env, Forkable)
    p = env.problem
    assert TOK.decode(env.reset()) == f"<|bos|><|user|>{p.question}<|assistant|>"
    r1 = env.step(_ids(f"[{p.a}{p.op1}{p.b}]"), finished=True)
    assert not r1.done and list(r1.observation) == encode_observation(str(p.inner), tok=TOK)
    r2 = env.step(_ids(f"[{p.inner}{p.op2}{p.c}]"), finished=True)
    assert list(r2.observation) == encode_observation(str(p.answer), tok=TOK)
    r3 = env.step(_ids(str(p.answer)), finished=True)
    assert r3.done and r3.rewards == {"verifier": 1.0} and r3.failure_reason is None
    bad = env.step(_ids("[1+]"), finished=True)  # the policy's mistake: the tool says '?'
    assert (
        not bad.done
        and not bad.env_failure
        and TOK.decode(bad.observation).endswith("=?<|assistant|>")
    )
    wrong = env.fork(7)
    wrong.reset()
    res = wrong.step(_ids(str(p.answer + 1)), finished=True)
    assert res.done and res.rewards == {"verifier": 0.0} and res.failure_reason == "wrong"
    assert wrong.problem == p and wrong.seed == 7


@pytest.mark.parametrize(
    "field, reason", [("timeout_rate", "env_timeout"), ("crash_rate", "env_crash")]
)
def test_injected_failures_end_the_episode_as_the_environments(field, reason):
    env = ToolEnv(
        make_tool_problems(1, seed=0, cfg=ToolConfig())[0],
        TOK,
        ToolConfig(**{field: 1.0}, timeout_s=1e-3),
        3,
    )
    env.reset()
    res = env.step(_ids("[12+13]"), finished=True)
    assert res.done and res.env_failure and res.failure_reason == reason and res.rewards == {}


def test_malformed_output_flags_the_episode_at_its_end():
    env = ToolEnv(
        make_tool_problems(1, seed=0, cfg=ToolConfig())[0], TOK, ToolConfig(malformed_rate=1.0), 3
    )
    env.reset()
    obs = env.step(_ids("[12+13]"), finished=True)
    assert not obs.done and "#" in TOK.decode(obs.observation) and obs.event == "tool_malformed"
    end = env.step(_ids("25"), finished=True)
    assert end.done and end.env_failure and end.failure_reason == "tool_malformed"


def test_latency_is_long_tailed_and_seeded():
    # Draw latencies without waiting: the environment's own RNG, as step() would.
    cfg = ToolConfig(latency_median_s=1.0, latency_sigma=1.2)
    env = ToolEnv(make_tool_problems(1, seed=0, cfg=cfg)[0], TOK, cfg, seed=11)
    draws = np.array([env._latency() for _ in range(20000)])
    p50, p99 = np.quantile(draws, [0.5, 0.99])
    assert 0.9 < p50 < 1.1 and p99 / p50 >= 10  # exp(2.326 · 1.2) = 16.3
    assert math.isclose(cfg.p99_over_p50, math.exp(2.3263 * 1.2))
    again = ToolEnv(env.problem, TOK, cfg, seed=11)
    assert [again._latency() for _ in range(5)] == draws[:5].tolist()


def test_rates_are_checked():
    with pytest.raises(ValueError, match="tool.crash_rate"):
        ToolConfig(crash_rate=1.5)
    with pytest.raises(ValueError, match="must be <= 1"):
        ToolConfig(crash_rate=0.6, timeout_rate=0.6)

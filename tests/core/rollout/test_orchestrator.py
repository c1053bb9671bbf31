"""The orchestrator over real engine replicas: the environment-failure rule (refill / drop) on a
scripted failure pattern, per-token versions when a switch lands between turns, TITO across turns
(and the re-tokenized-history fault), and the same trajectories on every executor."""

from __future__ import annotations

import threading

import pytest
import torch

from core.envs.tool import ToolConfig, ToolSource
from core.rollout.group_batch import groups_to_batch
from core.telemetry.agent import turn_rows
from core.tokenizer.tokenizer import Tokenizer
from tests.core.rollout.orchestration import orchestrator
from tests.core.rollout.script_env import ScriptSource

TOK = Tokenizer.load()


def _take_until(orch, seeds, *, n=1):
    got, dropped = {}, []
    while not set(seeds) <= set(got) | {g.seed for g in dropped}:
        taken = orch.take_groups(n, timeout=120)
        got.update({g.seed: g for g in taken.groups})
        dropped += taken.dropped
    return got, dropped


def test_refill_rule_on_a_scripted_failure_pattern():
    # group size 4; group k fails on pattern[k]; refills fail as refills[k] says, in order
    pattern = {0: {1}, 1: {0, 1, 2}, 2: {0, 1}, 3: {3}}
    refills = {3: [True, False]}
    orch, _, _ = orchestrator(ScriptSource(TOK, pattern, refills), TOK, in_flight=4)
    orch.start()
    try:
        got, dropped = _take_until(orch, [0, 1, 2, 3])
    finally:
        orch.stop()
    dropped += orch._dropped
    assert {g.seed for g in dropped} == {1, 2}  # 1/4 and exactly 2/4 valid: not more than half
    g0, g3 = got[0], got[3]
    assert (len(g0.episodes), len(g0.valid), g0.refills) == (5, 4, 1)  # one refill round
    assert (len(g3.episodes), len(g3.valid), g3.refills) == (6, 4, 2)  # the refill failed too
    assert [e.refill for e in g3.episodes] == [False] * 4 + [True, True]
    batch = groups_to_batch(
        [g0, g3], [g for g in dropped if g.seed in (1, 2)], tok=TOK, group_size=4
    )
    st = batch.traj.status
    assert batch.n_grouped == 8 and st[:8] == ["trained"] * 8
    assert st[8:].count("env_failure") == 1 + 2 + 3 + 2 and st[8:].count("dropped_group") == 1 + 2
    assert not batch.traj.loss_mask[8:].any()  # everything outside the groups leaves the loss
    assert batch.n_refilled == 3 and batch.n_groups_dropped == 2
    assert batch.traj.failure_reason[8] == "env_crash"


def test_a_switch_between_turns_shows_in_the_token_versions():
    published, lock = [], threading.Lock()

    def publish_v1():  # the first environment step publishes version 1 (once; others wait)
        with lock:
            if not published:
                g = torch.Generator().manual_seed(0)
                v1 = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in payload.items()}
                orch.publish(v1, 1)
                published.append(1)

    obs = (TOK.user_id, *TOK.encode("=2"), TOK.assistant_id)
    source = ScriptSource(TOK, observation=obs, on_first_step=publish_v1)
    orch, _, payload = orchestrator(source, TOK, workers=1, group_size=2, in_flight=1)
    orch.start()
    try:
        group = orch.take_groups(1, timeout=120).groups[0]
        events = orch.switch_events()
    finally:
        orch.stop()
    assert [(ev.worker, ev.version) for ev in events] == [(0, 0), (0, 1)]  # base, then v1
    for e in group.episodes:
        by_turn = {
            t: {v for v, k in zip(e.versions, e.turn_of, strict=True) if v >= 0 and k == t}
            for t in (0, 1)
        }
        assert by_turn == {0: {0}, 1: {1}}
        assert [k for k, v in zip(e.kv_versions, e.versions, strict=True) if v >= 0] == [
            v for v in e.versions if v >= 0
        ]  # KV invalidated at the switch: every token decoded against its own version
    batch = groups_to_batch([group], [], tok=TOK, group_size=2)
    assert int(batch.traj.staleness(1).max()) == 1  # staleness counts the oldest action token


@pytest.mark.parametrize("history", ["exact", "retokenize"])
def test_tito_prefix_equality_across_turns(history):
    merged = TOK.token_to_id("46")  # a vocabulary token the encoder never produces from "46"
    obs = (TOK.user_id, TOK.encode("=")[0], merged, TOK.assistant_id)
    orch, _, _ = orchestrator(ScriptSource(TOK, observation=obs), TOK, history=history, in_flight=1)
    orch.start()
    try:
        group = orch.take_groups(1, timeout=120).groups[0]
    finally:
        orch.stop()
    rows = turn_rows(group.episodes, step=0)
    same = [c == p for c, p in zip(rows["context_hash"], rows["prefix_hash"], strict=True)]
    turns = rows["turn"]
    assert all(same[i] for i, t in enumerate(turns) if t == 0)  # the prompt is the prompt
    assert all(same[i] == (history == "exact") for i, t in enumerate(turns) if t == 1)
    for e in group.episodes:  # the trajectory itself keeps the exact ids either way
        assert merged in e.ids


def _trajectories(executor: str) -> dict:
    source = ToolSource(ToolConfig(), TOK)
    orch, _, _ = orchestrator(
        source,
        TOK,
        executor=executor,
        in_flight=2,
        max_turns=3,
        max_new_tokens=8,
        path="core/assets/tool_model",
    )
    orch.start()
    try:
        got, _ = _take_until(orch, [0, 1])
    finally:
        orch.stop()
    return {
        (k, e.sample_id): (tuple(e.ids), tuple(round(x, 4) for x in e.logp), e.failure_reason)
        for k in (0, 1)
        for e in got[k].episodes
    }


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["processes", "ray"])
def test_executors_produce_the_same_trajectories_for_the_same_seeds(executor):
    threads = _trajectories("threads")
    other = _trajectories(executor)
    assert other.keys() == threads.keys()
    for key, (ids, logp, reason) in threads.items():
        o_ids, o_logp, o_reason = other[key]
        assert o_ids == ids and o_reason == reason
        assert max((abs(a - b) for a, b in zip(logp, o_logp, strict=True)), default=0) <= 2e-4

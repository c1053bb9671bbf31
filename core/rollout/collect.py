"""Collect: run a batch of environment episodes through a rollout engine into ``Trajectories``.

Turn loop: every live episode's context (its exact ids so far) is generated from in one batched
``engine.generate`` call; each episode's environment consumes the turn's ids and either ends the
episode or appends observation ids, which become part of the next turn's context. The history is
never re-tokenized (TITO across turns): turn n+1's context is turn n's context + its action ids +
the observation ids. Each generated token records the engine's policy version at the time it was
sampled, so a weight switch between turns (``between_turns``) shows in the per-token versions.
Simplifications: each turn re-prefills its whole context (no KV reuse across turns); an episode
whose next turn would not fit ``max_seq_len`` ends with failure ``context_exhausted``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor

import torch

from core.envs.protocol import Environment
from core.rollout.episode import EpisodeRecord
from core.rollout.sampling import SamplingParams
from core.rollout.trajectories import ROLE, Trajectories
from core.tokenizer.tokenizer import Tokenizer


def collect(
    engine,
    envs: Sequence[Environment],
    params: SamplingParams,
    *,
    tok: Tokenizer,
    sample_ids: torch.Tensor,
    group_ids: torch.Tensor,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    max_turns: int = 1,
    max_seq_len: int | None = None,
    between_turns: Callable[[int], None] | None = None,
    env_pool: Executor | None = None,
) -> Trajectories:
    """Run ``envs`` to completion (at most ``max_turns`` policy turns each).

    Args:
        sample_ids, group_ids: [B] int64, one per environment (assigned by the caller).
        between_turns: called with the turn index after each turn but the last (e.g. a weight
            switch landing between two turns of the same trajectories).
        env_pool: steps the turn's environments concurrently (their latencies overlap: the turn
            waits for the slowest); None steps them one after another.
    """
    episodes = [EpisodeRecord(env, list(env.reset())) for env in envs]
    limit = max_seq_len if max_seq_len is not None else engine.cfg.max_seq_len
    first_width, records = 0, {}
    for turn in range(max_turns):
        live = [e for e in episodes if not e.done]
        for e in live:
            if len(e.context) + params.max_new_tokens > limit:
                e.finish(failure_reason="context_exhausted")
        live = [e for e in live if not e.done]
        if not live:
            break
        rb = engine.generate(
            [e.context for e in live],
            params,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            generator=generator,
            greedy=greedy,
        )
        if turn == 0:
            first_width = rb.response_ids.shape[1]
            records = {"routes": rb.routes, "topk": rb.topk}
        actions = []
        for j, e in enumerate(live):
            m = rb.response_mask[j]
            actions.append(rb.response_ids[j][m].tolist())
            e.add(actions[-1], "action", rb.logprobs[j][m].tolist(), rb.policy_version)
            e.turns += 1
            e.finished = bool(rb.finished[j])
        steps = [(e.env.step, a, e.finished) for e, a in zip(live, actions, strict=True)]
        run = map if env_pool is None else env_pool.map
        results = list(run(lambda x: x[0](x[1], finished=x[2]), steps))
        for e, res in zip(live, results, strict=True):
            if res.done:
                e.finish(
                    rewards=res.rewards,
                    failure_reason=res.failure_reason,
                    env_failure=res.env_failure,
                )
            else:
                e.add(list(res.observation), "observation")
        if all(e.done for e in episodes):
            break
        if between_turns is not None:
            between_turns(turn)
    for e in episodes:
        if not e.done:  # ran out of turns
            e.finish(failure_reason="max_turns")
    if any(e.turns > 1 for e in episodes):
        records = {}  # per-chunk engine records align with single-turn batches only
    return assemble(
        episodes,
        tok=tok,
        sample_ids=sample_ids,
        group_ids=group_ids,
        min_tail=first_width,
        engine_records=records,
    )


def assemble(
    episodes: Sequence[EpisodeRecord],
    *,
    tok: Tokenizer,
    sample_ids: torch.Tensor,
    group_ids: torch.Tensor,
    min_tail: int = 0,
    engine_records: dict | None = None,
) -> Trajectories:
    """Lay episodes out as ``[left pad | prompt | post-prompt tokens | right pad]``."""
    b = len(episodes)
    tp = max(len(e.prompt) for e in episodes)
    tail = max(min_tail, max(len(e.ids) for e in episodes))
    t = tp + tail
    ids = torch.full((b, t), tok.pad_id, dtype=torch.int64)
    role = torch.full((b, t), ROLE["padding"], dtype=torch.int8)
    logp = torch.zeros((b, t), dtype=torch.float32)
    version = torch.full((b, t), -1, dtype=torch.int64)
    for i, e in enumerate(episodes):
        p, n = len(e.prompt), len(e.ids)
        ids[i, tp - p : tp] = torch.tensor(e.prompt, dtype=torch.int64)
        role[i, tp - p : tp] = ROLE["prompt"]
        if n:
            ids[i, tp : tp + n] = torch.tensor(e.ids, dtype=torch.int64)
            role[i, tp : tp + n] = torch.tensor(e.roles, dtype=torch.int8)
            logp[i, tp : tp + n] = torch.tensor(e.logp, dtype=torch.float32)
            version[i, tp : tp + n] = torch.tensor(e.versions, dtype=torch.int64)
    valid = role != ROLE["padding"]
    names = sorted({k for e in episodes for k in e.rewards})
    components = {
        k: torch.tensor([e.rewards.get(k, float("nan")) for e in episodes], dtype=torch.float32)
        for k in names
    }
    total = torch.tensor([sum(e.rewards.values()) for e in episodes], dtype=torch.float32)
    traj = Trajectories(
        ids=ids,
        valid=valid,
        role=role,
        loss_mask=(role == ROLE["action"]) | (role == ROLE["summary"]),
        rollout_logp=logp,
        version=version,
        sample_id=sample_ids.to(torch.int64),
        group_id=group_ids.to(torch.int64),
        prompt_id=[e.env.prompt_id for e in episodes],
        domain=[e.env.domain for e in episodes],
        env_name=[type(e.env).__name__ for e in episodes],
        status=["trained" if e.finished else "truncated" for e in episodes],
        failure_reason=[e.failure_reason for e in episodes],
        finished=torch.tensor([e.finished for e in episodes], dtype=torch.bool),
        n_turns=torch.tensor([e.turns for e in episodes], dtype=torch.int64),
        reward_components=components,
        reward=total,
        response_text=[e.env.render(e.ids) for e in episodes],
        n_prompt=tp,
        engine_records=engine_records or {},
    )
    failed = torch.tensor([e.env_failure for e in episodes], dtype=torch.bool)
    if failed.any():
        traj.drop(failed, "env_failure")
    return traj

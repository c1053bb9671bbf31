"""Greedy held-out evaluation: the environment's fixed eval episodes through the rollout engine.

``accuracy`` is the fraction of episodes that succeeded (no failure reason); ``reward_mean`` the
mean total reward. Multi-turn environments are evaluated the same way (greedy turns).
"""

from __future__ import annotations

import torch

from core.rollout.collect import collect
from core.rollout.sampling import SamplingParams


def greedy_accuracy(
    engine, envs, *, tok, max_new_tokens: int = 8, max_turns: int = 1, batch_size: int = 128
) -> dict:
    """Greedy success rate over ``envs`` (a fixed eval set), in batches of ``batch_size``."""
    params = SamplingParams(max_new_tokens=max_new_tokens)
    ok, total = 0, 0.0
    for start in range(0, len(envs), batch_size):
        chunk = envs[start : start + batch_size]
        ids = torch.arange(start, start + len(chunk))
        traj = collect(
            engine,
            chunk,
            params,
            tok=tok,
            sample_ids=ids,
            group_ids=ids,
            greedy=True,
            max_turns=max_turns,
        )
        ok += sum(r is None for r in traj.failure_reason)
        total += float(traj.reward.sum())
    n = len(envs)
    return {"accuracy": ok / n, "n": n, "reward_mean": total / n}


def evaluate(s, step: int) -> float:
    """Held-out greedy accuracy of the session's rollout engine, recorded in ``evals``."""
    s.memory.begin_step(step)
    r = greedy_accuracy(
        s.engine,
        s.envs.eval_set(s.cfg.train.eval_size),
        tok=s.tok,
        max_new_tokens=s.cfg.rollout.max_new_tokens,
        max_turns=s.cfg.rollout.max_turns,
    )
    s.telemetry.emit(
        "evals",
        {
            "step": [step],
            "policy_version": [s.engine.policy_version],
            "split": ["heldout"],
            "n": [r["n"]],
            "accuracy": [r["accuracy"]],
            "reward_mean": [r["reward_mean"]],
        },
    )
    return r["accuracy"]

"""Greedy held-out evaluation: the environment's fixed eval episodes through the rollout engine.

``accuracy`` is the fraction of episodes that succeeded (no failure reason); ``reward_mean`` the
mean total reward (the environment's: the reward mixer does not run here). Multi-turn environments
are evaluated the same way (greedy turns). Besides the ``heldout`` row, ``evals`` gets one row
per domain of the eval set (split ``heldout/<domain>``), what per-domain teachers are judged by.
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
    by_domain: dict[str, list[int]] = {}
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
        for d, r in zip(traj.domain, traj.failure_reason, strict=True):
            hits = by_domain.setdefault(d, [0, 0])
            hits[0] += r is None
            hits[1] += 1
    n = len(envs)
    domains = {d: {"accuracy": k / m, "n": m} for d, (k, m) in sorted(by_domain.items())}
    return {"accuracy": ok / n, "n": n, "reward_mean": total / n, "by_domain": domains}


def evaluate(s, step: int) -> float:
    """Held-out greedy accuracy of the session's rollout engine, recorded in ``evals`` (overall
    and per domain); the per-domain accuracies are kept in ``s.eval_by_domain``."""
    s.memory.begin_step(step)
    r = greedy_accuracy(
        s.engine,
        s.envs.eval_set(s.cfg.train.eval_size),
        tok=s.tok,
        max_new_tokens=s.cfg.rollout.max_new_tokens,
        max_turns=s.cfg.rollout.max_turns,
    )
    doms = r["by_domain"]
    s.telemetry.emit(
        "evals",
        {
            "step": [step] * (1 + len(doms)),
            "policy_version": [s.engine.policy_version] * (1 + len(doms)),
            "split": ["heldout", *(f"heldout/{d}" for d in doms)],
            "n": [r["n"], *(v["n"] for v in doms.values())],
            "accuracy": [r["accuracy"], *(v["accuracy"] for v in doms.values())],
            "reward_mean": [r["reward_mean"], *([None] * len(doms))],
        },
    )
    s.eval_by_domain = {d: v["accuracy"] for d, v in doms.items()}
    return r["accuracy"]

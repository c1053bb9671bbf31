"""Held-out evaluation beside the loops: greedy episodes, plain or compacting.

Greedy held-out evaluation: the environment's fixed eval episodes through the rollout engine.

``accuracy`` is the fraction of episodes that succeeded (no failure reason); ``reward_mean`` the
mean total reward (the environment's: the reward mixer does not run here). Multi-turn environments
are evaluated the same way (greedy turns). Besides the ``heldout`` row, ``evals`` gets one row
per domain of the eval set (split ``heldout/<domain>``), what per-domain teachers are judged by.

Held-out success on a compacting environment: greedy episodes through the compaction rollout.

Success is counted per *trajectory* (all its segments share the verdict), never per row. The
evaluation always compacts at the configured budget (the deployed inference protocol), whatever
the training rollouts do.
"""

from __future__ import annotations

import torch

from core.rollout.compaction import CompactionConfig, collect_compacted, counter_ids
from core.rollout.sampling import SamplingParams
from core.rollout.trajectories import collect


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


def compaction_accuracy(
    engine,
    envs,
    *,
    tok,
    cfg: CompactionConfig,
    max_new_tokens: int,
    max_turns: int,
    batch_size: int = 128,
    greedy: bool = True,
    generator: torch.Generator | None = None,
) -> dict:
    """Fraction of ``envs`` solved with compaction on; also mean compactions and summary length."""
    params = SamplingParams(max_new_tokens=max_new_tokens)
    ok = n_events = summary_tokens = 0
    for start in range(0, len(envs), batch_size):
        chunk = envs[start : start + batch_size]
        out = collect_compacted(
            engine,
            chunk,
            params,
            tok=tok,
            cfg=cfg,
            new_ids=counter_ids(),
            group_ids=torch.arange(len(chunk)),
            generator=generator,
            greedy=greedy,
            max_turns=max_turns,
            enabled=True,
        )
        first = out.traj.segment == 0  # [B] one row per trajectory
        ok += sum(r is None for r, f in zip(out.traj.failure_reason, first.tolist()) if f)
        n_events += len(out.events)
        summary_tokens += sum(e.summary_len for e in out.events)
    n = len(envs)
    return {
        "accuracy": ok / n,
        "n": n,
        "compactions_per_episode": n_events / n,
        "summary_len_mean": summary_tokens / max(n_events, 1),
    }


def evaluate_compaction(s, step: int) -> float:
    """Held-out greedy success of the session's rollout engine, recorded in ``evals``."""
    s.memory.begin_step(step)
    r = compaction_accuracy(
        s.engine,
        s.envs.eval_set(s.cfg.train.eval_size),
        tok=s.tok,
        cfg=s.cfg.compaction,
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
            "reward_mean": [r["accuracy"]],
        },
    )
    return r["accuracy"]

"""Held-out success on a compacting environment: greedy episodes through the compaction rollout.

Success is counted per *trajectory* (all its segments share the verdict), never per row. The
evaluation always compacts at the configured budget (the deployed inference protocol), whatever
the training rollouts do.
"""

from __future__ import annotations

import torch

from core.rollout.compaction import CompactionConfig, collect_compacted, counter_ids
from core.rollout.sampling import SamplingParams


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

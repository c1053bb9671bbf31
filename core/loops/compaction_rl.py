"""CompactionRL: summaries are trained actions; segments share the final reward.

    segments, events = collect_compacted(envs, policy)    # summary when C − |h_t| < T_comp;
                                                          # context = system + resume(S) + last k pairs
    values, Â_loc    = critic, skip_observation_gae       # per segment (row), final reward shared
    Â_{s,i}          = (γλ)^{N_{>s}} · Â_loc               # N_{>s}: trainable tokens after segment s
    L_π              = −1/|M| Σ_{(s,i)∈M} min(ρÂ, clip(ρ)Â)  # M: all trainable tokens, all segments

The update is ``core.loops.critic_step`` (``compaction.cross_segment_discount`` switches the
discount, ``algorithm.loss_agg_mode`` the normalisation: ``global-token`` over M, or
``seq-mean-token-mean`` — the mean of segment means — for the ablation;
``compaction.train_summaries = false`` keeps summary tokens out of the loss: the baseline whose
summaries are not learned). One ``compactions`` row
per summary. Held-out success always compacts (``core.loops.evaluate``).
"""

from __future__ import annotations

import time

import numpy as np

from core.loops.critic_step import critic_rl_step
from core.loops.evaluate import evaluate_compaction
from core.loops.loop import run_steps
from core.loops.session import Session
from core.rollout.compaction import CompactionEvent, collect_compacted


def compaction_step(s: Session, step: int) -> dict:
    cfg, alg = s.cfg, s.cfg.algorithm
    t0 = time.perf_counter()
    s.memory.begin_step(step)
    envs = s.envs.sample(
        alg.prompts_per_step, seed=cfg.train.seed * 1_000_003 + step, repeats=alg.group_size
    )
    out = collect_compacted(
        s.engine,
        envs,
        cfg.rollout.sampling(),
        tok=s.tok,
        cfg=cfg.compaction,
        new_ids=s.ids.samples,
        group_ids=s.ids.groups(alg.prompts_per_step).repeat_interleave(alg.group_size),
        generator=s.generator,
        max_turns=cfg.rollout.max_turns,
    )
    if not cfg.compaction.train_summaries:
        out.traj.loss_mask &= ~out.traj.is_role("summary")
    s.memory.rollout_done(out.traj)
    tables = {"compactions": compaction_rows(out.events, step=step)} if out.events else {}
    return critic_rl_step(
        s,
        step,
        out.traj,
        t0=t0,
        cross_segment=cfg.compaction.cross_segment_discount,
        tables=tables,
    )


def compaction_rows(events: list[CompactionEvent], *, step: int) -> dict:
    """Columns of ``compactions``: one row per summary."""

    def col(name: str, dtype) -> np.ndarray:
        return np.array([getattr(e, name) for e in events], dtype=dtype)

    return {
        "step": np.full(len(events), step, dtype=np.int64),
        "sample_id": col("sample_id", np.int64),
        "parent_sample_id": col("parent_id", np.int64),
        "segment": col("segment", np.int32),
        "context_len_before": col("context_before", np.int32),
        "context_len_after": col("context_after", np.int32),
        "summary_len": col("summary_len", np.int32),
        "tail_pairs": col("tail_pairs", np.int32),
        "summary_finished": col("finished", np.bool_),
    }


def run_compaction(s: Session, *, steps: int, progress=None) -> dict:
    """Train ``steps`` CompactionRL steps; returns the summary (first/last eval, metrics)."""
    return run_steps(
        s, compaction_step, steps=steps, progress=progress, evaluate_fn=evaluate_compaction
    )

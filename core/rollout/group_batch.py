"""Finished groups → one ``Trajectories`` batch (+ the per-turn records of its samples).

Rows: first the trainable groups, each as exactly ``group_size`` valid samples, group-major (what
``grpo_token_advantages`` expects of rows ``[0, n_grouped)``); then the samples that leave the
batch but stay in telemetry: environment failures (status ``env_failure``, with their reason) and
every sample of a dropped group (``dropped_group``). Per token it adds the turn and the KV version;
per sample the worker, environment latency and whether it was a refill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from core.rollout.episode import Episode, Group
from core.rollout.trajectories import Trajectories, assemble


@dataclass
class GroupBatch:
    traj: Trajectories
    n_grouped: int
    """Rows ``[0, n_grouped)`` are whole groups of ``group_size`` (the GRPO part)."""
    episodes: list[Episode]
    """Row order."""
    n_env_failures: int
    n_refilled: int
    n_groups_dropped: int


def _token_field(episodes: list[Episode], attr: str, *, n_prompt: int, t: int) -> torch.Tensor:
    """[B, T] int64 of a per-post-prompt-token list attribute (-1 elsewhere)."""
    out = torch.full((len(episodes), t), -1, dtype=torch.int64)
    for i, e in enumerate(episodes):
        values = getattr(e, attr)
        if values:
            out[i, n_prompt : n_prompt + len(values)] = torch.tensor(values, dtype=torch.int64)
    return out


def groups_to_batch(
    groups: list[Group], dropped: list[Group], *, tok, group_size: int
) -> GroupBatch:
    grouped: list[Episode] = []
    extra: list[Episode] = []
    for g in groups:
        valid = g.valid[:group_size]
        grouped += valid
        extra += [e for e in g.episodes if e not in valid]
    for g in dropped:
        extra += g.episodes
    episodes = grouped + extra
    traj = assemble(
        episodes,
        tok=tok,
        sample_ids=torch.tensor([e.sample_id for e in episodes], dtype=torch.int64),
        group_ids=torch.tensor([e.group_id for e in episodes], dtype=torch.int64),
    )
    in_dropped = torch.tensor(
        [i >= len(grouped) and not e.env_failure for i, e in enumerate(episodes)],
        dtype=torch.bool,
    )
    if in_dropped.any():
        traj.drop(in_dropped, "dropped_group")
    b, t = traj.ids.shape
    traj.turn = _token_field(episodes, "turn_of", n_prompt=traj.n_prompt, t=t)
    traj.kv_version = _token_field(episodes, "kv_versions", n_prompt=traj.n_prompt, t=t)
    traj.worker = torch.tensor([e.worker if e.worker is not None else -1 for e in episodes])
    traj.env_latency_s = torch.tensor([e.env_latency_s for e in episodes], dtype=torch.float32)
    traj.refill = torch.tensor([e.refill for e in episodes], dtype=torch.bool)
    return GroupBatch(
        traj,
        len(grouped),
        episodes,
        n_env_failures=sum(e.env_failure for e in episodes),
        n_refilled=sum(e.refill for e in episodes),
        n_groups_dropped=len(dropped),
    )

"""Rule rewards and penalties: deterministic checks of a response (format, length).

``format``: 1 if the response ended on EOS and its text fully matches ``rewards.format_pattern``,
else 0. ``length``: the generated tokens beyond ``rewards.length_budget`` (a count, ≥ 0; its λ
turns it into reward units). Both score every sample (no failure reasons).
"""

from __future__ import annotations

import re

import torch

from core.rollout.trajectories import Trajectories


def format_reward(traj: Trajectories, *, pattern: str) -> torch.Tensor:
    """[B] fp32 in {0, 1}: finished on EOS and the response text matches ``pattern``."""
    rx = re.compile(pattern)
    ok = [
        bool(f) and rx.fullmatch(text.strip()) is not None
        for f, text in zip(traj.finished.tolist(), traj.response_text, strict=True)
    ]
    return torch.tensor(ok, dtype=torch.float32)


def length_penalty(traj: Trajectories, *, budget: int) -> torch.Tensor:
    """[B] fp32: generated tokens (EOS included) beyond ``budget``."""
    n = traj.generated.sum(dim=1)  # [B]
    return (n - budget).clamp_min(0).to(torch.float32)

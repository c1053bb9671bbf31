"""The reward scalarization of a step: R = Σ_k w_k R_k − Σ_j λ_j P_j over traceable components.

The environment's components (e.g. ``verifier``) arrive with the trajectories; the configured
scorers add theirs (``format``, ``orm``, ``judge``) and the penalties (``length``). Every component
keeps its per-sample value (null where it could not score), its signed weight (penalties carry
−λ_j) and per-sample failure reason in ``Trajectories.reward_components / reward_weights /
reward_failures``; the total is Σ weight · value over the non-null values, computed in float64
and stored as float32, so it recomputes from what telemetry records. A component that could not
score a sample contributes nothing to that sample's total (it is not counted as 0).
Without ``[rewards]`` settings the environment's total is kept as is (every weight 1).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from core.rewards.config import PENALTIES, SCORERS, RewardConfig
from core.rewards.rules import format_reward, length_penalty
from core.rollout.trajectories import Trajectories
from core.tokenizer.tokenizer import Tokenizer


class RewardMixer:
    """Scores a step's trajectories with the configured components and sets their total."""

    def __init__(self, cfg: RewardConfig, *, tok: Tokenizer, repo_root: Path, student: dict):
        self.cfg, self.tok = cfg, tok
        self.orm = self.judge = None
        if "orm" in cfg.weights:
            from core.rewards.orm import load_orm

            self.orm = load_orm(_resolve(cfg.orm, repo_root), **student)
        if "judge" in cfg.weights:
            from core.rewards.judge import Judge

            self.judge = Judge.from_checkpoint(
                _resolve(cfg.judge, repo_root), tok=tok, max_tokens=cfg.judge_max_tokens, **student
            )

    def apply(self, traj: Trajectories) -> dict:
        """Fill the components, weights, failure reasons and ``traj.reward``; returns the step's
        reward metrics (``judge_verifier_agreement`` when both exist, else None)."""
        env = dict(traj.reward_components)
        if not self.cfg.mixed:
            traj.reward_weights = {k: 1.0 for k in env}
            return {"judge_verifier_agreement": None}
        comps, failures = dict(env), {}
        if "format" in self.cfg.weights:
            comps["format"] = format_reward(traj, pattern=self.cfg.format_pattern)
        if self.orm is not None:
            comps["orm"] = self.orm.score(_sequences(traj), pad_id=self.tok.pad_id)
        if self.judge is not None:
            comps["judge"], failures["judge"] = self._judge(traj)
        weights = {k: float(self.cfg.weights.get(k, 0.0)) for k in comps}
        unknown = sorted(set(self.cfg.weights) - set(comps))
        if unknown:
            raise ValueError(
                f"rewards.weights names {unknown}: neither a component of the environment "
                f"({sorted(env)}) nor a scorer ({list(SCORERS)})"
            )
        for name, lam in self.cfg.penalties.items():
            assert name in PENALTIES
            comps[name] = length_penalty(traj, budget=self.cfg.length_budget)
            weights[name] = -float(lam)
        none = [None] * traj.size  # scorers that scored every sample: no failure reason
        traj.reward_components, traj.reward_weights = comps, weights
        traj.reward_failures = {k: failures.get(k, none) for k in comps if k not in env}
        traj.reward = total_reward(comps, weights)
        return {"judge_verifier_agreement": judge_agreement(comps)}

    def _judge(self, traj: Trajectories) -> tuple[torch.Tensor, list[str | None]]:
        pairs = []
        n_prompt = traj.is_role("prompt").sum(dim=1).tolist()  # [B]
        for i in range(traj.size):
            ids = traj.ids[i][traj.valid[i]].tolist()
            question = self.tok.decode(ids[: n_prompt[i]], skip_special_tokens=True)
            gen = traj.ids[i][traj.generated[i]].tolist()
            pairs.append((question, self.tok.decode(gen, skip_special_tokens=True)))
        verdicts = self.judge.verdicts(pairs)
        values = [math.nan if v.value is None else v.value for v in verdicts]
        return torch.tensor(values, dtype=torch.float32), [v.failure_reason for v in verdicts]


def total_reward(components: dict[str, torch.Tensor], weights: dict[str, float]) -> torch.Tensor:
    """[B] fp32: Σ_k weight_k · value_k over each sample's non-null (non-NaN) values, in float64.

    Args:
        components: name -> [B] values (NaN: the component did not score the sample).
    """
    names = sorted(components)
    total = torch.zeros(next(iter(components.values())).shape[0], dtype=torch.float64)
    for k in names:
        v = components[k].to(torch.float64)
        total += torch.where(torch.isnan(v), torch.zeros_like(v), weights[k] * v)
    return total.to(torch.float32)


def judge_agreement(components: dict[str, torch.Tensor]) -> float | None:
    """Fraction of samples with a parsed judge verdict and a verifier value on which the two
    agree (judge yes ⟺ verifier 1); None when no sample has both."""
    if "judge" not in components or "verifier" not in components:
        return None
    j, v = components["judge"], components["verifier"]
    both = ~torch.isnan(j) & ~torch.isnan(v)
    if not bool(both.any()):
        return None
    return float(((j[both] > 0.5) == (v[both] > 0.5)).float().mean())


def _sequences(traj: Trajectories) -> list[list[int]]:
    """Each sample's exact ids (prompt + generated), without padding."""
    return [traj.ids[i][traj.valid[i]].tolist() for i in range(traj.size)]


def _resolve(path: str, repo_root: Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() else repo_root / p

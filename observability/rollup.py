"""A step's ``steps`` rollups derived from its trajectories, as closedloop's own trainer defines them.

mismatch = |train_logp - rollout_logp| over action tokens where both are finite (mean and p99,
linear interpolation as ``torch.quantile``); masked fraction = 1 - trusted / action tokens, where
trusted = in the loss and kept by the trust mask (so, as in ``core/loops/step.py``, every
reason a token left the loss counts); retokenized fraction = action tokens whose trainer id differs from the
rollout's (or is missing) over action tokens; entropy = mean over action tokens; rewards: mean and
population std over samples; degenerate groups = groups whose rewards are all equal (needs
``group_id`` in every trajectory's ``sample``). A rollup whose inputs are not recorded is null.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from observability.trajectory import Trajectory


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _recorded(trajs: Sequence[Trajectory], name: str) -> bool:
    return bool(trajs) and all(getattr(tr, name) is not None for tr in trajs)


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


def _mismatch(trajs: Sequence[Trajectory]) -> dict[str, float | None]:
    if not (_recorded(trajs, "rollout_logp") and _recorded(trajs, "train_logp")):
        return {}
    delta = _cat([np.abs(tr.train_logp - tr.rollout_logp)[tr.action] for tr in trajs])
    delta = delta[np.isfinite(delta)]
    return {
        "mismatch_abs_mean": _mean(delta),
        "mismatch_abs_p99": float(np.quantile(delta, 0.99)) if len(delta) else None,
    }


def _degenerate_fraction(trajs: Sequence[Trajectory]) -> float | None:
    groups: dict[Any, list[float]] = defaultdict(list)
    for tr in trajs:
        group = tr.sample.get("group_id")
        if group is None or tr.reward is None:
            return None
        groups[group].append(float(tr.reward))
    if not groups:
        return None
    return float(np.mean([len(set(rewards)) == 1 for rewards in groups.values()]))


def step_rollup(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """``steps`` columns (one row's values) derived from a step's trajectories; rollups whose
    inputs are not recorded in every trajectory are left out (null)."""
    loss = _cat([tr.loss_mask for tr in trajs]).astype(bool)
    action = _cat([tr.action for tr in trajs]).astype(bool)
    out: dict[str, Any] = {
        "n_tokens": int(sum(tr.n_tokens for tr in trajs)),
        "n_loss_tokens": int(loss.sum()),
        **_mismatch(trajs),
    }
    if _recorded(trajs, "trust_mask"):
        trusted = _cat([tr.trust_mask for tr in trajs]).astype(bool) & loss & action
        out["n_trusted_tokens"] = int(trusted.sum())
        out["masked_fraction"] = 1.0 - int(trusted.sum()) / max(int(action.sum()), 1)
    if _recorded(trajs, "train_token_ids"):
        same = _cat([(tr.train_token_ids == tr.token_ids).filled(False)[tr.action] for tr in trajs])
        out["retokenized_fraction"] = float(1.0 - same.mean()) if len(same) else 0.0
    if _recorded(trajs, "entropy"):
        ent = _cat([tr.entropy for tr in trajs])[action]
        out["entropy"] = _mean(ent[np.isfinite(ent)])
    rewards = np.array([tr.reward for tr in trajs if tr.reward is not None], dtype=np.float64)
    if len(rewards):
        out["reward_mean"], out["reward_std"] = float(rewards.mean()), float(rewards.std())
    out["degenerate_group_fraction"] = _degenerate_fraction(trajs)
    return {k: v for k, v in out.items() if v is not None}

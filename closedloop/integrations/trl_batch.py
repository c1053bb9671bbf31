"""TRL ``GRPOTrainer`` batches -> closedloop rows: what TRL computed, per sample and token.

Two captures per sample, joined when its optimizer step ends: ``Generated`` (from
``_generate_and_score_completions`` and ``_calculate_rewards``: exact prompt and completion ids,
completion and tool masks, rewards per reward function, the advantage, vLLM's sampling log-probs
and TRL's importance-sampling weights) and ``Trained`` (from ``_compute_loss``: the current
log-probs and entropies of the loss forward, π_old, the clip branches, the off-policy mask).
Completion tensors are right-padded ``[B, C]``; each row is cut to its completion's length.
The clip masks are TRL 1.16's own expressions (``GRPOTrainer._compute_loss``: ``coef_1``,
``is_low_clipped``, ``is_high_clipped``, ``is_cispo_clipped``) applied to TRL's tensors, so they
equal what TRL computed; losses without a clip (sapo, vespo) record none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from observability.trajectory import Trajectory

CLIPPED_LOSSES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
"""TRL loss types with PPO's two-sided clip (``cispo`` clips above only)."""


def _np(t: Any) -> np.ndarray:
    """A CPU numpy copy of a tensor (floats as float32, bools and ints kept)."""
    t = t.detach()
    return (t.float() if t.is_floating_point() else t).cpu().numpy()


def _rows(t: Any, n_rows: int) -> np.ndarray | None:
    """``t`` as ``[B, C]`` numpy (a ``[B]`` or ``[B, 1]`` per-sequence value broadcast), or None."""
    if t is None:
        return None
    a = _np(t)
    return a.reshape(n_rows, -1) if a.ndim < 2 else a


def _row(a: np.ndarray | None, i: int, n: int) -> np.ndarray | None:
    """Row ``i`` of ``[B, C]`` cut to ``n`` entries (a ``[B, 1]`` value repeated)."""
    if a is None:
        return None
    r = a[i]
    return np.full(n, r[0], dtype=r.dtype) if len(r) == 1 else r[:n]


@dataclass(frozen=True)
class LossSettings:
    """The trainer settings that decide TRL's clip and masks (``GRPOTrainer`` attributes)."""

    loss_type: str
    epsilon_low: float
    epsilon_high: float
    delta: float | None
    importance_sampling_level: str
    off_policy_mask_threshold: float | None
    is_mask_mode: bool
    """vLLM importance sampling is on in a ``*_mask`` mode: a weight of 0 masks the token."""
    is_correction: bool
    """vLLM importance sampling correction is on (``importance_sampling_ratio`` in the batch)."""

    @classmethod
    def of(cls, trainer: Any) -> LossSettings:
        correction = bool(trainer.use_vllm and trainer.vllm_importance_sampling_correction)
        return cls(
            loss_type=trainer.loss_type,
            epsilon_low=trainer.epsilon_low,
            epsilon_high=trainer.epsilon_high,
            delta=trainer.args.delta,
            importance_sampling_level=trainer.importance_sampling_level,
            off_policy_mask_threshold=trainer.off_policy_mask_threshold,
            is_mask_mode=correction and trainer.vllm_importance_sampling_mode.endswith("_mask"),
            is_correction=correction,
        )


@dataclass
class Generated:
    """One completion as TRL generated and scored it (per-token arrays are ``[C]``)."""

    prompt_ids: np.ndarray
    completion_ids: np.ndarray
    loss_mask: np.ndarray
    """TRL's ``mask``: completion mask times tool mask."""
    action: np.ndarray | None
    """The tool mask (1: the policy generated the token); None: no tools."""
    rewards: np.ndarray
    """``[K]`` one value per reward function, NaN where it returned None."""
    advantage: float | np.ndarray
    """TRL's sequence advantage (``[C]`` when a subclass supplies per-token advantages)."""
    group_id: int
    policy_version: int
    rollout_logp: np.ndarray | None
    is_weight: np.ndarray | None


@dataclass
class Trained:
    """What the loss forward computed for one completion (``[C]`` arrays)."""

    step: int
    train_logp: np.ndarray
    old_logp: np.ndarray
    entropy: np.ndarray | None
    clip_low: np.ndarray | None
    clip_high: np.ndarray | None
    keep: np.ndarray | None
    """The off-policy sequence mask (OPSM), broadcast; None: off."""


def generated(
    out: Mapping[str, Any],
    completion_ids: Sequence[Sequence[int]],
    rewards: Any,
    *,
    first_id: int,
    num_generations: int,
    policy_version: int,
) -> dict[int, Generated]:
    """The samples of one generation batch (``out``: what ``_generate_and_score_completions``
    returns; ``completion_ids``: the exact ids the reward functions saw; ``rewards``: ``[B, K]``
    ``_calculate_rewards``), keyed by sample id ``first_id + row``."""
    b = len(completion_ids)
    prompt_ids, prompt_mask = _np(out["prompt_ids"]), _np(out["prompt_mask"]).astype(bool)
    mask = _np(out["completion_mask"])
    tool = _rows(out.get("tool_mask"), b)
    loss = mask if tool is None else mask * tool
    adv, rw = _np(out["advantages"]), _np(rewards).astype(np.float64)
    sampling = _rows(out.get("sampling_per_token_logps"), b)
    weight = _rows(out.get("importance_sampling_ratio"), b)
    if len(adv) != b or len(rw) != b or len(prompt_ids) != b:
        raise ValueError(
            f"TRL batch: {len(prompt_ids)} prompts, {len(adv)} advantages, {len(rw)} reward rows "
            f"for {b} completions (one process expected)"
        )
    rows = {}
    for i, ids in enumerate(completion_ids):
        n = len(ids)
        rows[first_id + i] = Generated(
            prompt_ids=prompt_ids[i][prompt_mask[i]],
            completion_ids=np.asarray(ids, dtype=np.int64),
            loss_mask=_row(loss, i, n).astype(bool),
            action=None if tool is None else _row(tool, i, n).astype(bool),
            rewards=rw[i],
            advantage=float(adv[i]) if adv.ndim == 1 else _row(adv, i, n),
            group_id=(first_id + i) // num_generations,
            policy_version=policy_version,
            rollout_logp=_row(sampling, i, n),
            is_weight=_row(weight, i, n),
        )
    return rows


def clip_masks(
    logps: Any, old: Any, advantages: Any, mask: Any, s: LossSettings
) -> tuple[Any, Any] | tuple[None, None]:
    """TRL's clip branches ``[B, T]`` bool (``_compute_loss``, TRL 1.16), torch in and out.

    logps, old: ``[B, T]`` current and π_old log-probs; advantages: ``[B]`` or ``[B, T]``;
    mask: ``[B, T]`` TRL's loss mask (used by sequence-level importance sampling)."""
    import torch

    log_ratio = logps - old
    if s.importance_sampling_level == "token":
        log_w = log_ratio
    else:  # "sequence"
        log_w = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_w)
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    if s.loss_type in CLIPPED_LOSSES:
        if s.delta is not None:
            coef_1 = torch.clamp(coef_1, max=s.delta)
        low = (coef_1 < 1 - s.epsilon_low) & (adv < 0)
        high = (coef_1 > 1 + s.epsilon_high) & (adv > 0)
    elif s.loss_type == "cispo":
        high = (coef_1 > s.epsilon_high) & (adv > 0)
        low = torch.zeros_like(high)
    else:
        return None, None
    return low.expand_as(logps), high.expand_as(logps)


def trained(
    inputs: Mapping[str, Any],
    sample_ids: np.ndarray,
    logps: Any,
    entropies: Any,
    *,
    settings: LossSettings,
    step: int,
    off_policy_mask: Any = None,
) -> dict[int, Trained]:
    """The loss-side rows of one ``_compute_loss`` batch (``inputs``: TRL's batch; ``logps``,
    ``entropies``: ``[B, T]`` of the loss forward; ``off_policy_mask``: ``[B, 1]`` or None)."""
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    logps = logps.detach()
    old = inputs.get("old_per_token_logps")
    old = logps if old is None else old
    low, high = clip_masks(logps, old, inputs["advantages"], mask, settings)
    keep = _rows(off_policy_mask, len(sample_ids))
    cols = {
        "train_logp": _np(logps),
        "old_logp": _np(old),
        "entropy": None if entropies is None else _np(entropies),
        "clip_low": None if low is None else _np(low),
        "clip_high": None if high is None else _np(high),
        "keep": None if keep is None else np.repeat(keep, logps.shape[1], axis=1),
    }
    return {
        sid: Trained(step=step, **{k: None if v is None else v[i] for k, v in cols.items()})
        for i, sid in enumerate(sample_ids.tolist())
    }


def _with_prompt(n_prompt: int, values: np.ndarray | None, n: int, fill: Any = 0) -> Any:
    """A ``[P + C]`` array: ``fill`` on the prompt, then ``values`` cut to the completion."""
    if values is None:
        return None
    return np.concatenate([np.full(n_prompt, fill, dtype=values.dtype), values[:n]])


def trajectory(
    sample_id: int,
    g: Generated,
    t: Trained,
    *,
    settings: LossSettings,
    weights: np.ndarray,
    eos_ids: Sequence[int],
) -> Trajectory:
    """One sample's ``Trajectory`` (tokens: prompt then completion); ``weights``: ``[K]`` TRL's
    reward weights (the reward is their weighted sum over the functions that scored, as TRL's)."""
    p, n = len(g.prompt_ids), len(g.completion_ids)
    keep = None
    if settings.is_correction or t.keep is not None:
        keep = np.ones(n, dtype=bool)
        if settings.is_mask_mode and g.is_weight is not None:
            keep &= g.is_weight[:n] > 0
        if t.keep is not None:
            keep &= t.keep[:n].astype(bool)
    scored = ~np.isnan(g.rewards)
    reward = float(np.sum(weights[scored] * g.rewards[scored])) if scored.any() else None
    per_token = isinstance(g.advantage, np.ndarray)
    finish = "stop" if n and int(g.completion_ids[-1]) in eos_ids else "length"
    return Trajectory(
        sample_id=sample_id,
        token_ids=np.concatenate([g.prompt_ids.astype(np.int64), g.completion_ids]),
        n_prompt=p,
        rollout_logp=_with_prompt(p, g.rollout_logp, n),
        train_logp=_with_prompt(p, t.train_logp, n),
        old_logp=_with_prompt(p, t.old_logp, n),
        entropy=_with_prompt(p, t.entropy, n),
        action=_with_prompt(p, g.action, n, False),
        loss_mask=_with_prompt(p, g.loss_mask, n, False),
        advantage=_with_prompt(p, g.advantage, n) if per_token else g.advantage,
        trust_mask=_with_prompt(p, keep, n, False),
        clip_low=_with_prompt(p, t.clip_low, n, False),
        clip_high=_with_prompt(p, t.clip_high, n, False),
        is_weight=_with_prompt(p, g.is_weight, n, 1.0),
        reward=reward,
        status="trained" if g.loss_mask.any() else "truncated",
        sample={
            "group_id": g.group_id,
            "advantage": None if per_token else g.advantage,
            "finish_reason": finish,
            "policy_version_rollout": g.policy_version,
            "policy_version_train": t.step,
            "staleness": t.step - g.policy_version,
        },
    )

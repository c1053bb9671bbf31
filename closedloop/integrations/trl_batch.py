"""TRL ``GRPOTrainer`` batches as numpy: what TRL computed, per completion and token.

Two captures, joined per optimizer step by ``trl_columns``: ``GenBatch`` (from
``_generate_and_score_completions`` and ``_calculate_rewards``: exact prompt and completion ids,
completion and tool masks, rewards per reward function, advantages, vLLM's sampling log-probs and
TRL's importance-sampling weights) and ``LossBatch`` (from ``_compute_loss``: the loss forward's
log-probs and entropies, π_old, the clip branches, the off-policy mask). Completion tensors are
right-padded ``[B, C]`` (TRL's split keeps the generation batch's width); one copy to the CPU per
tensor and batch. The clip masks are TRL 1.16's own expressions (``GRPOTrainer._compute_loss``:
``coef_1``, ``is_low_clipped``, ``is_high_clipped``, ``is_cispo_clipped``) applied to TRL's
tensors, so they equal what TRL computed; losses without a clip (sapo, vespo) record none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
class GenBatch:
    """One generation batch as TRL generated and scored it: ``[B, C]`` right-padded rows (C: the
    batch's completion width), sample ids ``first_id + row``."""

    first_id: int
    policy_version: int
    """Optimizer steps taken when it was generated (the weights version that sampled it)."""
    prompt_ids: list[np.ndarray]
    """B exact prompt ids (TRL's left padding removed)."""
    completion_ids: np.ndarray
    n: np.ndarray
    """[B] completion lengths (the ids the reward functions saw)."""
    loss_mask: np.ndarray
    """TRL's ``mask``: completion mask times tool mask (bool)."""
    action: np.ndarray | None
    """The tool mask (True: the policy generated the token); None: no tools."""
    rewards: np.ndarray
    """[B, K] one value per reward function, NaN where it returned None."""
    advantage: np.ndarray
    """[B] TRL's sequence advantages ([B, C] when a subclass supplies per-token ones)."""
    rollout_logp: np.ndarray | None
    is_weight: np.ndarray | None


@dataclass
class LossBatch:
    """What one ``_compute_loss`` call computed: ``[b, C]`` rows of sample ``ids``."""

    step: int
    ids: np.ndarray
    train_logp: np.ndarray
    old_logp: np.ndarray
    entropy: np.ndarray | None
    clip_low: np.ndarray | None
    clip_high: np.ndarray | None
    keep: np.ndarray | None
    """The off-policy sequence mask (OPSM), broadcast to tokens; None: off."""


def gen_batch(
    out: Mapping[str, Any],
    completion_ids: Sequence[Sequence[int]],
    rewards: Any,
    *,
    first_id: int,
    policy_version: int,
) -> GenBatch:
    """``out``: what ``_generate_and_score_completions`` returns; ``completion_ids``: the exact
    ids the reward functions saw; ``rewards``: ``[B, K]`` from ``_calculate_rewards``."""
    b = len(completion_ids)
    prompt_ids, prompt_mask = _np(out["prompt_ids"]), _np(out["prompt_mask"]).astype(bool)
    mask = _np(out["completion_mask"])
    tool = _rows(out.get("tool_mask"), b)
    adv, rw = _np(out["advantages"]), _np(rewards).astype(np.float64)
    if len(adv) != b or len(rw) != b or len(prompt_ids) != b:
        raise ValueError(
            f"TRL batch: {len(prompt_ids)} prompts, {len(adv)} advantages, {len(rw)} reward rows "
            f"for {b} completions (one process expected)"
        )
    ids = _np(out["completion_ids"]).astype(np.int64)
    width = ids.shape[1]

    def wide(a: np.ndarray | None) -> np.ndarray | None:  # a [B, 1] sequence value per token
        return None if a is None else np.broadcast_to(a, (b, width))

    return GenBatch(
        first_id=first_id,
        policy_version=policy_version,
        prompt_ids=[prompt_ids[i][prompt_mask[i]].astype(np.int64) for i in range(b)],
        completion_ids=ids,
        n=np.array([len(c) for c in completion_ids], dtype=np.int64),
        loss_mask=(mask if tool is None else mask * tool).astype(bool),
        action=None if tool is None else tool.astype(bool),
        rewards=rw,
        advantage=adv,
        rollout_logp=_rows(out.get("sampling_per_token_logps"), b),
        is_weight=wide(_rows(out.get("importance_sampling_ratio"), b)),
    )


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


def loss_batch(
    inputs: Mapping[str, Any],
    ids: np.ndarray,
    logps: Any,
    entropies: Any,
    *,
    settings: LossSettings,
    step: int,
    off_policy_mask: Any = None,
) -> LossBatch:
    """One ``_compute_loss`` batch (``inputs``: TRL's batch; ``logps``, ``entropies``: ``[b, C]``
    of the loss forward; ``off_policy_mask``: ``[b, 1]`` or None)."""
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    logps = logps.detach()
    old = inputs.get("old_per_token_logps")
    old = logps if old is None else old
    low, high = clip_masks(logps, old, inputs["advantages"], mask, settings)
    keep = _rows(off_policy_mask, len(ids))
    return LossBatch(
        step=step,
        ids=ids,
        train_logp=_np(logps),
        old_logp=_np(old),
        entropy=None if entropies is None else _np(entropies),
        clip_low=None if low is None else _np(low),
        clip_high=None if high is None else _np(high),
        keep=None if keep is None else np.broadcast_to(keep.astype(bool), logps.shape),
    )

"""One optimizer step of a TRL run as closedloop columns: ``samples``, ``tokens``,
``reward_components`` and the ``steps`` row, built from whole ``[N, C]`` batches at once.

The vectorized form of ``observability.Trajectory`` + ``step_columns`` (a per-sample loop costs
more than TRL's own step on a small model), with the same column rules: tokens are prompt then
completion; roles ``prompt`` / ``action`` / ``observation`` (tool output); log-probs, ratio,
advantage, entropy, clip flags and IS weights on action tokens only (null elsewhere and where not
finite); ratio = exp(train − rollout); the step rollups as ``observability.rollup`` defines them
(the tests compare both on a recorded run). A sample whose loss mask is all zero (TRL's
``mask_truncated_completions``) has status ``truncated``; its reward is TRL's: the weighted sum
over the reward functions that scored it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from closedloop.integrations.trl_batch import GenBatch, LossBatch, LossSettings
from observability.trajectory import ROLE_ACTION, ROLE_OBSERVATION, ROLE_PROMPT

GEN_FIELDS = ("completion_ids", "loss_mask", "action", "rollout_logp", "is_weight")
LOSS_FIELDS = ("train_logp", "old_logp", "entropy", "clip_low", "clip_high", "keep")


def _pad(parts: list[np.ndarray], width: int, fill: Any) -> np.ndarray:
    """Row blocks ``[b, C_k]`` stacked into ``[N, width]`` (``fill`` right of each block)."""
    if all(p.shape[1] == width for p in parts):
        return np.concatenate(parts)
    out = np.full((sum(len(p) for p in parts), width), fill, dtype=parts[0].dtype)
    r = 0
    for p in parts:
        out[r : r + len(p), : p.shape[1]] = p
        r += len(p)
    return out


def gather(
    losses: Sequence[LossBatch], gens: Sequence[GenBatch]
) -> tuple[np.ndarray, dict[str, Any]]:
    """The step's sample ids (loss order) and their rows: every ``GEN_FIELDS`` / ``LOSS_FIELDS``
    array ``[N, C]`` (C: the widest batch), ``prompt_ids``, ``n``, ``rewards``, ``advantage``,
    ``policy_version``, ``step``."""
    blocks: dict[str, list] = {k: [] for k in (*GEN_FIELDS, *LOSS_FIELDS)}
    extra: dict[str, list] = {k: [] for k in ("prompt_ids", "n", "rewards", "advantage", "pv")}
    for lb in losses:
        (gen,) = {
            id(g): g for g in gens if g.first_id <= lb.ids[0] < g.first_id + len(g.n)
        }.values()
        rows = lb.ids - gen.first_id
        for k in GEN_FIELDS:
            v = getattr(gen, k)
            blocks[k].append(None if v is None else v[rows])
        for k in LOSS_FIELDS:
            blocks[k].append(getattr(lb, k))
        extra["prompt_ids"] += [gen.prompt_ids[r] for r in rows]
        extra["n"].append(gen.n[rows])
        extra["rewards"].append(gen.rewards[rows])
        extra["advantage"].append(gen.advantage[rows])
        extra["pv"].append(np.full(len(rows), gen.policy_version))
    width = max(b.shape[1] for b in blocks["train_logp"])
    fills = {"completion_ids": 0, "rollout_logp": np.nan, "is_weight": np.nan}
    out: dict[str, Any] = {
        k: None if any(b is None for b in v) else _pad(v, width, fills.get(k, 0))
        for k, v in blocks.items()
    }
    out["prompt_ids"] = extra["prompt_ids"]
    for k in ("n", "rewards", "pv"):
        out[k] = np.concatenate(extra[k])
    adv = extra["advantage"]
    out["advantage"] = np.concatenate(adv) if adv[0].ndim == 1 else _pad(adv, width, 0.0)
    out["step"] = losses[0].step
    return np.concatenate([lb.ids for lb in losses]), out


def _quantile99(x: np.ndarray) -> float | None:
    return float(np.quantile(x, 0.99)) if len(x) else None


def step_tables(
    ids: np.ndarray, rows: dict[str, Any], *, settings: LossSettings, weights: np.ndarray,
    group_size: int, eos_ids: Sequence[int],
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """``{"samples", "tokens", "reward_components", "steps"}`` columns of one step (``rows``
    from ``gather``; ``weights``: ``[K]`` TRL's reward weights)."""
    n, prompts, step = rows["n"], rows["prompt_ids"], rows["step"]
    width = rows["train_logp"].shape[1]
    p = np.array([len(x) for x in prompts], dtype=np.int64)
    length = p + n
    start = np.cumsum(length) - length  # first token of each sample
    total = int(length.sum())
    in_comp = np.arange(width)[None, :] < n[:, None]  # [N, C] real completion tokens
    sample_of = np.repeat(np.arange(len(ids)), length)
    pos = np.arange(total) - start[sample_of]
    is_comp = pos >= p[sample_of]
    comp_at = np.flatnonzero(is_comp)  # flat rows of completion tokens, in [N, C] row-major order

    def spread(m: np.ndarray, fill: Any, dtype: Any) -> np.ndarray:
        out = np.full(total, fill, dtype=dtype)
        out[comp_at] = m[in_comp]
        return out

    token_id = np.empty(total, dtype=np.int64)
    token_id[~is_comp] = np.concatenate(prompts) if prompts else []
    token_id[comp_at] = rows["completion_ids"][in_comp]
    act = rows["action"]
    action = spread(np.ones_like(in_comp) if act is None else act, False, bool)
    loss = spread(rows["loss_mask"], False, bool)
    tokens: dict[str, Any] = {
        "step": np.full(total, step, dtype=np.int64),
        "sample_id": ids[sample_of].astype(np.int64),
        "pos": pos.astype(np.int32),
        "token_id": token_id,
        "role": np.where(
            action, ROLE_ACTION, np.where(is_comp, ROLE_OBSERVATION, ROLE_PROMPT)
        ).astype(np.int8),
        "loss_mask": loss,
    }
    floats = {}
    adv = rows["advantage"]
    adv = np.broadcast_to(adv[:, None], in_comp.shape) if adv.ndim == 1 else adv
    for name, m in (
        ("rollout_logp", rows["rollout_logp"]), ("train_logp", rows["train_logp"]),
        ("old_logp", rows["old_logp"]), ("advantage", adv), ("entropy", rows["entropy"]),
        ("is_weight", rows["is_weight"]),
    ):  # fmt: skip
        if m is None:
            continue
        a = spread(np.asarray(m, dtype=np.float64), np.nan, np.float64)
        a[~np.isfinite(a)] = np.nan
        floats[name] = a
        tokens[name] = np.ma.masked_array(a.astype(np.float32), mask=~action | np.isnan(a))
    if "rollout_logp" in tokens:
        r, t = tokens["rollout_logp"], tokens["train_logp"]
        tokens["ratio"] = np.ma.exp(t.astype(np.float64) - r).astype(np.float32)
    keep = None
    if settings.is_correction or rows["keep"] is not None:
        keep = np.ones(total, dtype=bool)
        if settings.is_mask_mode and "is_weight" in floats:
            keep &= ~(floats["is_weight"] <= 0)  # NaN (not an action token) keeps
        if rows["keep"] is not None:
            keep &= spread(rows["keep"], True, bool)
        tokens["trust_mask"] = np.ma.masked_array(keep & action, mask=False)
    for name in ("clip_low", "clip_high"):
        if rows[name] is not None:
            tokens[name] = np.ma.masked_array(spread(rows[name], False, bool), mask=~action)

    rewards = rows["rewards"]
    scored = ~np.isnan(rewards)
    reward = np.where(scored, rewards * weights[None, :], 0.0).sum(axis=1)
    has_reward = scored.any(axis=1)
    last = rows["completion_ids"][np.arange(len(ids)), np.maximum(n - 1, 0)]
    pv = rows["pv"]
    group = ids // group_size
    samples = {
        "sample_id": ids.astype(np.int64),
        "step": np.full(len(ids), step, dtype=np.int64),
        "status": np.where(rows["loss_mask"].any(axis=1), "trained", "truncated").tolist(),
        "n_prompt_tokens": p,
        "n_response_tokens": n,
        "reward": np.ma.masked_array(reward, mask=~has_reward),
        "group_id": group.astype(np.int64),
        "advantage": None if rows["advantage"].ndim > 1 else rows["advantage"].astype(np.float64),
        "finish_reason": np.where((n > 0) & np.isin(last, eos_ids), "stop", "length").tolist(),
        "policy_version_rollout": pv.astype(np.int64),
        "policy_version_train": np.full(len(ids), step, dtype=np.int64),
        "staleness": (step - pv).astype(np.int64),
    }
    k = rewards.shape[1]
    nan = ~scored
    components = {
        "sample_id": np.repeat(ids.astype(np.int64), k),
        "component": None,  # set by the recorder (names)
        "value": np.ma.masked_array(rewards.ravel(), mask=nan.ravel()),
        "weight": np.tile(weights, len(ids)),
        "failure_reason": np.where(nan.ravel(), "reward function returned None", None).tolist(),
        "step": step,
    }

    # the steps rollups (observability.rollup.step_rollup over the same rows)
    steps: dict[str, Any] = {"n_tokens": total, "n_loss_tokens": int(loss.sum())}
    if "rollout_logp" in floats:
        d = np.abs(floats["train_logp"] - floats["rollout_logp"])[action]
        d = d[np.isfinite(d)]
        steps["mismatch_abs_mean"] = float(d.mean()) if len(d) else None
        steps["mismatch_abs_p99"] = _quantile99(d)
    if keep is not None:
        trusted = int((keep & loss & action).sum())
        steps["n_trusted_tokens"] = trusted
        steps["masked_fraction"] = 1.0 - trusted / max(int(action.sum()), 1)
    if "entropy" in floats:
        e = floats["entropy"][action]
        e = e[np.isfinite(e)]
        steps["entropy"] = float(e.mean()) if len(e) else None
    r = reward[has_reward]
    if len(r):
        steps["reward_mean"], steps["reward_std"] = float(r.mean()), float(r.std())
    if has_reward.all() and len(ids):
        order = np.argsort(group, kind="stable")
        g, rr = group[order], reward[order]
        cuts = np.flatnonzero(np.diff(g)) + 1
        same = [len(np.unique(x)) == 1 for x in np.split(rr, cuts)]
        steps["degenerate_group_fraction"] = float(np.mean(same))
    if "clip_low" in tokens:
        c = (tokens["clip_low"].filled(False) | tokens["clip_high"].filled(False))[loss]
        steps["clip_fraction"] = float(c.mean()) if len(c) else 0.0
    steps = {key: v for key, v in steps.items() if v is not None}
    return {"samples": samples, "tokens": tokens, "reward_components": components, "steps": steps}

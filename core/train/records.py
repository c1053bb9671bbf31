"""Telemetry records of one GRPO step, built columnar from the step's CPU tensors.

Per-token rows cover every real (non-padding) token of each trajectory: prompt tokens carry no
log-probs; action tokens carry rollout / train / old log-probs, the ratio exp(train − rollout),
the trust mask and its reason, the advantage, entropy, the prefix hash of the rollout's IDs and
the token the trainer actually used (``train_token_id``: differs only under a TITO violation).
No Python per-row loops: everything is flattened with boolean indexing.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import torch

from core.algorithms.trust import REASONS, STALE_CODE
from observability.enums import MASK_REASONS, ROLES

if REASONS != MASK_REASONS:  # mask_reason is emitted as codes into the schema's enum
    raise ImportError(f"trust REASONS {REASONS} differ from the schema's {MASK_REASONS}")
ROLE_PROMPT, ROLE_ACTION = ROLES.index("prompt"), ROLES.index("action")


def token_rows(
    *,
    step: int,
    sample_ids: torch.Tensor,
    input_ids: torch.Tensor,
    rollout_targets: torch.Tensor,
    valid_rollout: torch.Tensor,
    n_prompt: int,
    action_mask: torch.Tensor,
    rollout_logp: torch.Tensor,
    train_logp: torch.Tensor,
    reason: torch.Tensor,
    advantages: torch.Tensor,
    entropy: torch.Tensor,
    prefix_hash: torch.Tensor,
    version_rollout: int,
    keep: np.ndarray,
    old_logp: torch.Tensor | None = None,
) -> dict:
    """Columns of the ``tokens`` table.

    Args:
        sample_ids: [B]; input_ids: [B, T] trainer IDs; rollout_targets: [B, T-1] the rollout's
        IDs at slots 1..T-1; valid_rollout: [B, T] the rollout's real tokens; action_mask,
        rollout_logp, train_logp, reason, entropy: [B, T-1] aligned to slots 1..T-1; old_logp:
        [B, T-1] π_old of the ratio (None: the trainer's own log-probs, ``train_logp``);
        advantages: [B]; prefix_hash: [B, T] over the rollout IDs; keep: [B] bool (sampling).
    """
    b, t = input_ids.shape
    rollout_ids = torch.cat(
        [input_ids[:, :1], rollout_targets], dim=1
    )  # [B, T] (slot 0 is pad/bos)
    act = torch.cat([torch.zeros(b, 1, dtype=torch.bool), action_mask], dim=1)  # [B, T]

    def shift(x, fill):
        return torch.cat([torch.full((b, 1), fill, dtype=x.dtype), x], dim=1)

    sel = valid_rollout & torch.as_tensor(keep)[:, None]
    pos = (valid_rollout.long().cumsum(1) - 1)[sel]
    roles = np.where(act[sel].numpy(), ROLE_ACTION, ROLE_PROMPT).astype(np.int8)  # enum codes
    reason_full = shift(reason.to(torch.int64), 4)[sel].numpy()
    is_act = act[sel].numpy()
    r_lp = shift(rollout_logp, 0.0)[sel].numpy()
    t_lp = shift(train_logp, 0.0)[sel].numpy()
    o_lp = t_lp if old_logp is None else shift(old_logp, 0.0)[sel].numpy()
    ent = shift(entropy, 0.0)[sel].numpy()

    def on_actions(x: np.ndarray) -> pa.Array:  # null (not NaN) where the token is no action
        return pa.array(x, mask=~is_act)

    return {
        "step": np.full(len(pos), step, dtype=np.int64),
        "sample_id": sample_ids[:, None].expand(b, t)[sel].numpy(),
        "pos": pos.numpy().astype(np.int32),
        "token_id": rollout_ids[sel].numpy().astype(np.int32),
        "train_token_id": input_ids[sel].numpy().astype(np.int32),
        "role": roles,
        "loss_mask": is_act & (reason_full != STALE_CODE),
        "trust_mask": reason_full == 0,
        "mask_reason": reason_full.astype(np.int8),  # codes: core REASONS == schema enum order
        "rollout_logp": on_actions(r_lp),
        "train_logp": on_actions(t_lp),
        "old_logp": on_actions(o_lp),
        "ratio": on_actions(np.exp(t_lp - r_lp)),
        "advantage": on_actions(advantages[:, None].expand(b, t)[sel].numpy()),
        "entropy": on_actions(ent),
        "prefix_hash": prefix_hash[sel].numpy(),
        "policy_version_rollout": np.full(len(pos), version_rollout, dtype=np.int64),
    }


def sample_rows(
    *,
    step,
    sample_ids,
    problems,
    group_ids,
    rewards,
    advantages,
    reasons,
    texts,
    finished,
    n_prompt,
    n_response,
    status,
    version_rollout,
    version_train,
    tokenizer_rev,
    chat_template_rev,
    sampling: dict,
    keep,
) -> dict:
    n = len(sample_ids)
    return {
        "sample_id": np.asarray(sample_ids, dtype=np.int64),
        "step": np.full(n, step, dtype=np.int64),
        "prompt_id": [p.prompt_id for p in problems],
        "group_id": np.asarray(group_ids, dtype=np.int64),
        "domain": "arithmetic",  # run constants as scalars: the sink broadcasts them once
        "engine": "rollout",
        "policy_version_rollout": np.full(n, version_rollout, dtype=np.int64),
        "policy_version_train": np.full(n, version_train, dtype=np.int64),
        "staleness": np.full(n, version_train - version_rollout, dtype=np.int64),
        "reward": np.asarray(rewards, dtype=np.float64),
        "advantage": np.asarray(advantages, dtype=np.float64),
        "n_prompt_tokens": np.asarray(n_prompt, dtype=np.int64),
        "n_response_tokens": np.asarray(n_response, dtype=np.int64),
        "status": status,
        "failure_reason": reasons,
        "tokenizer_rev": tokenizer_rev,
        "chat_template_rev": chat_template_rev,
        "sampling": json.dumps(sampling, sort_keys=True),
        "teacher_id": None,
        "response_text": texts,
        "finish_reason": ["stop" if f else "length" for f in finished],
        "tokens_sampled": np.asarray(keep, dtype=bool),
    }


def reward_component_rows(*, step, sample_ids, rewards, reasons) -> dict:
    n = len(sample_ids)
    return {
        "sample_id": np.asarray(sample_ids, dtype=np.int64),
        "step": np.full(n, step, dtype=np.int64),
        "component": "verifier",
        "value": np.asarray(rewards, dtype=np.float64),
        "weight": np.ones(n),
        "failure_reason": reasons,
    }

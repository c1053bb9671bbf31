"""``Trajectories``: the one batch type, created by the rollout and carried to the telemetry.

Layout. Every row is one sample (a trajectory, or one segment of a compacted trajectory) laid out
as ``[left pad | first prompt | turn tokens ... | right pad]`` over ``T`` slots: the first prompt is
left-padded to the batch's widest (``n_prompt`` slots, as the engine prefills it); every token
after it (actions, observations, summaries, copied tails) follows contiguously. Per-token tensors
are *token-aligned* ``[B, T]``: slot ``t`` describes token ``ids[:, t]``; the trainer's prediction
space is ``[:, 1:]`` (slot ``t`` of the logits predicts token ``t + 1``), see :meth:`targets`.

What the rollout fills: ids, roles (codes into ``ROLES``), the loss mask (trainable tokens:
actions and summaries), behaviour (rollout) log-probs and the policy version that produced each
generated token; per sample its ids, prompt, group, domain, environment, rewards and status
(the reward mixer adds scored components, their weights and failure reasons).
What scorers fill (optional, ``None`` until then): train / old / teacher log-probs, entropy,
values, returns, per-token advantages. Tokens the policy did not generate hold 0 in the float
slots and -1 in ``version``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from observability.enums import ROLES, SAMPLE_STATUSES

ROLE = {name: code for code, name in enumerate(ROLES)}
"""Role name -> its code (the telemetry enum's index)."""
TRAINABLE_ROLES = ("action", "summary")
"""Roles the policy generated: the only ones that may carry loss."""


@dataclass
class Trajectories:
    """A batch of B samples over T token slots (tensors on the CPU)."""

    # ---- per token [B, T] -------------------------------------------------------------------
    ids: torch.Tensor
    """[B, T] int64: the exact token ids (rollout's; never re-tokenized)."""
    valid: torch.Tensor
    """[B, T] bool: real tokens (False on padding)."""
    role: torch.Tensor
    """[B, T] int8: role codes (``ROLE``); padding slots hold ``ROLE["padding"]``."""
    loss_mask: torch.Tensor
    """[B, T] bool: tokens in the loss (trainable roles of samples not dropped)."""
    rollout_logp: torch.Tensor
    """[B, T] fp32: behaviour log-prob of each generated token (0 elsewhere)."""
    version: torch.Tensor
    """[B, T] int64: policy version of the weights that generated the token (-1 elsewhere)."""
    # ---- per sample [B] ---------------------------------------------------------------------
    sample_id: torch.Tensor
    """[B] int64: unique in the run, assigned at rollout."""
    group_id: torch.Tensor
    """[B] int64: GRPO group (samples of one prompt drawn together)."""
    prompt_id: list[str]
    domain: list[str]
    env_name: list[str]
    status: list[str]
    """``SAMPLE_STATUSES``: ``trained`` until something drops the sample."""
    failure_reason: list[str | None]
    finished: torch.Tensor
    """[B] bool: the last turn ended on EOS."""
    n_turns: torch.Tensor
    """[B] int64: policy turns."""
    reward_components: dict[str, torch.Tensor]
    """name -> [B] fp32 component value (NaN where the component did not score the sample)."""
    reward: torch.Tensor
    """[B] fp32: the total reward the advantages use."""
    response_text: list[str]
    n_prompt: int
    """Slots of the left-padded first prompt."""
    segment: torch.Tensor | None = None
    """[B] int64: segment index within its trajectory (0 unless compacted)."""
    parent_id: torch.Tensor | None = None
    """[B] int64: sample id of the trajectory's first segment (-1: none)."""
    turn: torch.Tensor | None = None
    """[B, T] int64: the policy turn of each post-prompt token (observations: the turn they
    answer); -1 on prompt and padding. None when the rollout does not record turns."""
    kv_version: torch.Tensor | None = None
    """[B, T] int64: oldest policy version among the keys/values each generated token was decoded
    against (equals ``version`` unless KV of another version was reused); -1 elsewhere."""
    worker: torch.Tensor | None = None
    """[B] int64: rollout worker (DP rank) that generated the sample."""
    env_latency_s: torch.Tensor | None = None
    """[B] fp32: environment time summed over the sample's turns."""
    refill: torch.Tensor | None = None
    """[B] bool: the sample refilled its group after an environment failure."""
    engine_records: dict = field(default_factory=dict)
    """Rollout-side sparse records for the train/rollout comparison: ``routes`` {layer: [B, W,
    k]}, ``topk`` {layer: [chunks]} (single-turn rollouts only)."""
    reward_weights: dict[str, float] = field(default_factory=dict)
    """name -> signed weight of the component in ``reward`` (penalties negative); a component
    not listed has weight 1 (``core.rewards.mix``)."""
    reward_failures: dict[str, list[str | None]] = field(default_factory=dict)
    """name -> per-sample reason the component could not score (e.g. ``judge_unparseable``); a
    component not listed carries the sample's ``failure_reason``."""
    # ---- scorer slots (token-aligned [B, T], None until filled) ------------------------------
    train_ids: torch.Tensor | None = None
    """[B, T] int64: ids the trainer fed the actor (differ from ``ids`` only under the
    ``train.retokenize`` fault)."""
    train_valid: torch.Tensor | None = None
    """[B, T] bool: the slots the trainer fed (shorter than ``valid`` only under retokenize)."""
    train_logp: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    teacher_logp: torch.Tensor | None = None
    teacher_id: list[str | None] | None = None
    values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    """[B, T] fp32: per-token advantages (GRPO broadcasts its per-sequence value)."""

    def __post_init__(self) -> None:
        b, t = self.ids.shape
        for name in ("valid", "role", "loss_mask", "rollout_logp", "version"):
            shape = tuple(getattr(self, name).shape)
            if shape != (b, t):
                raise ValueError(f"Trajectories.{name} has shape {shape}, expected {(b, t)}")
        if self.loss_mask.dtype != torch.bool or self.valid.dtype != torch.bool:
            raise ValueError("Trajectories.loss_mask and .valid must be bool")
        bad = [s for s in self.status if s not in SAMPLE_STATUSES]
        if bad:
            raise ValueError(f"Trajectories.status {bad[0]!r} not in {list(SAMPLE_STATUSES)}")
        if self.segment is None:
            self.segment = torch.zeros(b, dtype=torch.int64)
        if self.parent_id is None:
            self.parent_id = torch.full((b,), -1, dtype=torch.int64)

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    def is_role(self, *names: str) -> torch.Tensor:
        """[B, T] bool: tokens whose role is one of ``names``."""
        out = torch.zeros_like(self.valid)
        for name in names:
            out |= self.role == ROLE[name]
        return out

    @property
    def generated(self) -> torch.Tensor:
        """[B, T] bool: tokens the policy generated (trainable roles), dropped samples included."""
        return self.is_role(*TRAINABLE_ROLES)

    def staleness(self, v_train: int) -> torch.Tensor:
        """[B] int64: ``v_train − min(version of the sample's generated tokens)`` (0 if none)."""
        big = torch.iinfo(torch.int64).max
        v = torch.where(self.generated, self.version, torch.full_like(self.version, big))
        oldest = v.min(dim=1).values  # [B]
        return torch.where(oldest == big, torch.zeros_like(oldest), v_train - oldest)

    def drop(self, which: torch.Tensor, status: str) -> None:
        """Take the samples ``which`` ([B] bool) out of the loss with ``status`` (kept in the
        batch and in telemetry, so every drop is recorded with its reason)."""
        if status not in SAMPLE_STATUSES:
            raise ValueError(f"status {status!r} not in {list(SAMPLE_STATUSES)}")
        self.loss_mask &= ~which[:, None]
        for i in torch.nonzero(which).flatten().tolist():
            self.status[i] = status

    def targets(self, x: torch.Tensor) -> torch.Tensor:
        """The prediction-space view ``x[:, 1:]`` of a token-aligned ``[B, T, ...]`` tensor."""
        return x[:, 1:]

    def token_aligned(self, pred: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Prediction-space ``[B, T-1]`` -> token-aligned ``[B, T]`` (slot 0 holds ``fill``)."""
        col = torch.full((pred.shape[0], 1), fill, dtype=pred.dtype, device=pred.device)
        return torch.cat([col, pred], dim=1)

    @property
    def positions(self) -> torch.Tensor:
        """[B, T] int64: index of each real token in its sample's sequence (-1 on padding)."""
        pos = self.valid.long().cumsum(1) - 1
        return torch.where(self.valid, pos, torch.full_like(pos, -1))

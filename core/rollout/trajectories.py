"""The one batch type of the rollout, and the synchronous collection that fills it.

``Trajectories``: the one batch type, created by the rollout and carried to the telemetry.

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

Collect: run a batch of environment episodes through a rollout engine into ``Trajectories``.

Turn loop: every live episode's context (its exact ids so far) is generated from in one batched
``engine.generate`` call; each episode's environment consumes the turn's ids and either ends the
episode or appends observation ids, which become part of the next turn's context. The history is
never re-tokenized (TITO across turns): turn n+1's context is turn n's context + its action ids +
the observation ids. Each generated token records the engine's policy version at the time it was
sampled, so a weight switch between turns (``between_turns``) shows in the per-token versions.
Simplifications: each turn re-prefills its whole context (no KV reuse across turns); an episode
whose next turn would not fit ``max_seq_len`` ends with failure ``context_exhausted``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field

import torch

from core.envs.protocol import Environment
from core.rollout.episode import ROLE, TRAINABLE_ROLES, EpisodeRecord
from core.rollout.sampling import SamplingParams
from core.tokenizer.tokenizer import Tokenizer
from observability.enums import SAMPLE_STATUSES


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


def collect(
    engine,
    envs: Sequence[Environment],
    params: SamplingParams,
    *,
    tok: Tokenizer,
    sample_ids: torch.Tensor,
    group_ids: torch.Tensor,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    max_turns: int = 1,
    max_seq_len: int | None = None,
    between_turns: Callable[[int], None] | None = None,
    env_pool: Executor | None = None,
) -> Trajectories:
    """Run ``envs`` to completion (at most ``max_turns`` policy turns each).

    Args:
        sample_ids, group_ids: [B] int64, one per environment (assigned by the caller).
        between_turns: called with the turn index after each turn but the last (e.g. a weight
            switch landing between two turns of the same trajectories).
        env_pool: steps the turn's environments concurrently (their latencies overlap: the turn
            waits for the slowest); None steps them one after another.
    """
    episodes = [EpisodeRecord(env, list(env.reset())) for env in envs]
    limit = max_seq_len if max_seq_len is not None else engine.cfg.max_seq_len
    first_width, records = 0, {}
    for turn in range(max_turns):
        live = [e for e in episodes if not e.done]
        for e in live:
            if len(e.context) + params.max_new_tokens > limit:
                e.finish(failure_reason="context_exhausted")
        live = [e for e in live if not e.done]
        if not live:
            break
        rb = engine.generate(
            [e.context for e in live],
            params,
            eos_id=tok.eos_id,
            pad_id=tok.pad_id,
            generator=generator,
            greedy=greedy,
        )
        if turn == 0:
            first_width = rb.response_ids.shape[1]
            records = {"routes": rb.routes, "topk": rb.topk}
        actions = []
        for j, e in enumerate(live):
            m = rb.response_mask[j]
            actions.append(rb.response_ids[j][m].tolist())
            e.add(actions[-1], "action", rb.logprobs[j][m].tolist(), rb.policy_version)
            e.turns += 1
            e.finished = bool(rb.finished[j])
        steps = [(e.env.step, a, e.finished) for e, a in zip(live, actions, strict=True)]
        run = map if env_pool is None else env_pool.map
        results = list(run(lambda x: x[0](x[1], finished=x[2]), steps))
        for e, res in zip(live, results, strict=True):
            if res.done:
                e.finish(
                    rewards=res.rewards,
                    failure_reason=res.failure_reason,
                    env_failure=res.env_failure,
                )
            else:
                e.add(list(res.observation), "observation")
        if all(e.done for e in episodes):
            break
        if between_turns is not None:
            between_turns(turn)
    for e in episodes:
        if not e.done:  # ran out of turns
            e.finish(failure_reason="max_turns")
    if any(e.turns > 1 for e in episodes):
        records = {}  # per-chunk engine records align with single-turn batches only
    return assemble(
        episodes,
        tok=tok,
        sample_ids=sample_ids,
        group_ids=group_ids,
        min_tail=first_width,
        engine_records=records,
    )


def assemble(
    episodes: Sequence[EpisodeRecord],
    *,
    tok: Tokenizer,
    sample_ids: torch.Tensor,
    group_ids: torch.Tensor,
    min_tail: int = 0,
    engine_records: dict | None = None,
) -> Trajectories:
    """Lay episodes out as ``[left pad | prompt | post-prompt tokens | right pad]``."""
    b = len(episodes)
    tp = max(len(e.prompt) for e in episodes)
    tail = max(min_tail, max(len(e.ids) for e in episodes))
    t = tp + tail
    ids = torch.full((b, t), tok.pad_id, dtype=torch.int64)
    role = torch.full((b, t), ROLE["padding"], dtype=torch.int8)
    logp = torch.zeros((b, t), dtype=torch.float32)
    version = torch.full((b, t), -1, dtype=torch.int64)
    for i, e in enumerate(episodes):
        p, n = len(e.prompt), len(e.ids)
        ids[i, tp - p : tp] = torch.tensor(e.prompt, dtype=torch.int64)
        role[i, tp - p : tp] = ROLE["prompt"]
        if n:
            ids[i, tp : tp + n] = torch.tensor(e.ids, dtype=torch.int64)
            role[i, tp : tp + n] = torch.tensor(e.roles, dtype=torch.int8)
            logp[i, tp : tp + n] = torch.tensor(e.logp, dtype=torch.float32)
            version[i, tp : tp + n] = torch.tensor(e.versions, dtype=torch.int64)
    valid = role != ROLE["padding"]
    names = sorted({k for e in episodes for k in e.rewards})
    components = {
        k: torch.tensor([e.rewards.get(k, float("nan")) for e in episodes], dtype=torch.float32)
        for k in names
    }
    total = torch.tensor([sum(e.rewards.values()) for e in episodes], dtype=torch.float32)
    traj = Trajectories(
        ids=ids,
        valid=valid,
        role=role,
        loss_mask=(role == ROLE["action"]) | (role == ROLE["summary"]),
        rollout_logp=logp,
        version=version,
        sample_id=sample_ids.to(torch.int64),
        group_id=group_ids.to(torch.int64),
        prompt_id=[e.env.prompt_id for e in episodes],
        domain=[e.env.domain for e in episodes],
        env_name=[type(e.env).__name__ for e in episodes],
        status=["trained" if e.finished else "truncated" for e in episodes],
        failure_reason=[e.failure_reason for e in episodes],
        finished=torch.tensor([e.finished for e in episodes], dtype=torch.bool),
        n_turns=torch.tensor([e.turns for e in episodes], dtype=torch.int64),
        reward_components=components,
        reward=total,
        response_text=[e.env.render(e.ids) for e in episodes],
        n_prompt=tp,
        engine_records=engine_records or {},
    )
    failed = torch.tensor([e.env_failure for e in episodes], dtype=torch.bool)
    if failed.any():
        traj.drop(failed, "env_failure")
    return traj

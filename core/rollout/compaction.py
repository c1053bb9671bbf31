"""CompactionRL's rollout: when the context runs low the same policy summarises, and the context is
rebuilt from the summary and the last k action–observation pairs.

Before each policy turn of a trajectory with history ``h_t``: if ``C − |h_t| < T_comp`` the policy
generates a summary ``S_t ~ π(· | h_t ⊕ q_sum)`` (``q_sum`` is inserted text, role
``observation``; the summary's tokens are role ``summary``: trained); the segment ends there and
the next one starts from ``(s) ⊕ u_resume(S_t) ⊕ (z_{t−k+1} … z_t)``: system + resume is
``<bos><user>`` + the summary's exact ids + ``<assistant>`` (role ``prompt``), each ``z`` an atomic
(action, observation) pair copied with its exact ids (role ``tail``; neither is trained). Ids are
never re-tokenized (TITO holds within every segment). Each segment is one row of the returned
``Trajectories`` (its own sample id; ``segment`` index; ``parent_id`` = the first segment's sample
id); every segment carries the trajectory's final reward and verdict. One compaction event per
summary records context lengths before/after, summary length and tail pairs kept.
With ``enabled = False`` a trajectory runs until the engine's ``max_seq_len`` (then
``context_exhausted``). Simplifications: actions and summaries are generated in separate batched
calls per round; a segment that needs compaction before any new action fails with
``context_exhausted`` (the rebuilt context alone is over budget).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from core.envs.protocol import Environment
from core.rollout.episode import EpisodeRecord
from core.rollout.sampling import SamplingParams
from core.rollout.trajectories import Trajectories, assemble
from core.tokenizer.tokenizer import Tokenizer


@dataclass(frozen=True)
class CompactionConfig:
    """Context compaction and the CompactionRL loss (the ``[compaction]`` config section)."""

    enabled: bool = True
    """Compact training rollouts (False: no compaction, the trajectory runs to max_seq_len;
    held-out evaluation always compacts)."""
    context_budget: int = 64
    """C: the context budget in tokens (<= model.max_seq_len)."""
    threshold: int = 24
    """T_comp: compact when C − |h_t| < T_comp (> summary_max_tokens)."""
    keep_pairs: int = 1
    """k: atomic action–observation pairs copied after the resumed summary (>= 0)."""
    summary_max_tokens: int = 12
    """Summary length limit (>= 1)."""
    summary_prompt: str = "#"
    """q_sum: the text appended to the context to ask for a summary."""
    cross_segment_discount: bool = True
    """Scale segment s's advantages by (γλ)^{N_{>s}} (False: local advantages, the ablation)."""
    train_summaries: bool = True
    """Summary tokens are trained actions (False: they stay out of the policy and value losses and
    only the actions train, the baseline whose summaries are not learned)."""

    def __post_init__(self) -> None:
        if self.context_budget < 8:
            raise ValueError(f"compaction.context_budget={self.context_budget} must be >= 8")
        if not self.summary_max_tokens < self.threshold < self.context_budget:
            raise ValueError(
                f"compaction.threshold={self.threshold} must be in (summary_max_tokens="
                f"{self.summary_max_tokens}, context_budget={self.context_budget})"
            )
        if self.keep_pairs < 0:
            raise ValueError(f"compaction.keep_pairs={self.keep_pairs} must be >= 0")
        if self.summary_max_tokens < 1:
            raise ValueError(
                f"compaction.summary_max_tokens={self.summary_max_tokens} must be >= 1"
            )
        if not self.summary_prompt:
            raise ValueError("compaction.summary_prompt must not be empty")


@dataclass(frozen=True)
class CompactionEvent:
    """One summary and context rebuild."""

    sample_id: int
    """The segment whose last tokens are the summary."""
    parent_id: int
    """The trajectory's first segment."""
    segment: int
    context_before: int
    """|h_t|: context tokens when compaction triggered (q_sum not counted)."""
    context_after: int
    """Tokens of the rebuilt context (system + resume + tail)."""
    summary_len: int
    """Generated summary tokens (EOS included)."""
    tail_pairs: int
    """Action–observation pairs copied after the summary."""
    finished: bool
    """The summary ended on EOS."""


@dataclass
class CompactedRollout:
    traj: Trajectories
    events: list[CompactionEvent]


@dataclass
class _Trajectory:
    env: Environment
    group_id: int
    segments: list[EpisodeRecord]
    seg_ids: list[int]
    pairs: list[list[int]] = field(default_factory=list)
    """Exact ids of each finished (action, observation) pair, in order."""
    fresh: int = 0
    """Policy actions in the current segment (a rebuilt segment must act before compacting)."""
    actions: int = 0
    """Policy actions so far (summaries not counted)."""
    done: bool = False

    @property
    def current(self) -> EpisodeRecord:
        return self.segments[-1]


def collect_compacted(
    engine,
    envs: Sequence[Environment],
    params: SamplingParams,
    *,
    tok: Tokenizer,
    cfg: CompactionConfig,
    new_ids: Callable[[int], torch.Tensor],
    group_ids: torch.Tensor,
    generator: torch.Generator | None = None,
    greedy: bool = False,
    max_turns: int = 32,
    enabled: bool | None = None,
) -> CompactedRollout:
    """Run ``envs`` to completion with compaction; one row per segment.

    Args:
        new_ids: ``n -> [n] int64`` fresh sample ids (segments get theirs when they start).
        group_ids: [len(envs)] int64, one per trajectory (its segments share it).
        max_turns: policy actions per trajectory (summaries not counted).
        enabled: override ``cfg.enabled`` (evaluation always compacts).
    """
    on = cfg.enabled if enabled is None else enabled
    limit = engine.cfg.max_seq_len
    q_sum = tok.encode(cfg.summary_prompt)
    sum_params = dataclasses.replace(params, max_new_tokens=cfg.summary_max_tokens)
    trajs = []
    for env, gid in zip(envs, group_ids.tolist(), strict=True):
        prompt = list(env.reset())
        trajs.append(_Trajectory(env, gid, [EpisodeRecord(env, prompt)], [int(new_ids(1)[0])]))
    events: list[CompactionEvent] = []
    while True:
        live = [t for t in trajs if not t.done]
        if not live:
            break
        acting, summarising = [], []
        for t in live:
            ctx = len(t.current.context)
            if on and cfg.context_budget - ctx < cfg.threshold:
                fits = ctx + len(q_sum) + cfg.summary_max_tokens <= limit
                if t.fresh == 0 or not fits:
                    _finish(t, "context_exhausted")
                else:
                    summarising.append(t)
            elif ctx + params.max_new_tokens > (cfg.context_budget if on else limit):
                _finish(t, "context_exhausted")
            elif t.actions >= max_turns:
                _finish(t, "max_turns")
            else:
                acting.append(t)
        if acting:
            _act(engine, acting, params, tok=tok, generator=generator, greedy=greedy)
        if summarising:
            events += _summarise(
                engine,
                summarising,
                sum_params,
                tok=tok,
                q_sum=q_sum,
                cfg=cfg,
                new_ids=new_ids,
                generator=generator,
                greedy=greedy,
            )
    for t in trajs:
        if not t.done:
            _finish(t, "max_turns")
    return CompactedRollout(_rows(trajs, tok=tok), events)


def _act(engine, trajs: list[_Trajectory], params, *, tok, generator, greedy) -> None:
    rb = engine.generate(
        [t.current.context for t in trajs],
        params,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        generator=generator,
        greedy=greedy,
    )
    for j, t in enumerate(trajs):
        m = rb.response_mask[j]
        action = rb.response_ids[j][m].tolist()
        seg = t.current
        seg.add(action, "action", rb.logprobs[j][m].tolist(), rb.policy_version)
        seg.turns += 1
        seg.finished = bool(rb.finished[j])
        t.fresh += 1
        t.actions += 1
        res = t.env.step(action, finished=seg.finished)
        if res.done:
            t.done = True
            for s in t.segments:
                s.rewards = dict(res.rewards)
                s.failure_reason, s.env_failure = res.failure_reason, res.env_failure
        else:
            obs = list(res.observation)
            seg.add(obs, "observation")
            t.pairs.append(action + obs)


def _summarise(engine, trajs, params, *, tok, q_sum, cfg, new_ids, generator, greedy):
    rb = engine.generate(
        [t.current.context + q_sum for t in trajs],
        params,
        eos_id=tok.eos_id,
        pad_id=tok.pad_id,
        generator=generator,
        greedy=greedy,
    )
    events = []
    for j, t in enumerate(trajs):
        m = rb.response_mask[j]
        summary = rb.response_ids[j][m].tolist()
        seg = t.current
        before = len(seg.context)
        seg.add(q_sum, "observation")
        seg.add(summary, "summary", rb.logprobs[j][m].tolist(), rb.policy_version)
        seg.turns += 1
        seg.finished = bool(rb.finished[j])
        body = summary[:-1] if seg.finished else summary  # the resume carries no EOS
        resume = [tok.bos_id, tok.user_id, *body, tok.assistant_id]
        tail = t.pairs[-cfg.keep_pairs :] if cfg.keep_pairs else []
        nxt = EpisodeRecord(t.env, resume)
        for pair in tail:
            nxt.add(pair, "tail")
        events.append(
            CompactionEvent(
                sample_id=t.seg_ids[-1],
                parent_id=t.seg_ids[0],
                segment=len(t.segments) - 1,
                context_before=before,
                context_after=len(nxt.context),
                summary_len=len(summary),
                tail_pairs=len(tail),
                finished=seg.finished,
            )
        )
        t.segments.append(nxt)
        t.seg_ids.append(int(new_ids(1)[0]))
        t.fresh = 0
    return events


def _finish(t: _Trajectory, reason: str) -> None:
    t.done = True
    for s in t.segments:
        s.rewards, s.failure_reason = {}, reason


def _rows(trajs: list[_Trajectory], *, tok: Tokenizer) -> Trajectories:
    """One row per segment, trajectory-major; segments share reward, verdict and group."""
    segs = [s for t in trajs for s in t.segments]
    ids = torch.tensor([i for t in trajs for i in t.seg_ids], dtype=torch.int64)
    groups = torch.tensor([t.group_id for t in trajs for _ in t.segments], dtype=torch.int64)
    traj = assemble(segs, tok=tok, sample_ids=ids, group_ids=groups)
    traj.segment = torch.tensor([k for t in trajs for k in range(len(t.segments))])
    traj.parent_id = torch.tensor([t.seg_ids[0] for t in trajs for _ in t.segments])
    return traj


def counter_ids(start: int = 0) -> Callable[[int], torch.Tensor]:
    """A local sample-id source (evaluation, demonstrations): ``n -> [n]`` consecutive ids."""
    it = itertools.count(start)
    return lambda n: torch.tensor([next(it) for _ in range(n)], dtype=torch.int64)

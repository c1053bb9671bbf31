"""Teachers by route: which teacher each sample goes to, and a step scored by its routed teachers.

Hard routing: each sample goes to the one teacher of its domain (``teachers.routes``).

A domain without a route (and no ``"*"`` route) is scored by no teacher: its samples carry a null
teacher id and no teacher log-probs, and receive no OPD advantage.

Score a step's trajectories with their routed teachers: ``Trajectories.teacher_logp/teacher_id``.

Every sample is routed by its domain (``route``, above); each teacher prefills its
samples' exact ids (``traj.ids`` as the rollout produced them — the trainer's ids differ only
under the re-tokenization fault, which the same-ids contract then catches) and returns its
payload for their generated tokens. The payloads are laid back into the batch's slots: the
token-aligned ``teacher_logp`` (0 where unscored) and, in prediction space, the Top-k / full
log-probs the Top-k loss reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.rollout.trajectories import Trajectories
from core.teachers.config import WILDCARD


def route(domains: Sequence[str], routes: Mapping[str, str]) -> list[str | None]:
    """Per sample, the teacher id its domain routes to (``routes``: domain -> teacher id)."""
    default = routes.get(WILDCARD)
    return [routes.get(d, default) for d in domains]


def load_teachers(cfg, *, repo_root: Path, **student) -> tuple[dict[str, str], dict[str, object]]:
    """The ``[teachers]`` section's routes and engines: (domain -> teacher id, teacher id ->
    ``TeacherEngine``); a checkpoint routed from several domains is loaded once.

    ``student``: the student's ``tokenizer_rev``, ``vocab_hash``, ``chat_template_rev`` and
    ``vocab_size`` for the compatibility check (``TeacherIncompatible``).
    """
    from core.teachers.engine import TeacherEngine

    routes: dict[str, str] = {}
    by_path: dict[Path, TeacherEngine] = {}
    for domain, raw in cfg.routes.items():
        path = Path(raw) if Path(raw).is_absolute() else repo_root / raw
        if path not in by_path:
            if not (path / "config.json").is_file():
                raise FileNotFoundError(
                    f"teachers.routes[{domain!r}]: no checkpoint at {path}; train the teacher "
                    "first (docs/teachers.md: the expert commands)"
                )
            by_path[path] = TeacherEngine.from_checkpoint(
                path, precision=cfg.precision, engine=cfg.engine, **student
            )
        routes[domain] = by_path[path].teacher_id
    return routes, {t.teacher_id: t for t in by_path.values()}


@dataclass
class TeacherBatch:
    """The step's teacher payloads aligned with its trajectories (prediction space [B, T-1])."""

    mode: str
    scored: torch.Tensor
    """[B, T-1] bool: positions a teacher scored (generated tokens of routed samples)."""
    topk_ids: torch.Tensor | None = None
    """[B, T-1, K] int64 (``topk``; ``full``: the whole vocabulary) or None (``sampled``)."""
    topk_logp: torch.Tensor | None = None
    """[B, T-1, K] fp32, the teacher's log-probs of ``topk_ids``, or None."""
    prefix_hash: torch.Tensor | None = None
    """[B, T] int64: the teacher's prefix hash of each slot it received (0 elsewhere)."""
    bytes_by_teacher: dict[str, int] = field(default_factory=dict)
    """teacher id -> payload bytes it sent this step."""
    provenance: dict[str, dict] = field(default_factory=dict)
    """Routed domain (or ``"*"``) -> its ``teacher_routes`` provenance columns
    (``core.teachers.provenance.route_provenance``)."""

    @property
    def nbytes(self) -> int:
        return sum(self.bytes_by_teacher.values())


def score_with_teachers(
    traj: Trajectories,
    teachers: Mapping[str, object],
    routes: Mapping[str, str],
    *,
    mode: str,
    k: int,
    temperature: float,
    memory=None,
) -> TeacherBatch:
    """Route, prefill-score and align; fills ``traj.teacher_logp`` ([B, T]) and ``traj.teacher_id``.

    Args:
        teachers: teacher id -> ``TeacherEngine``.
        routes: domain (or ``"*"``) -> teacher id.
        memory: the session's ``TrainingMemory`` (or None): each payload becomes live IO.
    """
    b, t = traj.ids.shape
    ids = route(traj.domain, routes)
    traj.teacher_id = ids
    gen = traj.targets(traj.generated & traj.valid)  # [B, T-1]
    logp = torch.zeros((b, t - 1), dtype=torch.float32)
    scored = torch.zeros((b, t - 1), dtype=torch.bool)
    prefix = torch.zeros((b, t), dtype=torch.int64)
    topk_ids = topk_logp = None
    out = TeacherBatch(mode=mode, scored=scored, prefix_hash=prefix)
    for tid, teacher in teachers.items():
        rows = torch.tensor([i for i, x in enumerate(ids) if x == tid], dtype=torch.int64)
        if rows.numel() == 0:
            continue
        s = teacher.prefill_and_score(
            traj.ids[rows],
            traj.valid[rows],
            gen[rows],
            mode=mode,
            k=k,
            temperature=temperature,
        )
        if memory is not None:
            memory.teacher_payload(tid, s)
        logp[rows], scored[rows], prefix[rows] = s.logp, s.scored, s.prefix_hash
        part_ids, part_logp = _loss_payload(s)
        if part_ids is not None:
            if topk_ids is None:
                width = part_ids.shape[-1]
                topk_ids = torch.zeros((b, t - 1, width), dtype=torch.int64)
                topk_logp = torch.zeros((b, t - 1, width), dtype=torch.float32)
            topk_ids[rows], topk_logp[rows] = part_ids, part_logp
        out.bytes_by_teacher[tid] = out.bytes_by_teacher.get(tid, 0) + s.nbytes
    traj.teacher_logp = traj.token_aligned(logp)
    out.topk_ids, out.topk_logp = topk_ids, topk_logp
    return out


def _loss_payload(s) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(ids, log-probs) [N, T-1, K] the Top-k loss reads: Top-k as sent, or the full vocabulary."""
    if s.topk_ids is not None:
        return s.topk_ids, s.topk_logp
    if s.full_logp is not None:
        n, t, v = s.full_logp.shape
        return torch.arange(v).expand(n, t, v).contiguous(), s.full_logp
    return None, None

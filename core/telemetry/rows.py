"""The telemetry rows of one step, built in one place: samples, tokens, rewards, steps, teachers.

Telemetry rows of one step, built in one place from (trajectories, scores, metrics).

Columnar numpy from the step's CPU tensors, no per-row Python: ``samples`` and
``reward_components`` per sample, ``tokens`` per real token of the samples kept by the token
sampling policy (decided once here, by sample id), the sparse tables (``topk``, ``moe_routes``)
and the ``steps`` row. Slots that do not apply are null, never a fake value: log-probs, ratio,
advantage and entropy exist only on generated tokens (a ``numpy.ma`` mask marks the rest).

Teacher telemetry of one step: per-token teacher columns and the ``teacher_routes`` rows.

``teacher_routes``: one row per (domain, teacher) the step routed — samples, scored tokens,
payload bytes, the sampled reverse-KL estimate mean(log π_θ − log π_T), the OPD advantage's mean
and spread (w · the log-ratio, the part that enters Â or would), and the Top-k reverse KL when
that term trained, and the route's provenance (``core.teachers.provenance``: the teacher's trained
domains, source and config hashes, the student's source, the declared source). Token columns: ``teacher_id`` and the teacher's own prefix hash of every
token it received (the same-ids contract compares it with the rollout's ``prefix_hash``).
Unrouted samples (no teacher for their domain) get no route row and null teacher columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import torch

from core.algorithms.policy import REASON
from core.rollout.trajectories import Trajectories
from core.teachers.config import WILDCARD
from core.teachers.engine import payload_bytes_per_position
from core.telemetry.sparse import sparse_rows
from core.tokenizer.tito import unpadded_prefix_hashes
from observability.sampling import keep_tokens_for


@dataclass(frozen=True)
class RunConstants:
    """Per-run values repeated on every sample row."""

    tokenizer_rev: str
    chat_template_rev: str
    sampling: dict
    token_sample_rate: float = 1.0


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


def _masked(values: torch.Tensor, present: np.ndarray) -> np.ma.MaskedArray:
    """Values with null where ``present`` is False."""
    return np.ma.masked_array(_np(values), mask=~present)


def step_records(
    traj: Trajectories,
    *,
    step: int,
    reason: torch.Tensor,
    v_train: int,
    metrics: dict,
    const: RunConstants,
    sparse=None,
    teacher=None,
    opd=None,
    opd_weight: float = 1.0,
    distill=None,
) -> dict[str, dict]:
    """Every table's columns for ``step``: ``{table: {column: values}}`` (tables with rows).

    Args:
        traj: the step's trajectories, scored (``train_logp``, ``entropy``, ``advantages``).
        reason: [B, T] int8 mask-reason codes, token-aligned.
        v_train: the policy version the step trained (staleness is measured against it).
        metrics: the step's scalar metrics (the ``steps`` row).
        teacher: the step's ``TeacherBatch`` (None without teachers), with ``opd`` (the OPD
            log-ratio and its metrics), ``opd_weight`` and ``distill`` (the Top-k term or None).
    """
    keep = keep_tokens_for(_np(traj.sample_id), const.token_sample_rate)
    out = {
        "samples": sample_rows(traj, step=step, v_train=v_train, const=const, keep=keep),
        "reward_components": reward_component_rows(traj, step=step),
    }
    if keep.any():
        out["tokens"] = token_rows(traj, step=step, reason=reason, keep=keep, teacher=teacher)
    if teacher is not None and any(x is not None for x in traj.teacher_id):
        out["teacher_routes"] = teacher_route_rows(
            traj, teacher, step=step, opd=opd, opd_weight=opd_weight, distill=distill
        )
    if sparse is not None:
        out.update(sparse_rows(sparse, step=step, sample_ids=traj.sample_id, keep=keep))
    out["steps"] = {k: [v] for k, v in metrics.items()} | {
        "rank": [0],
        "wall_time": [datetime.now(UTC)],
    }
    return out


def token_rows(
    traj: Trajectories, *, step: int, reason: torch.Tensor, keep: np.ndarray, teacher=None
) -> dict:
    """Columns of ``tokens``: one row per real token of the kept samples."""
    b, t = traj.ids.shape
    sel = traj.valid & torch.as_tensor(keep)[:, None]  # [B, T]
    gen = _np(traj.generated[sel])  # generated tokens carry the log-prob columns
    train_ids = traj.train_ids if traj.train_ids is not None else traj.ids
    train_valid = traj.train_valid if traj.train_valid is not None else traj.valid
    r_lp, t_lp = traj.rollout_logp[sel], traj.train_logp[sel]
    o_lp = (traj.old_logp if traj.old_logp is not None else traj.train_logp)[sel]
    version = traj.version[sel]
    reason_sel = reason[sel].to(torch.int8)
    cols = {
        "step": np.full(int(sel.sum()), step, dtype=np.int64),
        "sample_id": _np(traj.sample_id[:, None].expand(b, t)[sel]),
        "pos": _np(traj.positions[sel]).astype(np.int32),
        "token_id": _np(traj.ids[sel]).astype(np.int32),
        "train_token_id": np.ma.masked_array(
            _np(train_ids[sel]).astype(np.int32), mask=~_np(train_valid[sel])
        ),
        "role": _np(traj.role[sel]),
        "loss_mask": _np(traj.loss_mask[sel]),
        "trust_mask": _np(reason_sel == REASON["kept"]),
        "mask_reason": _np(reason_sel),
        "rollout_logp": _masked(r_lp, gen),
        "train_logp": _masked(t_lp, gen),
        "old_logp": _masked(o_lp, gen),
        "ratio": _masked(torch.exp(t_lp - r_lp), gen),
        "advantage": _masked(traj.advantages[sel], gen),
        "entropy": _masked(traj.entropy[sel], gen),
        "prefix_hash": _np(unpadded_prefix_hashes(traj.ids, traj.valid)[sel]),
        "policy_version_rollout": _masked(version, _np(version >= 0)),
    }
    if teacher is not None:
        scored = _np(traj.token_aligned(teacher.scored, fill=False)[sel])
        cols["teacher_logp"] = _masked(traj.teacher_logp[sel], scored)
        cols |= teacher_token_columns(traj, teacher, sel=sel)
    elif traj.teacher_logp is not None:
        cols["teacher_logp"] = _masked(traj.teacher_logp[sel], gen)
    for name in ("turn", "kv_version"):
        x = getattr(traj, name)
        if x is not None:
            cols[name] = _masked(x[sel], _np(x[sel] >= 0))
    for name, col in (("values", "value"), ("returns", "return")):  # critic loops only
        if (x := getattr(traj, name)) is not None:
            cols[col] = _masked(x[sel], gen)
    cols["segment"] = _np(traj.segment[:, None].expand(b, t)[sel]).astype(np.int32)
    return cols


def sample_rows(
    traj: Trajectories, *, step: int, v_train: int, const: RunConstants, keep: np.ndarray
) -> dict:
    """Columns of ``samples``: one row per sample."""
    gen = traj.generated  # [B, T]
    n_gen = gen.sum(1)
    has = _np(n_gen > 0)
    big = torch.iinfo(torch.int64).max
    oldest = torch.where(gen, traj.version, torch.full_like(traj.version, big)).min(1).values
    newest = torch.where(gen, traj.version, torch.full_like(traj.version, -1)).max(1).values
    adv = (traj.advantages * gen).sum(1) / n_gen.clamp_min(1)  # per-sequence: mean over actions
    n_prompt = traj.is_role("prompt").sum(1)
    extra = {
        name: np.ma.masked_less(_np(x), 0) if name == "worker" else _np(x)
        for name in ("worker", "env_latency_s", "refill")
        if (x := getattr(traj, name)) is not None
    }
    return extra | {
        "sample_id": _np(traj.sample_id),
        "step": step,
        "prompt_id": traj.prompt_id,
        "group_id": _np(traj.group_id),
        "domain": traj.domain,
        "engine": "rollout",
        "policy_version_rollout": np.ma.masked_array(_np(oldest), mask=~has),
        "policy_version_rollout_max": np.ma.masked_array(_np(newest), mask=~has),
        "policy_version_train": v_train,
        "staleness": np.ma.masked_array(_np(v_train - oldest), mask=~has),
        "reward": _np(traj.reward).astype(np.float64),
        "advantage": _np(adv).astype(np.float64),
        "n_prompt_tokens": _np(n_prompt),
        "n_response_tokens": _np(traj.valid.sum(1) - n_prompt),
        "status": traj.status,
        "failure_reason": traj.failure_reason,
        "tokenizer_rev": const.tokenizer_rev,
        "chat_template_rev": const.chat_template_rev,
        "sampling": json.dumps(const.sampling, sort_keys=True),
        "teacher_id": traj.teacher_id,
        "response_text": traj.response_text,
        "finish_reason": np.where(_np(traj.finished), "stop", "length").tolist(),
        "tokens_sampled": keep,
        "env": traj.env_name,
        "n_turns": _np(traj.n_turns).astype(np.int32),
        "segment": _np(traj.segment).astype(np.int32),
        "parent_sample_id": np.ma.masked_less(_np(traj.parent_id), 0),
    }


def reward_component_rows(traj: Trajectories, *, step: int) -> dict:
    """Columns of ``reward_components``: one row per (sample, component)."""
    names = sorted(traj.reward_components)
    values = [_np(traj.reward_components[k]).astype(np.float64) for k in names]
    n = traj.size
    return {
        "sample_id": np.tile(_np(traj.sample_id), len(names)),
        "step": step,
        "component": [k for k in names for _ in range(n)],
        "value": np.ma.masked_invalid(np.concatenate(values) if values else np.zeros(0)),
        "weight": np.repeat([float(traj.reward_weights.get(k, 1.0)) for k in names], n),
        "failure_reason": [
            r for k in names for r in traj.reward_failures.get(k, traj.failure_reason)
        ],
    }


PROVENANCE_COLUMNS = (
    "teacher_domains",
    "teacher_source_sha256",
    "teacher_config_sha256",
    "student_source_sha256",
    "declared_source",
)


def teacher_token_columns(traj: Trajectories, teacher, *, sel: torch.Tensor) -> dict:
    """``tokens.teacher_id`` / ``teacher_prefix_hash`` of the selected slots ``sel`` [B, T]."""
    b, t = traj.ids.shape
    routed = torch.tensor([x is not None for x in traj.teacher_id], dtype=torch.bool)
    got = (traj.valid & routed[:, None])[sel].numpy()  # slots the teacher received
    rows = torch.arange(b)[:, None].expand(b, t)[sel].tolist()
    return {
        "teacher_id": [traj.teacher_id[r] if g else None for r, g in zip(rows, got.tolist())],
        "teacher_prefix_hash": np.ma.masked_array(teacher.prefix_hash[sel].numpy(), mask=~got),
    }


def teacher_route_rows(
    traj: Trajectories,
    teacher,
    *,
    step: int,
    opd: tuple[torch.Tensor, dict],
    opd_weight: float,
    distill: tuple[torch.Tensor, dict] | None,
) -> dict:
    """Columns of ``teacher_routes`` (one row per routed (domain, teacher) pair)."""
    scored = traj.token_aligned(teacher.scored, fill=False)  # [B, T]
    ratio = opd[0]  # [B, T] log π_T − log π_θ on scored tokens
    per_pos = None if distill is None else traj.token_aligned(distill[1]["per_position"])
    width = int(teacher.topk_ids.shape[-1]) if teacher.topk_ids is not None else 0  # K or V
    per = payload_bytes_per_position(teacher.mode, k=width, vocab_size=width)
    keys = sorted({(d, x) for d, x in zip(traj.domain, traj.teacher_id) if x is not None})
    cols = {k: [] for k in ("domain", "teacher_id", "n_samples", "n_tokens", "payload_bytes")}
    cols |= {k: [] for k in ("reverse_kl", "opd_adv_mean", "opd_adv_std", "topk_kl")}
    cols |= {k: [] for k in PROVENANCE_COLUMNS}
    for domain, tid in keys:
        rows = torch.tensor(
            [d == domain and x == tid for d, x in zip(traj.domain, traj.teacher_id)]
        )
        m = scored & rows[:, None]  # [B, T]
        n = int(m.sum())
        r = ratio[m].double()
        adv = opd_weight * r
        cols["domain"].append(domain)
        cols["teacher_id"].append(tid)
        cols["n_samples"].append(int(rows.sum()))
        cols["n_tokens"].append(n)
        cols["payload_bytes"].append(n * per)
        cols["reverse_kl"].append(float(-r.mean()) if n else None)
        cols["opd_adv_mean"].append(float(adv.mean()) if n else None)
        cols["opd_adv_std"].append(float(adv.std(unbiased=False)) if n else None)
        kl = None if per_pos is None or not n else float(per_pos[m].double().mean())
        cols["topk_kl"].append(kl)
        prov = teacher.provenance.get(domain) or teacher.provenance.get(WILDCARD) or {}
        for k in PROVENANCE_COLUMNS:
            cols[k].append(prov.get(k))
    cols["step"] = step
    cols["payload"] = teacher.mode
    return cols

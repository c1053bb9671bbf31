"""Teacher telemetry of one step: per-token teacher columns and the ``teacher_routes`` rows.

``teacher_routes``: one row per (domain, teacher) the step routed — samples, scored tokens,
payload bytes, the sampled reverse-KL estimate mean(log π_θ − log π_T), the OPD advantage's mean
and spread (w · the log-ratio, the part that enters Â or would), and the Top-k reverse KL when
that term trained, and the route's provenance (``core.teachers.provenance``: the teacher's trained
domains, source and config hashes, the student's source, the declared source). Token columns: ``teacher_id`` and the teacher's own prefix hash of every
token it received (the same-ids contract compares it with the rollout's ``prefix_hash``).
Unrouted samples (no teacher for their domain) get no route row and null teacher columns.
"""

from __future__ import annotations

import numpy as np
import torch

from core.rollout.trajectories import Trajectories
from core.teachers.config import WILDCARD
from core.teachers.engine import payload_bytes_per_position

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

"""Teacher provenance: what a checkpoint was trained on, which SFT base it descends from, and the
config that trained it — recorded per route in ``teacher_routes`` for the ``teacher_provenance``
contract.

- *domains*: the task domains of its training data (``domains`` in new checkpoints; older ones
  and ``closedloop pretrain`` checkpoints: their ``task.ops`` mapped by the arithmetic
  environment's ``DOMAINS``).
- *source*: the sha256 of the first weights of its lineage — a pretrained (SFT) checkpoint is its
  own source, a ``closedloop train`` checkpoint inherits its base model's (``source_sha256``,
  or, in older checkpoints, resolved through the recorded ``base_model`` directory). A teacher is
  *same-source* when its source equals the student's, *off-source* otherwise.
- *config hash*: ``config_sha256`` (sha256 of the training run's config JSON); checkpoints
  without one hash their recorded metadata (everything but the weights' hash) instead.
Unknown values are None: the contract then fails the route (provenance cannot be proven).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from core.envs.arithmetic import DOMAINS

_MAX_DEPTH = 8


def _sha256_json(doc) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def checkpoint_domains(meta: Mapping) -> list[str] | None:
    """The domains a checkpoint was trained on (sorted), or None when it does not say."""
    if meta.get("domains") is not None:
        return sorted(meta["domains"])
    ops = (meta.get("task") or {}).get("ops")
    if not ops or any(op not in DOMAINS for op in ops):
        return None
    return sorted({DOMAINS[op] for op in ops})


def source_sha256(meta: Mapping, *, repo_root: Path, _depth: int = 0) -> str | None:
    """The sha256 of the first weights of the checkpoint's lineage (see the module docstring)."""
    if meta.get("source_sha256"):
        return meta["source_sha256"]
    base = meta.get("base_model")
    if not base:  # trained from scratch (closedloop pretrain): its own weights are the source
        return meta.get("weights_sha256")
    path = Path(base) if Path(base).is_absolute() else repo_root / base
    try:
        parent = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if _depth >= _MAX_DEPTH:
        return None
    return source_sha256(parent, repo_root=repo_root, _depth=_depth + 1)


def config_sha256(meta: Mapping) -> str:
    """``config_sha256`` when recorded, else the sha256 of the metadata without the weights' hash."""
    if meta.get("config_sha256"):
        return meta["config_sha256"]
    return _sha256_json({k: v for k, v in meta.items() if k != "weights_sha256"})


def checkpoint_provenance(cfg, base_meta: Mapping, *, repo_root: Path) -> dict:
    """What ``closedloop train`` records in the checkpoint it writes: its ``domains`` (the
    arithmetic task's ops; None for other environments), its ``source_sha256`` (the base model's
    source) and ``config_sha256`` (the run config's)."""
    domains = None
    if cfg.env.name == "arithmetic":
        domains = sorted({DOMAINS[op] for op in cfg.task.ops})
    return {
        "domains": domains,
        "source_sha256": source_sha256(base_meta, repo_root=repo_root),
        "config_sha256": _sha256_json(cfg.to_dict()),
    }


def route_provenance(
    routes: Mapping[str, str],
    teacher_meta: Mapping[str, Mapping],
    student_meta: Mapping,
    sources: Mapping[str, str],
    *,
    repo_root: Path,
) -> dict[str, dict]:
    """Per routed domain, the ``teacher_routes`` provenance columns: ``teacher_domains``,
    ``teacher_source_sha256``, ``teacher_config_sha256``, ``student_source_sha256`` and
    ``declared_source`` (``sources[domain]``, else ``sources["*"]``, else ``same``).

    Args:
        routes: domain -> teacher id; teacher_meta: teacher id -> its checkpoint metadata;
        student_meta: the student's base checkpoint metadata.
    """
    student = source_sha256(student_meta, repo_root=repo_root)
    out = {}
    for domain, tid in routes.items():
        meta = teacher_meta[tid]
        out[domain] = {
            "teacher_domains": checkpoint_domains(meta),
            "teacher_source_sha256": source_sha256(meta, repo_root=repo_root),
            "teacher_config_sha256": config_sha256(meta),
            "student_source_sha256": student,
            "declared_source": sources.get(domain, sources.get("*", "same")),
        }
    return out

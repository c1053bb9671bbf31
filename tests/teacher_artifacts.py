"""Small real teachers and reward models for the tests (made once per test run in tmp dirs).

Teachers are checkpoints of the policy architecture: the shipped SFT base itself (same source,
KL 0 at the start) and a copy whose weights are perturbed (a different model over the same
tokenizer). The ORM and the judge are trained for a few steps on the verified rollouts of the
shared tiny GRPO test run; their quality is irrelevant here (a barely trained judge writes
unparseable verdicts, which the tests want to see recorded as failures).
"""

from __future__ import annotations

from pathlib import Path

import torch

from core.model.checkpoint import load_checkpoint, save_checkpoint

BASE = Path(__file__).resolve().parents[1] / "core" / "assets" / "base_model"


def teacher_checkpoint(out: Path, *, noise: float = 0.0, seed: int = 0, **meta_edits) -> Path:
    """A copy of the SFT base at ``out`` with N(0, noise²·std²) added to every weight; ``meta_edits``
    overwrite metadata fields (``None`` deletes one)."""
    weights, cfg, meta = load_checkpoint(BASE)
    g = torch.Generator().manual_seed(seed)
    if noise:
        weights = {
            k: v + noise * v.float().std().clamp_min(1e-3) * torch.randn(v.shape, generator=g)
            for k, v in weights.items()
        }
    meta = {k: v for k, v in meta.items() if k not in ("model", "weights_sha256")}
    for k, v in meta_edits.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    save_checkpoint(out, weights, cfg, meta)
    return out

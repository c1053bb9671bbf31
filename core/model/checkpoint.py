"""Checkpoints: actor weights as safetensors + a JSON config, identified by the weights' sha256.

Layout of a checkpoint directory: ``model.safetensors`` (megatron names, fp32) and
``config.json`` (``model`` section, tokenizer and chat-template revisions, sha256 of the weights
file, how it was produced). Loading verifies the sha256, so a shipped base model cannot drift.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from core.model.config import ModelConfig


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_checkpoint(
    path: str | Path, weights: dict[str, torch.Tensor], cfg: ModelConfig, meta: dict | None = None
) -> str:
    """Write the checkpoint; returns the weights' sha256."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.float32).contiguous() for k, v in sorted(weights.items())}
    save_file(tensors, str(path / "model.safetensors"))
    sha = file_sha256(path / "model.safetensors")
    doc = {"model": cfg.to_dict(), "weights_sha256": sha, **(meta or {})}
    (path / "config.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return sha


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], ModelConfig, dict]:
    """Read and verify a checkpoint: (weights, model config, metadata)."""
    path = Path(path)
    cfg_file, weights_file = path / "config.json", path / "model.safetensors"
    if not cfg_file.exists() or not weights_file.exists():
        raise FileNotFoundError(
            f"no checkpoint at {path} (expected config.json and model.safetensors); "
            "run `closedloop pretrain` to create the base model"
        )
    meta = json.loads(cfg_file.read_text())
    sha = file_sha256(weights_file)
    if meta.get("weights_sha256") != sha:
        raise ValueError(
            f"checkpoint {path}: weights sha256 {sha} != recorded {meta.get('weights_sha256')}"
        )
    return load_file(str(weights_file)), ModelConfig.from_dict(meta["model"]), meta

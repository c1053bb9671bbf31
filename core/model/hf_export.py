"""``closedloop export-hf``: a policy (either engine's weights, or a checkpoint) as an HF directory.

The actor's megatron weights and the rollout engine's own layout both map onto the same Hugging
Face tensors (``core.model.hf_weights``), so a directory exported from either loads back
bit-identically into both. The default source is the shipped base model.
"""

from __future__ import annotations

from pathlib import Path

import torch

from core.model.config import ModelConfig
from core.model.hf_checkpoint import write_hf_dir
from core.model.hf_weights import actor_to_hf, rollout_to_hf
from core.model.source import load_policy
from core.tokenizer.tokenizer import Tokenizer

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "assets" / "base_model"
"""The shipped base model, exported when no checkpoint is given."""


def export_actor_hf(
    out: str | Path, weights: dict[str, torch.Tensor], cfg: ModelConfig, *, tokenizer: Tokenizer
) -> Path:
    """Write megatron-named ``weights`` (e.g. ``Actor.named_weights()``) as an HF directory."""
    return write_hf_dir(out, actor_to_hf(weights, cfg), cfg, tokenizer=tokenizer)


def export_rollout_hf(out: str | Path, engine, *, tokenizer: Tokenizer) -> Path:
    """Write a float rollout engine's weights (its own layout) as an HF directory."""
    return write_hf_dir(
        out, rollout_to_hf(engine.weights, engine.cfg), engine.cfg, tokenizer=tokenizer
    )


def export_hf(out: str | Path, *, checkpoint: str | Path | None = None) -> Path:
    """Export ``checkpoint`` (closedloop or HF directory; default the shipped base model) to
    ``out`` with the project tokenizer; returns ``out``."""
    tok = Tokenizer.load()
    weights, cfg, _ = load_policy(checkpoint or DEFAULT_CHECKPOINT, tokenizer=tok)
    return export_actor_hf(out, weights, cfg, tokenizer=tok)

"""Where a policy starts from: a closedloop checkpoint or a Hugging Face directory, one function.

``load_policy`` tells the two formats apart by their ``config.json`` (an HF config has
``architectures``; ours has ``model`` and ``weights_sha256``) and returns megatron-named weights,
the ``ModelConfig`` and metadata either way. With a tokenizer it also checks that the checkpoint
was made for that tokenizer (an HF directory must carry the same ``tokenizer.json``) and that the
vocabulary fits the embedding: closedloop's task and chat template speak that tokenizer only.
"""

from __future__ import annotations

from pathlib import Path

import torch

from core.model.checkpoint import load_checkpoint
from core.model.config import ModelConfig
from core.model.hf_checkpoint import is_hf_dir, read_hf_dir
from core.model.hf_weights import hf_to_actor
from core.tokenizer.tokenizer import Tokenizer


def load_policy(
    path: str | Path, *, tokenizer: Tokenizer | None = None
) -> tuple[dict[str, torch.Tensor], ModelConfig, dict]:
    """(megatron weights fp32, ModelConfig, metadata) of the checkpoint directory ``path``.

    Raises ``FileNotFoundError`` when ``path`` holds neither format, ``ValueError`` for an
    unsupported HF config, tensors that do not match it, or a tokenizer that does not fit.
    """
    path = Path(path)
    if is_hf_dir(path):
        hf, cfg, meta = read_hf_dir(path)
        weights = hf_to_actor(hf, cfg)
        if tokenizer is not None and meta["tokenizer_rev"] != tokenizer.revision:
            raise ValueError(
                f"model.hf_path={str(path)!r}: tokenizer.json revision "
                f"{meta['tokenizer_rev']} is not the run's tokenizer ({tokenizer.path}, revision "
                f"{tokenizer.revision}); closedloop's task and chat template need that tokenizer"
            )
    else:
        weights, cfg, meta = load_checkpoint(path)
        meta = {"format": "closedloop", **meta}
    if tokenizer is not None and tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(
            f"tokenizer vocab {tokenizer.vocab_size} > model.vocab_size {cfg.vocab_size} of {path}"
        )
    return weights, cfg, meta

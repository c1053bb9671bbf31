"""Hugging Face checkpoint directories: read one into HF tensors + ``ModelConfig``, write one back.

A directory holds ``config.json`` (``core.model.hf_config``), ``model.safetensors`` or sharded
``model-*.safetensors`` with ``model.safetensors.index.json``, and ``tokenizer.json``. Reading
returns the tensors under their HF names in fp32 (our master-weight dtype; the source dtype is
kept in the metadata), ready for ``core.model.hf_weights`` to map onto either engine. Writing
produces a directory ``transformers`` loads as it is: fp32 safetensors, ``config.json``,
``generation_config.json`` and, with a tokenizer, ``tokenizer.json`` plus a
``tokenizer_config.json`` / ``special_tokens_map.json`` naming our special tokens and the chat
template (so ``AutoTokenizer`` and TRL read it). Simplification: writing is one unsharded file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from core.model.checkpoint import file_sha256
from core.model.config import ModelConfig
from core.model.hf_config import hf_config_from_model, model_config_from_hf
from core.tokenizer.chat_template import HF_CHAT_TEMPLATE
from core.tokenizer.tokenizer import ASSISTANT, BOS, EOS, PAD, USER, Tokenizer


def is_hf_dir(path: str | Path) -> bool:
    """True when ``path/config.json`` is a Hugging Face model config (has ``architectures``)."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return False
    try:
        return "architectures" in json.loads(cfg.read_text())
    except json.JSONDecodeError:
        return False


def _weight_files(path: Path) -> list[Path]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / s for s in shards]
    single = path / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(
            f"{path}: no model.safetensors (or model.safetensors.index.json) in the HF checkpoint"
        )
    return [single]


def read_hf_dir(path: str | Path) -> tuple[dict[str, torch.Tensor], ModelConfig, dict]:
    """(HF-named fp32 tensors, ModelConfig, metadata) of a Hugging Face checkpoint directory.

    Metadata: ``format`` ("hf"), ``architecture``, ``source_dtype``, ``hf_path`` and
    ``tokenizer_rev`` (sha256 of ``tokenizer.json``, None when the directory has none).
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: no config.json (not a Hugging Face checkpoint directory)")
    doc = json.loads((path / "config.json").read_text())
    cfg = model_config_from_hf(doc)
    tensors: dict[str, torch.Tensor] = {}
    for f in _weight_files(path):
        tensors.update(load_file(str(f)))
    dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()})
    tok = path / "tokenizer.json"
    meta = {
        "format": "hf",
        "architecture": doc["architectures"][0],
        "source_dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "hf_path": str(path),
        "tokenizer_rev": file_sha256(tok) if tok.is_file() else None,
    }
    return {k: v.to(torch.float32) for k, v in tensors.items()}, cfg, meta


def write_hf_dir(
    out: str | Path,
    hf_tensors: dict[str, torch.Tensor],
    cfg: ModelConfig,
    *,
    tokenizer: Tokenizer | None = None,
) -> Path:
    """Write a Hugging Face checkpoint directory (created if needed); returns its path.

    ``hf_tensors``: HF-named tensors (``core.model.hf_weights``), saved as fp32.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = (
        (None, None, None)
        if tokenizer is None
        else (
            tokenizer.bos_id,
            tokenizer.eos_id,
            tokenizer.pad_id,
        )
    )
    doc = hf_config_from_model(cfg, bos_id=ids[0], eos_id=ids[1], pad_id=ids[2])
    tensors = {k: v.detach().to(torch.float32).contiguous() for k, v in sorted(hf_tensors.items())}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_json(out / "config.json", doc)
    gen = {"bos_token_id": ids[0], "eos_token_id": ids[1], "pad_token_id": ids[2]}
    _write_json(out / "generation_config.json", gen)
    if tokenizer is not None:
        _write_tokenizer(out, tokenizer, max_len=cfg.max_seq_len)
    return out


def _write_tokenizer(out: Path, tok: Tokenizer, *, max_len: int) -> None:
    shutil.copyfile(tok.path, out / "tokenizer.json")
    specials = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    _write_json(
        out / "special_tokens_map.json", specials | {"additional_special_tokens": [USER, ASSISTANT]}
    )
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **specials,
            "extra_special_tokens": [USER, ASSISTANT],
            "model_max_length": max_len,
            "padding_side": "left",
            "clean_up_tokenization_spaces": False,
            "chat_template": HF_CHAT_TEMPLATE,
        },
    )


def _write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")

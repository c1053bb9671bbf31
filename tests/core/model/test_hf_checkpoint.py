"""HF directories in and out of both engines (no transformers needed: see test_hf_reference)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.cli import main
from core.model.actor import Actor
from core.model.checkpoint import load_checkpoint
from core.model.config import ModelConfig
from core.model.hf_export import DEFAULT_CHECKPOINT, export_actor_hf
from core.model.source import load_policy
from core.rollout.engine import RolloutEngine
from core.sync.convert import actor_to_rollout, rollout_to_actor
from core.tokenizer.tokenizer import Tokenizer

SMALL = ModelConfig(vocab_size=64, hidden_size=32, num_layers=2, ffn_hidden_size=48)
VARIANTS = {
    "llama": SMALL,
    "qwen2-tied": dataclasses.replace(SMALL, qkv_bias=True, tie_embeddings=True),
    "qwen3": dataclasses.replace(SMALL, qk_norm=True, kv_channels=12),
}


def _randomized_actor(cfg: ModelConfig) -> Actor:
    """An actor whose every weight (norms, biases included) is random, seeded."""
    actor = Actor(cfg, seed=1)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in actor.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2 + (1.0 if p.dim() == 1 else 0.0))
    return actor


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_engine_layout_round_trip_and_parity(name):
    """megatron -> engine -> megatron is the identity, and both engines compute one function."""
    cfg = VARIANTS[name]
    actor = _randomized_actor(cfg)
    weights = actor.named_weights()
    if cfg.tie_embeddings:
        assert "output_layer.weight" not in weights
    back = rollout_to_actor(actor_to_rollout(weights, cfg), cfg)
    assert back.keys() == weights.keys()
    assert all(torch.equal(back[k], weights[k]) for k in weights)
    engine = RolloutEngine(cfg)
    engine.load_weights(actor_to_rollout(weights, cfg), version=0)
    ids = torch.randint(0, cfg.vocab_size, (3, 10), generator=torch.Generator().manual_seed(0))
    valid = torch.ones_like(ids, dtype=torch.bool)
    valid[1, :4] = False
    with torch.no_grad():
        diff = (actor.logits(ids, valid) - engine.prefill_logits(ids, valid))[valid]
    assert float(diff.abs().max()) <= 1e-5  # measured ~1e-6 (SDPA vs einsum softmax)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_export_then_load_is_bit_identical(name, tmp_path):
    cfg = VARIANTS[name]
    weights = _randomized_actor(cfg).named_weights()
    out = export_actor_hf(tmp_path / name, weights, cfg, tokenizer=Tokenizer.load())
    loaded, cfg2, meta = load_policy(out)
    assert cfg2 == cfg and meta["format"] == "hf" and meta["source_dtype"] == "float32"
    assert loaded.keys() == weights.keys()
    assert all(torch.equal(loaded[k], weights[k]) for k in weights)


def test_cli_exports_the_shipped_base_model(tmp_path, capsys):
    assert main(["export-hf", str(tmp_path / "hf")]) == 0
    out = tmp_path / "hf"
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    base, base_cfg, _ = load_checkpoint(DEFAULT_CHECKPOINT)
    weights, cfg, meta = load_policy(out, tokenizer=Tokenizer.load())
    assert cfg == base_cfg and meta["architecture"] == "LlamaForCausalLM"
    assert all(torch.equal(weights[k], base[k]) for k in base) and weights.keys() == base.keys()
    tok_cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert (tok_cfg["bos_token"], tok_cfg["eos_token"], tok_cfg["pad_token"]) == (
        "<|bos|>",
        "<|eos|>",
        "<|pad|>",
    )
    assert main(["export-hf", str(tmp_path / "x"), "--checkpoint", str(tmp_path / "none")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_mismatched_tensors_and_tokenizers_are_named(tmp_path):
    tok = Tokenizer.load()
    out = export_actor_hf(
        tmp_path / "m", _randomized_actor(SMALL).named_weights(), SMALL, tokenizer=tok
    )
    tensors = load_file(str(out / "model.safetensors"))
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"][:60]
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"embed_tokens.weight has shape \(60, 32\).*vocab_size=64"
    ):
        load_policy(out)
    del tensors["model.embed_tokens.weight"]
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(ValueError, match="missing.*embed_tokens"):
        load_policy(out)
    # a directory whose tokenizer.json is not ours cannot train closedloop's task
    big = dataclasses.replace(SMALL, vocab_size=320)
    out = export_actor_hf(
        tmp_path / "t", _randomized_actor(big).named_weights(), big, tokenizer=tok
    )
    (out / "tokenizer.json").write_text((out / "tokenizer.json").read_text() + " ")
    with pytest.raises(ValueError, match="model.hf_path=.*tokenizer.json revision"):
        load_policy(out, tokenizer=tok)
    # our tokenizer (~300 tokens) does not fit a 64-row embedding
    small = export_actor_hf(
        tmp_path / "s", _randomized_actor(SMALL).named_weights(), SMALL, tokenizer=tok
    )
    with pytest.raises(ValueError, match="tokenizer vocab .* > model.vocab_size 64"):
        load_policy(small, tokenizer=tok)

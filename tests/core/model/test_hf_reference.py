"""transformers as the external reference for both engines, on checkpoints it wrote itself.

For each of Llama, Qwen2 (q/k/v bias, tied embeddings) and Qwen3 (q/k norm, head width 24 !=
hidden / heads): our megatron actor's and our rollout engine's fp32 logits equal transformers'
within 1e-5 max abs on random left-padded prompts (measured ~1e-6: different kernels, same
math), and load -> export -> load is bit-identical from either engine.
"""

from __future__ import annotations

import pytest
import torch

from core.model.actor import Actor
from core.model.hf_checkpoint import read_hf_dir
from core.model.hf_export import export_actor_hf, export_rollout_hf
from core.model.hf_weights import hf_to_rollout
from core.model.source import load_policy
from core.rollout.engine import RolloutEngine
from core.tokenizer.tokenizer import Tokenizer
from tests.core.model.hf_models import ARCHS, hf_logits, write_hf_model


@pytest.fixture(scope="module", params=ARCHS)
def hf_dir(request, tmp_path_factory):
    return write_hf_model(request.param, tmp_path_factory.mktemp(request.param), seed=7)


def _batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """4 random prompts of lengths 5..12, left-padded to 12 (pad id 0)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, vocab, (4, 12), generator=g)
    valid = torch.ones(4, 12, dtype=torch.bool)
    for row, n in enumerate((12, 9, 7, 5)):
        valid[row, : 12 - n] = False
    return torch.where(valid, ids, 0), valid


def test_config_maps_the_architecture(hf_dir):
    _, cfg, meta = read_hf_dir(hf_dir)
    arch = meta["architecture"]
    assert cfg.qkv_bias == (arch == "Qwen2ForCausalLM")
    assert cfg.qk_norm == (arch == "Qwen3ForCausalLM")
    assert cfg.tie_embeddings == (arch == "Qwen2ForCausalLM")
    assert cfg.head_dim == (24 if arch == "Qwen3ForCausalLM" else 16)
    assert (cfg.rope_base, cfg.norm_eps, cfg.vocab_size) == (50000.0, 1e-6, 96)


def test_actor_and_engine_logits_match_transformers(hf_dir):
    weights, cfg, _ = load_policy(hf_dir)
    ids, valid = _batch(cfg.vocab_size)
    ref = hf_logits(hf_dir, ids, valid)  # [B, T, V]
    actor = Actor(cfg)
    actor.load_weights(weights)
    with torch.no_grad():
        ours = actor.logits(ids, valid)
    engine = RolloutEngine(cfg)
    engine.load_weights(hf_to_rollout(read_hf_dir(hf_dir)[0], cfg), version=0)
    served = engine.prefill_logits(ids, valid)
    assert ref.abs().max() > 1.0  # the logits are not trivially small
    for got in (ours, served):
        assert float((got - ref)[valid].abs().max()) <= 1e-5


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype
        and torch.equal(a[k].view(-1).view(torch.int32), b[k].view(-1).view(torch.int32))
        for k in a
    )


def test_round_trip_is_bit_identical_through_either_engine(hf_dir, tmp_path):
    tok = Tokenizer.load()
    hf, cfg, _ = read_hf_dir(hf_dir)
    weights, _, _ = load_policy(hf_dir)
    actor = Actor(cfg)
    actor.load_weights(weights)
    engine = RolloutEngine(cfg)
    engine.load_weights(hf_to_rollout(hf, cfg), version=0)
    via_actor = export_actor_hf(tmp_path / "a", actor.named_weights(), cfg, tokenizer=tok)
    via_engine = export_rollout_hf(tmp_path / "e", engine, tokenizer=tok)
    for out in (via_actor, via_engine):
        hf2, cfg2, _ = read_hf_dir(out)
        assert cfg2 == cfg
        assert _same(hf2, hf)
        assert _same(load_policy(out)[0], weights)


def test_transformers_loads_our_export_and_agrees(hf_dir, tmp_path):
    """The exported directory is a checkpoint transformers reads as it is, same function."""
    weights, cfg, _ = load_policy(hf_dir)
    out = export_actor_hf(tmp_path / "x", weights, cfg, tokenizer=Tokenizer.load())
    ids, valid = _batch(cfg.vocab_size)
    assert torch.equal(hf_logits(out, ids, valid), hf_logits(hf_dir, ids, valid))


def test_transformers_tokenizer_and_chat_template_reproduce_ours(tmp_path):
    """AutoTokenizer reads the exported tokenizer files; its chat template renders our prompt
    and SFT ids exactly, and its special tokens are ours (what TRL needs)."""
    import transformers as tf

    from core.model.hf_export import export_hf
    from core.tokenizer.chat_template import encode_prompt, encode_response

    out = export_hf(tmp_path / "base")
    tok = tf.AutoTokenizer.from_pretrained(out)
    ours = Tokenizer.load()
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (
        ours.bos_id,
        ours.eos_id,
        ours.pad_id,
    )
    user = [{"role": "user", "content": "12+34="}]
    prompt = tok.apply_chat_template(user, add_generation_prompt=True)["input_ids"]
    assert prompt == encode_prompt("12+34=")
    pair = user + [{"role": "assistant", "content": "46"}]
    assert tok.apply_chat_template(pair)["input_ids"] == encode_prompt("12+34=") + encode_response(
        "46"
    )
    assert tok("7+8=")["input_ids"] == ours.encode("7+8=")

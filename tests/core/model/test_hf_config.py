"""HF config.json -> ModelConfig: the supported fields map, anything else is an error naming it."""

from __future__ import annotations

import pytest

from core.model.config import ModelConfig
from core.model.hf_config import architecture_of, hf_config_from_model, model_config_from_hf

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 320,
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "bfloat16",
}


def test_llama_maps_onto_the_default_architecture():
    cfg = model_config_from_hf(LLAMA)
    assert cfg == ModelConfig(vocab_size=320)  # head_dim 32 = 128 / 4 stays the default 0


def test_legacy_rope_theta_spelling_and_qwen_flags():
    doc = dict(LLAMA, architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    for key in ("attention_bias", "mlp_bias", "rope_parameters"):
        doc.pop(key)
    doc |= {"rope_theta": 1e6, "rope_scaling": None, "use_sliding_window": False}
    cfg = model_config_from_hf(doc)
    assert (cfg.rope_base, cfg.qkv_bias, cfg.qk_norm) == (1e6, True, False)
    doc = dict(LLAMA, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=48)
    doc.pop("mlp_bias")
    cfg = model_config_from_hf(doc)
    assert (cfg.qk_norm, cfg.qkv_bias, cfg.head_dim, cfg.kv_channels) == (True, False, 48, 48)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"architectures": ["MistralForCausalLM"]}, "architectures"),
        ({"model_type": "qwen2"}, "model_type"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_parameters"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"layer_types": ["sliding_attention"] * 4}, "layer_types"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
        ({"num_key_value_heads": 3}, "num_kv_heads"),
    ],
)
def test_unsupported_fields_are_errors_naming_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        model_config_from_hf(LLAMA | change)


def test_export_config_round_trips_and_picks_the_architecture():
    for cfg, arch in (
        (ModelConfig(), "LlamaForCausalLM"),
        (ModelConfig(qkv_bias=True, tie_embeddings=True), "Qwen2ForCausalLM"),
        (ModelConfig(qk_norm=True, kv_channels=24, rope_base=1e6), "Qwen3ForCausalLM"),
    ):
        doc = hf_config_from_model(cfg, bos_id=1, eos_id=2, pad_id=0)
        assert doc["architectures"] == [arch]
        assert model_config_from_hf(doc) == cfg


@pytest.mark.parametrize(
    "cfg, field",
    [
        (ModelConfig(moe_layers=(1,)), "moe_layers"),
        (ModelConfig(dsa_topk=4), "dsa_topk"),
        (ModelConfig(qkv_bias=True, qk_norm=True), "qkv_bias"),
    ],
)
def test_configs_without_an_hf_architecture_are_refused(cfg, field):
    with pytest.raises(ValueError, match=field):
        architecture_of(cfg)

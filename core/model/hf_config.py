"""Hugging Face ``config.json`` <-> ``ModelConfig`` for the Llama, Qwen2 and Qwen3 decoders.

Reading is strict: every key of the file is either mapped onto a ``ModelConfig`` field, checked
against the one value we implement (``hidden_act = "silu"``, default RoPE, no sliding window, no
attention/MLP biases beyond Qwen2's q/k/v ones...) or known to be irrelevant to the forward
(token ids, ``dtype``, ``use_cache``); any other key is an error naming it, so a checkpoint whose
function we would silently change (rope_scaling, sliding windows, ...) never loads. Both the
transformers 5 spelling (``rope_parameters``, ``dtype``) and the 4.x one (``rope_theta``,
``rope_scaling``, ``torch_dtype``) are read; writing uses the 5 spelling.
Simplifications: dense decoders only (no MoE, no DSA); ``max_position_embeddings`` becomes
``max_seq_len``.
"""

from __future__ import annotations

from typing import Any

from core.model.config import ModelConfig

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
"""Supported ``architectures[0]`` -> its ``model_type``."""

_MAPPED = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "intermediate_size": "ffn_hidden_size",
    "rms_norm_eps": "norm_eps",
    "max_position_embeddings": "max_seq_len",
    "tie_word_embeddings": "tie_embeddings",
    "head_dim": "kv_channels",
}
"""HF key -> ModelConfig field (rope theta is read from either RoPE spelling)."""

_IGNORED = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "use_cache",
        "initializer_range",
        "max_window_layers",  # only read when use_sliding_window is true (rejected below)
        "sliding_window",  # idem
        "rope_theta",
        "rope_parameters",
        "rope_scaling",
    }
)
"""Keys that do not change the forward (or that are read and checked separately)."""

_REQUIRED_VALUE: dict[str, dict[str, Any]] = {
    "llama": {
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "pretraining_tp": 1,
    },
    "qwen2": {"hidden_act": "silu", "use_sliding_window": False},
    "qwen3": {"hidden_act": "silu", "attention_bias": False, "use_sliding_window": False},
}
"""Keys we accept with one value only (the one our engines implement); absent keys are fine."""

_SHARED_REQUIRED = {"attention_dropout": 0.0}


def model_config_from_hf(doc: dict) -> ModelConfig:
    """The ``ModelConfig`` of a Hugging Face ``config.json`` (a dict).

    Raises ``ValueError`` naming the field for an unsupported architecture, an unknown key, a
    key with a value we do not implement, or values ``ModelConfig`` rejects.
    """
    arch = doc.get("architectures")
    if not (isinstance(arch, list) and len(arch) == 1 and arch[0] in ARCHITECTURES):
        raise ValueError(
            f"config.json architectures={arch!r}: supported are one of {sorted(ARCHITECTURES)}"
        )
    model_type = ARCHITECTURES[arch[0]]
    if doc.get("model_type", model_type) != model_type:
        raise ValueError(
            f"config.json model_type={doc.get('model_type')!r} does not match "
            f"architectures={arch!r} (expected {model_type!r})"
        )
    required = _REQUIRED_VALUE[model_type] | _SHARED_REQUIRED
    for key, value in doc.items():
        if key in _MAPPED or key in _IGNORED or key == "layer_types":
            continue
        if key not in required:
            raise ValueError(f"config.json field {key!r} is not supported for {arch[0]}")
        if value != required[key]:
            raise ValueError(
                f"config.json {key}={value!r} is not supported (closedloop implements "
                f"{key}={required[key]!r})"
            )
    _check_layer_types(doc)
    fields = {_MAPPED[k]: v for k, v in doc.items() if k in _MAPPED and v is not None}
    fields.setdefault("num_kv_heads", doc["num_attention_heads"])
    if fields.get("kv_channels") == doc["hidden_size"] // doc["num_attention_heads"]:
        fields["kv_channels"] = 0  # the default width: keep the config canonical
    fields["rope_base"] = _rope_theta(doc)
    fields["qkv_bias"] = model_type == "qwen2"
    fields["qk_norm"] = model_type == "qwen3"
    fields.setdefault("tie_embeddings", False)
    return ModelConfig(**fields)


def _check_layer_types(doc: dict) -> None:
    types = doc.get("layer_types")
    if types is None:
        return
    if not isinstance(types, list) or any(t != "full_attention" for t in types):
        raise ValueError(
            f"config.json layer_types={types!r} is not supported (only 'full_attention' layers)"
        )


def _rope_theta(doc: dict) -> float:
    """RoPE base from ``rope_parameters`` (transformers 5) or ``rope_theta`` (4.x); only the
    default rotary embedding (no scaling) is supported."""
    params = doc.get("rope_parameters")
    if doc.get("rope_scaling") is not None:
        raise ValueError(
            f"config.json rope_scaling={doc['rope_scaling']!r} is not supported (default RoPE only)"
        )
    if params is None:
        return float(doc.get("rope_theta", 10000.0))
    extra = sorted(set(params) - {"rope_type", "rope_theta"})
    if params.get("rope_type", "default") != "default" or extra:
        raise ValueError(
            f"config.json rope_parameters={params!r} is not supported "
            "(rope_type 'default' with rope_theta only)"
        )
    return float(params.get("rope_theta", doc.get("rope_theta", 10000.0)))


def architecture_of(cfg: ModelConfig) -> str:
    """The Hugging Face architecture that computes ``cfg``'s function.

    Llama (no biases, no q/k norm), Qwen2 (q/k/v biases) or Qwen3 (q/k norm). Raises
    ``ValueError`` naming the field for MoE, DSA, or q/k/v bias together with q/k norm.
    """
    if cfg.moe_layers:
        raise ValueError(f"model.moe_layers={list(cfg.moe_layers)}: MoE has no HF export here")
    if cfg.dsa_topk:
        raise ValueError(f"model.dsa_topk={cfg.dsa_topk}: DSA attention has no HF export here")
    if cfg.qkv_bias and cfg.qk_norm:
        raise ValueError("model.qkv_bias together with model.qk_norm has no HF architecture")
    if cfg.qk_norm:
        return "Qwen3ForCausalLM"
    return "Qwen2ForCausalLM" if cfg.qkv_bias else "LlamaForCausalLM"


def hf_config_from_model(
    cfg: ModelConfig, *, bos_id: int | None, eos_id: int | None, pad_id: int | None
) -> dict:
    """The ``config.json`` dict (transformers 5 spelling, fp32 weights) that describes ``cfg``."""
    arch = architecture_of(cfg)
    model_type = ARCHITECTURES[arch]
    doc: dict[str, Any] = {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.ffn_hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_base},
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_dropout": 0.0,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "dtype": "float32",
        "use_cache": True,
    }
    if model_type == "llama":
        doc |= {"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1}
    else:
        doc |= {"use_sliding_window": False, "sliding_window": None}
        doc["layer_types"] = ["full_attention"] * cfg.num_layers
    if model_type == "qwen3":
        doc["attention_bias"] = False
    return doc

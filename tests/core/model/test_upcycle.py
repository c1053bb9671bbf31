"""Sparse upcycling of the dense base checkpoint: experts are exact copies of the dense FFN, the
router is seeded and small, the upcycled actor computes the dense function, no down-cycling."""

import dataclasses
from pathlib import Path

import pytest
import torch

from core.model.actor import Actor
from core.model.checkpoint import load_checkpoint
from core.model.config import ModelConfig
from core.model.upcycle import sparse_from_dense, upcycle_moe

BASE = Path(__file__).resolve().parents[3] / "core" / "assets" / "base_model"


def _dense_weights(cfg: ModelConfig, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    f, h = cfg.ffn_hidden_size, cfg.hidden_size
    out = {}
    for layer in range(cfg.num_layers):
        m = f"decoder.layers.{layer}.mlp."
        out[m + "linear_fc1.weight"] = torch.randn(2 * f, h, generator=g)
        out[m + "linear_fc2.weight"] = torch.randn(h, f, generator=g)
    return out


def test_experts_are_copies_and_router_is_seeded():
    cfg = ModelConfig(
        hidden_size=8,
        num_heads=2,
        num_kv_heads=1,
        ffn_hidden_size=6,
        num_layers=2,
        moe_layers=(1,),
        num_experts=3,
    )
    dense = _dense_weights(cfg)
    up = upcycle_moe(dense, cfg, seed=5)
    m = "decoder.layers.1.mlp."
    assert m + "linear_fc1.weight" not in up and m + "linear_fc2.weight" not in up
    assert up[m + "w_gate_up"].shape == (3, 12, 8) and up[m + "w_down"].shape == (3, 8, 6)
    for e in range(3):
        assert torch.equal(up[m + "w_gate_up"][e], dense[m + "linear_fc1.weight"])
        assert torch.equal(up[m + "w_down"][e], dense[m + "linear_fc2.weight"])
    # layer 0 stays dense, the very same tensors
    assert (
        up["decoder.layers.0.mlp.linear_fc1.weight"]
        is dense["decoder.layers.0.mlp.linear_fc1.weight"]
    )
    router = up[m + "router"]
    assert router.shape == (3, 8) and torch.equal(
        router, upcycle_moe(dense, cfg, seed=5)[m + "router"]
    )
    assert not torch.equal(router, upcycle_moe(dense, cfg, seed=6)[m + "router"])
    assert 0 < float(router.abs().max()) < 0.1  # std 0.02: near-uniform routing at the start


def test_down_cycling_is_rejected():
    cfg = ModelConfig(
        hidden_size=8, num_heads=2, num_kv_heads=1, ffn_hidden_size=6, num_layers=2, moe_layers=(1,)
    )
    up = upcycle_moe(_dense_weights(cfg), cfg, seed=0)
    with pytest.raises(ValueError, match="checkpoint layer 1 is MoE but model.moe_layers"):
        upcycle_moe(up, dataclasses.replace(cfg, moe_layers=()), seed=0)
    with pytest.raises(ValueError, match="router_std"):
        upcycle_moe(up, cfg, seed=0, router_std=0.0)


def test_upcycled_actor_computes_the_dense_function():
    """Gates renormalized over the k routed copies sum to 1: same logits up to fp32 rounding."""
    weights, cfg, _ = load_checkpoint(BASE)
    dense = Actor(cfg, seed=0)
    dense.load_weights(weights)
    moe = Actor(dataclasses.replace(cfg, moe_layers=(1, 3)), seed=0)
    moe.load_weights(sparse_from_dense(weights, moe, seed=0))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 300, (3, 12), generator=g)
    valid = torch.ones(3, 12, dtype=torch.bool)
    valid[0, :4] = False  # left padding
    with torch.no_grad():
        a, b = dense.logits(ids, valid), moe.logits(ids, valid)
    assert torch.allclose(a[valid], b[valid], atol=1e-4, rtol=0)  # logits O(20); measured 1e-5
    routes = moe.moe_modules()[1].last_routes  # [S, B, k]: real routing happened
    assert routes.shape == (12, 3, 2) and routes.unique().numel() > 2


def test_dense_config_leaves_the_checkpoint_alone():
    weights, cfg, _ = load_checkpoint(BASE)
    actor = Actor(cfg, seed=0)
    out = sparse_from_dense(weights, actor, seed=0)
    assert out.keys() == weights.keys() and all(out[k] is weights[k] for k in weights)

"""Dense checkpoint -> the configured sparse policy: MoE sparse upcycling and fresh DSA indexers.

Sparse upcycling (Komatsuzaki et al.): every expert of a new MoE layer starts as a copy of the
dense SwiGLU FFN (``linear_fc1`` = cat(gate, up) -> ``w_gate_up [E, 2F, H]``, ``linear_fc2`` ->
``w_down [E, H, F]``) and the router is seeded N(0, router_std^2). Renormalized gates sum to 1, so
the upcycled layer computes the dense FFN up to fp32 rounding until training separates the
experts. A dense checkpoint has no DSA indexer: it keeps the actor's seeded initialisation.
Simplification: no down-cycling (an MoE checkpoint layer must stay MoE in the config).
"""

from __future__ import annotations

import torch

from core.model.config import ModelConfig


def upcycle_moe(
    weights: dict[str, torch.Tensor], cfg: ModelConfig, *, seed: int, router_std: float = 0.02
) -> dict[str, torch.Tensor]:
    """Replace the dense FFN of every layer in ``cfg.moe_layers`` by ``cfg.num_experts`` copies.

    Args:
        weights: actor weights by megatron name; dense FFN ``mlp.linear_fc1.weight [2F, H]``,
            ``mlp.linear_fc2.weight [H, F]``; layers that are MoE already are kept.
        cfg: the target config. seed: router seed. router_std: router init std (> 0, small).

    Returns:
        A new dict (unchanged tensors shared) with ``mlp.router [E, H]``, ``mlp.w_gate_up
        [E, 2F, H]`` and ``mlp.w_down [E, H, F]`` for upcycled layers.
    """
    if not router_std > 0:
        raise ValueError(f"router_std={router_std} must be > 0")
    out = dict(weights)
    g = torch.Generator().manual_seed(seed)
    e = cfg.num_experts
    for layer in range(cfg.num_layers):
        m = f"decoder.layers.{layer}.mlp."
        dense = m + "linear_fc1.weight" in weights
        if layer in cfg.moe_layers and dense:
            fc1, fc2 = out.pop(m + "linear_fc1.weight"), out.pop(m + "linear_fc2.weight")
            out[m + "w_gate_up"] = fc1[None].repeat(e, 1, 1)  # [E, 2F, H]
            out[m + "w_down"] = fc2[None].repeat(e, 1, 1)  # [E, H, F]
            router = torch.randn(e, cfg.hidden_size, generator=g, dtype=torch.float32)
            out[m + "router"] = (router * router_std).to(fc1.dtype)  # [E, H]
        elif layer not in cfg.moe_layers and not dense:
            raise ValueError(
                f"checkpoint layer {layer} is MoE but model.moe_layers={list(cfg.moe_layers)} "
                "makes it dense (down-cycling is not supported)"
            )
    return out


def sparse_from_dense(weights: dict[str, torch.Tensor], actor, *, seed: int) -> dict:
    """Checkpoint weights completed for ``actor`` (its ``cfg``): MoE upcycled, missing DSA
    indexer weights taken from the actor's seeded initialisation. Dense configs: unchanged."""
    cfg = actor.cfg
    out = upcycle_moe(weights, cfg, seed=seed) if cfg.moe_layers else dict(weights)
    if cfg.dsa_topk > 0:
        own = actor.named_weights()
        out.update({k: v for k, v in own.items() if ".dsa." in k and k not in out})
    return out

"""DSA dense warm-up: train the indexers to match the main attention before sparse training.

DeepSeek V3.2's first DSA stage: attention stays dense, every model parameter but the lightning
indexers is frozen, and each layer's indexer learns ``indexer_kl_loss`` — the KL from the main
attention (summed over heads, L1-normalized over the causal keys) to the softmax of its scores.
A seeded, untrained indexer picks keys at random, so Top-k at a small k throws away the keys the
model needs; after warm-up the Top-k keys are the ones the heads attend to. GLM-5 then freezes the
indexer for RL (``model.dsa_trainable = false``), as the loop here does.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from core.model.dsa_engines import ActorDSA


def actor_indexers(actor: torch.nn.Module) -> list[ActorDSA]:
    """The actor's DSA core-attention modules, in layer order (empty for a dense actor)."""
    return [m for m in actor.modules() if isinstance(m, ActorDSA)]


def warmup_indexers(
    actor,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    lr: float,
) -> list[float]:
    """One Adam step on every layer's indexer per batch; returns the mean per-layer KL per step.

    Args:
        actor: the ``Actor`` (``logits(ids, valid)``), with DSA layers.
        batches: ``(input_ids [B, T], valid [B, T] bool)`` left-padded sequences.
        lr: Adam learning rate of the indexer parameters.

    The other parameters keep their values and their ``requires_grad`` flags; the indexers' flags
    are restored too (frozen indexers stay frozen for RL).
    """
    layers = actor_indexers(actor)
    if not layers:
        raise ValueError("DSA warm-up needs an actor with DSA layers (model.dsa_topk > 0)")
    params = [p for m in layers for p in m.indexer.parameters()]
    flags = {id(p): p.requires_grad for p in actor.parameters()}
    history: list[float] = []
    try:
        for p in actor.parameters():
            p.requires_grad_(False)
        for p in params:
            p.requires_grad_(True)
        opt = torch.optim.Adam(params, lr=lr)
        for m in layers:
            m.warmup = True
        for ids, valid in batches:
            actor.logits(ids, valid)
            loss = torch.stack([m.warmup_loss for m in layers]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            history.append(float(loss.detach()))
    finally:
        for m in layers:
            m.warmup, m.warmup_loss = False, None
        for p in actor.parameters():
            p.requires_grad_(flags[id(p)])
    return history

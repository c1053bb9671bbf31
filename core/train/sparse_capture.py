"""Train vs rollout DSA selections and MoE routes of one GRPO step: capture, align, agree.

Everything is aligned to the trainer's query slots ``t = 0..T-2`` (prediction space [B, T-1]:
slot t's output predicts token t+1); the compared queries are the *action queries*, the
slots whose output predicts an action token (the last prompt token and every response token but
the last). The rollout records one selection per prefill chunk / decode token; it never runs the
last sampled token, so its tensors are shorter and are padded (-1) to T-1. Top-k indices are
converted to positions (slot minus the sample's left-pad offset) so both engines are comparable.
Routing replay (``train.routing_replay``) feeds the rollout's routes to the actor's MoE layers;
slots the rollout never ran get experts 0..k-1 (they only feed outputs the loss never reads).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from core.model.dsa_select import TopkSelection


@dataclass
class SparseStep:
    """One step's aligned records; every tensor is [B, T-1, ...] over query slots."""

    query_mask: torch.Tensor
    """[B, T-1] bool: action queries (compared and recorded)."""
    offset: torch.Tensor
    """[B] int64: left-pad slots of each sample (position = slot - offset)."""
    k: int
    """DSA keys per query (``model.dsa_topk``; 0 without DSA)."""
    topk: dict[int, tuple[TopkSelection, TopkSelection]]
    """layer -> (train, rollout) selections, indices as positions [B, T-1, k], -1 padded."""
    routes: dict[int, tuple[torch.Tensor, torch.Tensor]]
    """MoE layer -> (train, rollout) experts [B, T-1, moe_topk] int64, best first (-1: none)."""

    def topk_equal(self) -> torch.Tensor:
        """[L, B, T-1] bool: train and rollout selected the same set (layers in sorted order)."""
        return torch.stack([tr.indices.eq(ro.indices).all(-1) for tr, ro in self._sorted_topk()])

    def routes_equal(self) -> torch.Tensor:
        """[L, B, T-1] bool: same expert set (order ignored), MoE layers in sorted order."""
        pairs = [self.routes[layer] for layer in sorted(self.routes)]
        return torch.stack([tr.sort(-1).values.eq(ro.sort(-1).values).all(-1) for tr, ro in pairs])

    def metrics(self) -> dict[str, float]:
        """``topk_agreement`` / ``route_agreement``: fraction of (sample, layer, action query)
        with equal sets; a key is present only when the policy has DSA / MoE layers."""
        out: dict[str, float] = {}
        n = max(int(self.query_mask.sum()), 1)
        if self.topk:
            eq = self.topk_equal() & self.query_mask  # [L, B, T-1]
            out["topk_agreement"] = float(eq.sum()) / (n * len(self.topk))
        if self.routes:
            eq = self.routes_equal() & self.query_mask
            out["route_agreement"] = float(eq.sum()) / (n * len(self.routes))
        return out

    def _sorted_topk(self) -> list[tuple[TopkSelection, TopkSelection]]:
        return [self.topk[layer] for layer in sorted(self.topk)]


def _fit(x: torch.Tensor, width: int, fill) -> torch.Tensor:
    """Cut or pad dim 1 of ``x`` [B, W, ...] to ``width`` with ``fill``."""
    if x.shape[1] >= width:
        return x[:, :width]
    pad = x.new_full((x.shape[0], width - x.shape[1], *x.shape[2:]), fill)
    return torch.cat([x, pad], dim=1)


def stack_selections(parts: list[TopkSelection]) -> TopkSelection:
    """Concatenate per-chunk selections [B, Tq_i, k] along the query axis -> [B, sum Tq_i, k]."""
    return TopkSelection(*(torch.cat(field, dim=1) for field in zip(*parts)))


def _positions(sel: TopkSelection, offset: torch.Tensor, width: int) -> TopkSelection:
    """Slot selection [B, W, k] -> position selection [B, width, k] (-1 padding / beyond W)."""
    idx = torch.where(sel.valid, sel.indices - offset[:, None, None], -1)  # [B, W, k]
    return TopkSelection(
        _fit(idx, width, -1), _fit(sel.valid, width, False), _fit(sel.boundary_ties, width, 0)
    )


@contextlib.contextmanager
def routing_replay(actor, traj, *, enabled: bool):
    """While active, the actor's MoE layers use the rollout's routes (slot-aligned).

    The actor's sequence is ``traj``'s [B, T] slots; replay routes are [T, B, k].
    """
    moe = actor.moe_modules() if enabled else {}
    t = traj.ids.shape[1]
    for layer, module in moe.items():
        routes = traj.engine_records["routes"][layer]  # [B, W, k], W <= T
        filler = torch.arange(module.topk, dtype=routes.dtype)  # slots the rollout never ran
        full = _fit(routes, t, 0)
        full[:, routes.shape[1] :] = filler
        module.replay_routes = full.transpose(0, 1).contiguous()  # [T, B, k]
    try:
        yield
    finally:
        for module in moe.values():
            module.replay_routes = None


def capture_sparse(actor, traj) -> SparseStep | None:
    """Read the actor's last selections / routes (call right after the training forward, before
    anything reruns the actor) and align them with the rollout's. None for a dense policy, or when
    the rollout kept no per-chunk records (multi-turn trajectories)."""
    cfg = actor.cfg
    if (cfg.dsa_topk == 0 and not cfg.moe_layers) or not traj.engine_records:
        return None
    query_mask = (traj.generated & traj.train_valid)[:, 1:]  # [B, T-1] action queries
    width = query_mask.shape[1]  # T-1
    offset = (~traj.valid[:, : traj.n_prompt]).sum(dim=1)  # [B] left-pad slots
    rb_topk, rb_routes = traj.engine_records["topk"], traj.engine_records["routes"]
    topk = {}
    if cfg.dsa_topk > 0:
        for layer, attn in enumerate(actor.core_attentions()):
            train = TopkSelection(*(x.detach() for x in attn.last_selection))
            rollout = stack_selections(rb_topk[layer])
            topk[layer] = (_positions(train, offset, width), _positions(rollout, offset, width))
    routes = {
        layer: (_fit(m.last_routes.transpose(0, 1), width, -1), _fit(rb_routes[layer], width, -1))
        for layer, m in actor.moe_modules().items()
    }
    return SparseStep(query_mask.clone(), offset, cfg.dsa_topk, topk, routes)

"""Sparse attention and MoE telemetry of one step: train vs rollout capture, and their rows.

Train vs rollout DSA selections and MoE routes of one GRPO step: capture, align, agree.

Everything is aligned to the trainer's query slots ``t = 0..T-2`` (prediction space [B, T-1]:
slot t's output predicts token t+1); the compared queries are the *action queries*, the
slots whose output predicts an action token (the last prompt token and every response token but
the last). The rollout records one selection per prefill chunk / decode token; it never runs the
last sampled token, so its tensors are shorter and are padded (-1) to T-1. Top-k indices are
converted to positions (slot minus the sample's left-pad offset) so both engines are comparable.
Routing replay (``train.routing_replay``) feeds the rollout's routes to the actor's MoE layers;
slots the rollout never ran get experts 0..k-1 (they only feed outputs the loss never reads).

Telemetry rows of DSA Top-k selections (``topk``) and MoE routes (``moe_routes``), both engines.

One row per (engine, layer, sample, action query) of a ``SparseStep``; ``pos`` is the query's
position (its output predicts the action token at ``pos + 1``). ``topk`` rows carry the full
index list (positions, ascending) only for samples kept by the telemetry sampling policy
(``keep``); every other row has an empty list and only ``index_hash`` / ``boundary_ties``.
``moe_routes`` rows exist only for kept samples. Built with boolean indexing, no per-row Python.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from core.model.dsa_select import TopkSelection, index_hash
from observability.enums import ENGINES


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


ENGINE_CODES = torch.tensor([ENGINES.index("train"), ENGINES.index("rollout")])
"""``engine`` enum codes of the (train, rollout) pair members."""


def _grid(sparse: SparseStep, layers: list[int]) -> dict[str, torch.Tensor]:
    """Row coordinates of the [2, L, B, T-1] grid (engine, layer, sample, slot) under the mask."""
    b, t = sparse.query_mask.shape
    mask = sparse.query_mask[None, None].expand(2, len(layers), b, t)  # [2, L, B, T-1]
    e, li, bi, ti = (
        x[mask]
        for x in torch.meshgrid(
            torch.arange(2),
            torch.tensor(layers, dtype=torch.int64),
            torch.arange(b),
            torch.arange(t),
            indexing="ij",
        )
    )
    return {"mask": mask, "engine": e, "layer": li, "sample": bi, "pos": ti - sparse.offset[bi]}


def _lists(values: torch.Tensor, present: torch.Tensor) -> np.ma.MaskedArray:
    """Rows of ``values`` [N, k] keeping the ``present`` [N, k] entries: a 2-D masked array whose
    masked entries the sink leaves out of each row's list."""
    return np.ma.masked_array(values.numpy(), mask=~present.numpy())


def topk_rows(*, step: int, sample_ids: torch.Tensor, sparse: SparseStep, keep: np.ndarray) -> dict:
    """Columns of the ``topk`` table.

    Args:
        sample_ids: [B] int64; sparse: the step's aligned selections; keep: [B] bool.
    """
    layers = sorted(sparse.topk)
    g = _grid(sparse, layers)
    pairs = [sparse.topk[layer] for layer in layers]
    idx = torch.stack([torch.stack([p[e].indices for p in pairs]) for e in (0, 1)])
    ties = torch.stack([torch.stack([p[e].boundary_ties for p in pairs]) for e in (0, 1)])
    idx, ties = idx[g["mask"]], ties[g["mask"]]  # [N, k], [N]
    valid = idx >= 0
    kept = torch.as_tensor(keep, dtype=torch.bool)[g["sample"]]  # [N]
    n = idx.shape[0]
    return {
        "step": np.full(n, step, dtype=np.int64),
        "sample_id": sample_ids[g["sample"]].numpy(),
        "layer": g["layer"].numpy().astype(np.int32),
        "pos": g["pos"].numpy().astype(np.int32),
        "engine": ENGINE_CODES[g["engine"]].numpy(),
        "k": np.full(n, sparse.k, dtype=np.int32),
        "indices": _lists(idx.to(torch.int32), valid & kept[:, None]),
        "index_hash": index_hash(idx, valid).numpy(),
        "boundary_ties": ties.numpy().astype(np.int32),
    }


def route_rows(
    *, step: int, sample_ids: torch.Tensor, sparse: SparseStep, keep: np.ndarray
) -> dict:
    """Columns of the ``moe_routes`` table (kept samples only; experts best first)."""
    layers = sorted(sparse.routes)
    g = _grid(sparse, layers)
    experts = torch.stack([torch.stack([sparse.routes[la][e] for la in layers]) for e in (0, 1)])
    experts = experts[g["mask"]]  # [N, k]
    kept = torch.as_tensor(keep, dtype=torch.bool)[g["sample"]]  # [N]
    kept &= (experts >= 0).all(dim=-1)  # a slot the rollout never ran (re-tokenized response)
    return {
        "step": np.full(int(kept.sum()), step, dtype=np.int64),
        "sample_id": sample_ids[g["sample"]][kept].numpy(),
        "layer": g["layer"][kept].numpy().astype(np.int32),
        "pos": g["pos"][kept].numpy().astype(np.int32),
        "engine": ENGINE_CODES[g["engine"][kept]].numpy(),
        "experts": experts[kept].numpy().astype(np.int16),
    }


def sparse_rows(
    sparse: SparseStep, *, step: int, sample_ids: torch.Tensor, keep: np.ndarray
) -> dict[str, dict]:
    """The step's ``topk`` and ``moe_routes`` columns (tables with rows only)."""
    out = {}
    if sparse.topk:
        out["topk"] = topk_rows(step=step, sample_ids=sample_ids, sparse=sparse, keep=keep)
    if sparse.routes and keep.any():
        out["moe_routes"] = route_rows(step=step, sample_ids=sample_ids, sparse=sparse, keep=keep)
    return out

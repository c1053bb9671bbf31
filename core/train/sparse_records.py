"""Telemetry rows of DSA Top-k selections (``topk``) and MoE routes (``moe_routes``), both engines.

One row per (engine, layer, sample, action query) of a ``SparseStep``; ``pos`` is the query's
position (its output predicts the action token at ``pos + 1``). ``topk`` rows carry the full
index list (positions, ascending) only for samples kept by the telemetry sampling policy
(``keep``); every other row has an empty list and only ``index_hash`` / ``boundary_ties``.
``moe_routes`` rows exist only for kept samples. Built with boolean indexing, no per-row Python.
"""

from __future__ import annotations

import numpy as np
import torch

from core.model.dsa_select import index_hash
from core.train.sparse_capture import SparseStep
from observability.enums import ENGINES

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

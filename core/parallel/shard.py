"""Full megatron weights <-> one tensor-parallel rank's shards, in megatron's own layouts.

Which tensors are split, and along which dim, follows megatron-core's parallel layers (a test
checks it against their ``tensor_model_parallel`` / ``partition_dim`` attributes):
- dim 0 (``ColumnParallelLinear``, ``VocabParallelEmbedding``): the word embedding, the output
  head, ``linear_qkv`` weight and bias (its rows are grouped per query group, so a contiguous
  split gives each rank whole groups: needs num_kv_heads % TP == 0), and ``linear_fc1``. The
  gated ``linear_fc1`` is cat(gate, up) in full but cat(gate_r, up_r) on rank r (megatron's GLU
  halves the *local* output), so it is split per half and re-joined.
- dim 1 (``RowParallelLinear``): ``linear_proj`` and ``linear_fc2``.
- everything else (RMSNorm weights, q/k norms) is replicated.
Sharding and gathering are exact (slices and concatenations).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from core.model.config import ModelConfig

_DIM0 = ("embedding.word_embeddings.weight", "output_layer.weight")
_DIM0_SUFFIX = ("linear_qkv.weight", "linear_qkv.bias")
_DIM1_SUFFIX = ("linear_proj.weight", "linear_fc2.weight")
_GLU_SUFFIX = "linear_fc1.weight"


def partition(name: str) -> int | None:
    """The dim along which tensor ``name`` is split across TP ranks (None: replicated)."""
    if name in _DIM0 or name.endswith(_DIM0_SUFFIX) or name.endswith(_GLU_SUFFIX):
        return 0
    if name.endswith(_DIM1_SUFFIX):
        return 1
    return None


def check_divisible(cfg: ModelConfig, tp: int) -> None:
    """``ValueError`` naming the field unless ``cfg`` splits evenly over ``tp`` ranks."""
    for field in ("vocab_size", "num_heads", "num_kv_heads", "ffn_hidden_size"):
        if getattr(cfg, field) % tp:
            raise ValueError(f"model.{field}={getattr(cfg, field)} is not divisible by TP={tp}")


def shard_weights(
    full: dict[str, torch.Tensor], cfg: ModelConfig, *, rank: int, size: int
) -> dict[str, torch.Tensor]:
    """Rank ``rank`` of ``size``'s shards of the full megatron weights (new contiguous tensors)."""
    check_divisible(cfg, size)
    out = {}
    for name, t in full.items():
        dim = partition(name)
        if dim is None:
            out[name] = t.clone()
        elif name.endswith(_GLU_SUFFIX):
            gate, up = t.chunk(2, dim=0)
            out[name] = torch.cat([gate.chunk(size)[rank], up.chunk(size)[rank]]).contiguous()
        else:
            out[name] = t.chunk(size, dim=dim)[rank].contiguous()
    return out


def unshard_weights(shards: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The full megatron weights from every rank's shards (rank order); inverse of ``shard``.

    Replicated tensors are taken from rank 0 (a test checks the ranks agree bitwise)."""
    out = {}
    for name, t0 in shards[0].items():
        parts = [s[name] for s in shards]
        dim = partition(name)
        if dim is None:
            out[name] = t0.clone()
        elif name.endswith(_GLU_SUFFIX):
            halves = [p.chunk(2, dim=0) for p in parts]
            out[name] = torch.cat([h[0] for h in halves] + [h[1] for h in halves])
        else:
            out[name] = torch.cat(parts, dim=dim)
    return out


def gather_weights(local: dict[str, torch.Tensor], group) -> dict[str, torch.Tensor]:
    """All-gather every rank's shards over ``group`` and unshard: the full weights on each rank."""
    size = dist.get_world_size(group)
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(size)]
    for name in sorted(local):
        t = local[name].detach().contiguous()
        parts = [torch.empty_like(t) for _ in range(size)]
        dist.all_gather(parts, t, group=group)
        for r in range(size):
            shards[r][name] = parts[r]
    return unshard_weights(shards)

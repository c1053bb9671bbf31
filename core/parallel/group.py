"""Process groups for tensor parallelism on the CPU: gloo under ``torchrun``, megatron's state.

``init_tensor_parallel(tp)`` joins the ``torchrun`` world (``env://``: RANK, WORLD_SIZE,
MASTER_ADDR/PORT) with the gloo backend and hands the layout to megatron-core's
``parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)``; everything after
that (the actor's parallel layers, vocab-parallel cross-entropy) reads megatron's groups.
Simplification: tensor parallelism only (no pipeline, context or expert parallelism); the data-
parallel size is WORLD_SIZE / tp and every data-parallel replica sees the same batch.
"""

from __future__ import annotations

import os

import torch.distributed as dist
from megatron.core import parallel_state


def init_tensor_parallel(tp: int) -> tuple[int, int]:
    """Initialize gloo (from the ``torchrun`` environment) and megatron's TP groups.

    Returns (tp rank, tp size). Raises ``ValueError`` if ``tp`` does not divide WORLD_SIZE, or
    ``RuntimeError`` if the process was not started by ``torchrun`` (no RANK/WORLD_SIZE).
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise RuntimeError("tensor parallelism needs torchrun (RANK / WORLD_SIZE unset)")
    world = int(os.environ["WORLD_SIZE"])
    if tp < 1 or world % tp:
        raise ValueError(f"tensor parallel size {tp} must divide WORLD_SIZE={world}")
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="env://")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
    return tp_rank(), tp_size()


def tp_rank() -> int:
    """This process's rank in its tensor-parallel group (0 when megatron is not initialized)."""
    if not parallel_state.model_parallel_is_initialized():
        return 0
    return parallel_state.get_tensor_model_parallel_rank()


def tp_size() -> int:
    """The tensor-parallel group size (1 when megatron is not initialized)."""
    if not parallel_state.model_parallel_is_initialized():
        return 1
    return parallel_state.get_tensor_model_parallel_world_size()


def tp_group():
    """megatron's tensor-parallel process group."""
    return parallel_state.get_tensor_model_parallel_group()

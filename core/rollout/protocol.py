"""The rollout-engine protocol: what the trainer (and a teacher) may ask of any inference engine.

An engine serves one policy (``cfg``) at one ``policy_version``:
- **Token in, token out.** ``generate`` takes token-ID prompts (never text) and returns a
  ``RolloutBatch``: the exact prompt IDs (left-padded), the sampled IDs, and for each sampled
  token its *processed* log-prob — the log-prob under the distribution it was sampled from
  (temperature, top-k/top-p renormalization), the ``processed`` mode of ``SamplingParams``.
- **Prefill scoring.** ``prefill_and_score`` takes exact token-ID sequences and returns the
  teacher-forced log-prob of every token after the first, at a temperature: what a teacher engine
  serves for distillation, and what the trainer's recompute must agree with.
- **Versioned weight updates.** ``load_weights(weights, version)`` installs a full payload in the
  engine's own layout, float tensors or quantized linears (objects with ``.linear(x, bias)``), and
  makes ``version`` current; every later output carries it. A version lower than the installed one
  is refused (a stale update must never overwrite a newer policy).
- **KV cache lifecycle.** Caches live only while a request runs: ``kv_cache_bytes`` is 0 whenever
  the engine is idle (also after a failed request); ``kv_cache_peak_bytes`` is the largest live
  amount since the last ``reset_kv_cache``, which also drops anything cached across requests. A
  weight update invalidates every cached key/value: outputs after it equal a fresh engine's.
The conformance suite (``tests/core/rollout/test_protocol_conformance.py``) checks each clause on
every implementation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from core.model.config import ModelConfig
from core.rollout.sampling import SamplingParams


@dataclass
class RolloutBatch:
    """What an engine hands back for a batch of prompts (tensors on the CPU).

    prompt_ids [B, Tp] left-padded, prompt_valid [B, Tp] bool, response_ids [B, Tr] (pad after
    the stop), response_mask [B, Tr] bool (True on generated tokens incl. EOS), logprobs [B, Tr]
    fp32 (0 where masked), finished [B] bool (EOS seen), routes {layer: [B, Tp+Tr, k]},
    topk {layer: TopkSelection-like record} from the DSA layers.
    """

    prompt_ids: torch.Tensor
    prompt_valid: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    finished: torch.Tensor
    policy_version: int
    routes: dict = field(default_factory=dict)
    topk: dict = field(default_factory=dict)

    def finish_reasons(self) -> list[str]:
        return ["stop" if f else "length" for f in self.finished.tolist()]

    def sample(self, i: int) -> dict:
        """Per-sample token-out view: token IDs, log-probs, finish reason, policy version."""
        m = self.response_mask[i]
        return {
            "token_ids": self.response_ids[i][m].tolist(),
            "logprobs": self.logprobs[i][m].tolist(),
            "finish_reason": self.finish_reasons()[i],
            "policy_version": self.policy_version,
        }


@runtime_checkable
class RolloutEngineProtocol(Protocol):
    """Any rollout engine (embedded, vLLM, SGLang...) the loop and a teacher can drive."""

    cfg: ModelConfig
    policy_version: int

    def load_weights(self, weights: Mapping[str, object], version: int) -> None:
        """Install a full payload (engine layout) as ``version`` (>= the installed version)."""
        ...

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        *,
        eos_id: int,
        pad_id: int,
        generator: torch.Generator | None = None,
        greedy: bool = False,
    ) -> RolloutBatch:
        """Sample responses to token-ID prompts; processed log-probs of the sampled tokens."""
        ...

    def prefill_and_score(
        self, sequences: Sequence[Sequence[int]], *, temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Teacher-forced log-probs of ``seq[1:]`` given the prefix, [len(seq) - 1] fp32 each."""
        ...

    def kv_cache_bytes(self) -> int:
        """Bytes of KV cache held now (0 when idle)."""
        ...

    def kv_cache_peak_bytes(self) -> int:
        """Largest ``kv_cache_bytes`` since the last ``reset_kv_cache``."""
        ...

    def reset_kv_cache(self) -> None:
        """Drop every cached key/value kept across requests and reset the peak."""
        ...

"""Sampling parameters and the token sampler of the embedded rollout engine.

Log-prob modes (as in vLLM's ``logprobs_mode``): ``processed`` reports the log-prob of each
sampled token under the distribution it was actually sampled from (after temperature and
top-k/top-p renormalization); ``raw`` reports the log-softmax of the untempered logits — the bug
class the ``logprob-mode-bug`` scenario injects. The trainer recomputes with the same
temperature; with top-k/top-p truncation the rollout's processed log-probs are renormalized over
the kept set while the trainer's are not, a real mismatch the telemetry shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOGPROB_MODES = ("processed", "raw")


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """Softmax temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]."""
    top_k: int = 0
    """Keep the k most likely tokens (0 = all)."""
    max_new_tokens: int = 8
    """Response length limit (the ``length`` finish reason)."""
    logprob_mode: str = "processed"
    """``processed`` (correct) or ``raw`` (untempered: a fault to inject)."""

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"rollout.temperature={self.temperature} must be > 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"rollout.top_p={self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError(f"rollout.top_k={self.top_k} must be >= 0")
        if self.max_new_tokens < 1:
            raise ValueError(f"rollout.max_new_tokens={self.max_new_tokens} must be >= 1")
        if self.logprob_mode not in LOGPROB_MODES:
            raise ValueError(f"rollout.logprob_mode={self.logprob_mode!r} not in {LOGPROB_MODES}")


def sample_tokens(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    greedy: bool = False,
    uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    Args:
        logits: [B, V] fp32 next-token logits.
        uniforms: [B] fp32 in [0, 1), optional: each row's own random number, drawn by inverse
            CDF (so a row's token does not depend on which other rows share its batch); else
            ``torch.multinomial`` with ``generator``.
    Returns:
        (tokens [B] int64, logprobs [B] fp32 under ``params.logprob_mode``).
    """
    scaled = logits / params.temperature
    if params.top_k > 0:
        kth = scaled.topk(min(params.top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = scaled.sort(dim=-1, descending=True)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = (cum - sorted_logits.softmax(dim=-1)) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    logp = scaled.log_softmax(dim=-1)
    if greedy:
        tokens = logp.argmax(dim=-1)
    elif uniforms is not None:
        cdf = logp.exp().cumsum(dim=-1)  # [B, V]
        target = (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)  # [B, 1]
        tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1)
        tokens = tokens.clamp_max(logits.shape[-1] - 1)
    else:
        tokens = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    if params.logprob_mode == "raw":
        logp = logits.log_softmax(dim=-1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)

"""``rollout.engine``: the name in a config -> an inference engine behind the rollout protocol.

``embedded`` is closedloop's own engine (``core.rollout.engine``); ``vllm`` is vLLM
(``core.rollout.vllm_engine``), imported only when asked for, so a machine without vLLM runs
everything else and ``rollout.engine = "vllm"`` there fails with the command that installs it.
"""

from __future__ import annotations

from core.model.config import ModelConfig
from core.rollout.engine import RolloutEngine


def build_engine(
    name: str,
    cfg: ModelConfig,
    *,
    precision: str,
    logprob_mode: str = "processed",
    instance: str = "shared",
):
    """An engine for ``cfg`` at ``precision`` (``fp32`` | ``bf16``) with no weights yet.

    ``logprob_mode`` fixes vLLM's per-engine ``logprobs_mode``; the embedded engine reads the
    mode from each request's ``SamplingParams``. ``instance`` names a vLLM engine of its own
    (``core.rollout.vllm_engine``); embedded engines are always their own.
    """
    if name == "embedded":
        return RolloutEngine(cfg, precision=precision)
    if name == "vllm":
        from core.rollout.vllm_engine import VllmEngine

        return VllmEngine(cfg, precision=precision, logprob_mode=logprob_mode, instance=instance)
    raise ValueError(f"rollout.engine={name!r} not in ['embedded', 'vllm']")

"""Teacher settings (the ``[teachers]`` config section): which checkpoint scores which domain, and
what a teacher sends back per scored position."""

from __future__ import annotations

from dataclasses import dataclass, field

from observability.enums import TEACHER_PAYLOADS as PAYLOADS
from observability.enums import TEACHER_SOURCES as SOURCES

# Payload modes: the sampled token's log-prob; the Top-k ids + log-probs (and the sampled
# token's log-prob); the whole vocabulary's log-probs.
PRECISIONS = ("fp32", "bf16")
WILDCARD = "*"
"""The route key matching every domain without a route of its own."""


@dataclass(frozen=True)
class TeacherConfig:
    routes: dict[str, str] = field(default_factory=dict)
    """Domain -> teacher checkpoint directory (relative paths from the repo root), e.g.
    ``{ addition = "runs/experts/addition" }``. Each sample is hard-routed to its domain's
    teacher; ``"*"`` routes every other domain. Empty: the run has no teacher."""
    payload: str = "sampled"
    """What a teacher sends per scored position: ``sampled`` | ``topk`` | ``full``."""
    topk: int = 16
    """K of the ``topk`` payload (>= 1, at most the vocabulary)."""
    precision: str = "fp32"
    """Teacher engine numerics: ``fp32`` | ``bf16``."""
    engine: str = "embedded"
    """Teacher inference engine: ``embedded`` | ``vllm`` (each teacher its own vLLM engine;
    scores from vLLM's ``prompt_logprobs``)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Domain (or ``"*"``) -> the declared source of its teacher: ``same`` (forked from the
    student's SFT base, the default for every route) or ``off`` (another lineage, on purpose);
    the ``teacher_provenance`` contract checks it against the checkpoints."""

    def __post_init__(self) -> None:
        if self.payload not in PAYLOADS:
            raise ValueError(f"teachers.payload={self.payload!r} not in {list(PAYLOADS)}")
        if not (isinstance(self.topk, int) and self.topk >= 1):
            raise ValueError(f"teachers.topk={self.topk!r} must be an int >= 1")
        if self.engine not in ("embedded", "vllm"):
            raise ValueError(f"teachers.engine={self.engine!r} not in ['embedded', 'vllm']")
        if self.precision not in PRECISIONS:
            raise ValueError(f"teachers.precision={self.precision!r} not in {list(PRECISIONS)}")
        for domain, source in self.sources.items():
            if source not in SOURCES:
                raise ValueError(f"teachers.sources[{domain!r}]={source!r} not in {list(SOURCES)}")
        for domain, path in self.routes.items():
            if not domain or not isinstance(path, str) or not path:
                raise ValueError(
                    f"teachers.routes[{domain!r}]={path!r}: expected domain = checkpoint dir"
                )

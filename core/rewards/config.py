"""Reward mixing settings (the ``[rewards]`` config section): weights, penalties, reward models."""

from __future__ import annotations

from dataclasses import dataclass, field

SCORERS = ("format", "orm", "judge")
"""Reward components computed by ``core.rewards`` (besides the environment's own, e.g.
``verifier``)."""
PENALTIES = ("length",)
"""Penalty terms P_j (subtracted with their λ_j)."""


@dataclass(frozen=True)
class RewardConfig:
    weights: dict[str, float] = field(default_factory=dict)
    """Component -> w_k, e.g. ``{ verifier = 1.0, judge = 0.5 }``: the environment's components
    (``verifier``) and the scorers ``format`` / ``orm`` / ``judge``. Empty: every environment
    component with weight 1 (the plain verifier reward). Environment components not listed are
    recorded with weight 0."""
    penalties: dict[str, float] = field(default_factory=dict)
    """Penalty -> λ_j (>= 0): ``length`` (generated tokens beyond ``length_budget``)."""
    length_budget: int = 4
    """Generated tokens (EOS included) a response may use before ``length`` counts (>= 1)."""
    format_pattern: str = "-?[0-9]+"
    """Regular expression the whole response must match for ``format`` = 1 (it must also end on
    EOS); ``[0-9]`` rather than ``\\d`` keeps it ASCII."""
    orm: str = ""
    """Outcome reward model directory (``closedloop rewards train-orm``); needed by ``orm``."""
    judge: str = ""
    """Generative judge checkpoint (``closedloop rewards train-judge``); needed by ``judge``."""
    judge_max_tokens: int = 4
    """Tokens the judge may write for its verdict (>= 1)."""

    def __post_init__(self) -> None:
        for name, w in self.weights.items():
            if not w >= 0:
                raise ValueError(f"rewards.weights[{name!r}]={w} must be >= 0")
        for name, lam in self.penalties.items():
            if name not in PENALTIES:
                raise ValueError(f"rewards.penalties[{name!r}]: not in {list(PENALTIES)}")
            if not lam >= 0:
                raise ValueError(f"rewards.penalties[{name!r}]={lam} must be >= 0")
        for scorer in ("orm", "judge"):
            if scorer in self.weights and not getattr(self, scorer):
                raise ValueError(
                    f"rewards.weights names {scorer!r}: set rewards.{scorer} to its checkpoint"
                )
        if self.length_budget < 1:
            raise ValueError(f"rewards.length_budget={self.length_budget} must be >= 1")
        if self.judge_max_tokens < 1:
            raise ValueError(f"rewards.judge_max_tokens={self.judge_max_tokens} must be >= 1")

    @property
    def mixed(self) -> bool:
        """Anything beyond the environment's own reward with weight 1."""
        return bool(self.weights or self.penalties)

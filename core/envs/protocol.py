"""The environment protocol: the one interface between the rollout and a task world.

An environment is one episode. ``reset()`` returns the prompt's token ids; ``step(action_ids)``
receives the exact ids the policy generated for one turn and answers with the observation ids to
append before the next turn, or ``done`` with the episode's reward components and, when the
episode failed for a reason that is not the policy's (a tool crash, a timeout), a failure reason.
Environments speak token ids, never text, so the history a policy sees is exactly the ids it and
the environment produced (TITO across turns). An ``EnvSource`` draws episodes for training and a
fixed held-out set for evaluation; the run config selects one by name (``env.name``).
Simplification: rewards arrive only at the end of an episode (outcome rewards).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class StepResult:
    """What an environment answers to one turn of actions."""

    observation: tuple[int, ...] = ()
    """Token ids the environment appends before the policy's next turn (empty when done)."""
    done: bool = False
    """The episode is over: no further turn."""
    rewards: Mapping[str, float] = field(default_factory=dict)
    """Reward components by name (only when ``done``), e.g. ``{"verifier": 1.0}``."""
    failure_reason: str | None = None
    """Why the episode failed, when it did: a verdict (``wrong``, ``truncated``) or an
    environment failure (``env_timeout``, ``env_crash``); None when it succeeded."""
    env_failure: bool = False
    """The failure is the environment's, not the policy's: the sample leaves the batch."""
    latency_s: float = 0.0
    """Wall time the environment spent on this turn (a tool call's latency; telemetry)."""
    event: str | None = None
    """What the environment did with the turn, for telemetry (e.g. ``call``, ``answer``,
    ``env_timeout``); None when it has nothing to say."""


@runtime_checkable
class Environment(Protocol):
    """One episode of a task world."""

    domain: str
    """Task domain (telemetry ``samples.domain``; teacher routing keys on it)."""
    prompt_id: str
    """Stable id of the episode's prompt (equal prompts share it)."""

    def reset(self) -> list[int]:
        """Token ids of the prompt (the first turn's context)."""
        ...

    def step(self, action_ids: list[int], *, finished: bool) -> StepResult:
        """Consume one turn of generated ids (``finished``: the turn ended on EOS)."""
        ...

    def render(self, ids: list[int]) -> str:
        """Text of the episode's generated ids, for telemetry (``samples.response_text``)."""
        ...


@runtime_checkable
class Forkable(Protocol):
    """An environment that can start a fresh, independent episode of the same prompt (what the
    environment-failure filter uses to refill a group)."""

    def fork(self, seed: int) -> Environment:
        """A new episode of this prompt; ``seed`` drives its own randomness (latency, faults)."""
        ...


@runtime_checkable
class EnvSource(Protocol):
    """Draws episodes of one environment kind."""

    name: str
    """Registry name (``env.name``)."""

    def sample(self, n: int, *, seed: int, repeats: int = 1) -> list[Environment]:
        """``n`` prompts from the seeded stream ``seed`` (repeats possible), each as ``repeats``
        independent episodes, adjacent (group-major: a GRPO group per prompt)."""
        ...

    def eval_set(self, n: int) -> list[Environment]:
        """The fixed held-out episodes (never drawn for training)."""
        ...


def render_text(tok, ids: list[int]) -> str:
    """The text of ``ids`` for humans and judges: decoded by ``tok`` without a trailing EOS."""
    ids = list(ids)
    if ids and ids[-1] == tok.eos_id:
        ids = ids[:-1]
    return tok.decode(ids)

"""``env.name`` -> the environment source it selects (the one place a config string picks one)."""

from __future__ import annotations

from dataclasses import dataclass

from core.envs.protocol import EnvSource
from core.tokenizer.tokenizer import Tokenizer

ENV_NAMES = ("arithmetic",)


@dataclass(frozen=True)
class EnvConfig:
    """Which environment the run trains and evaluates on (the ``[env]`` config section)."""

    name: str = "arithmetic"
    """Environment kind: ``arithmetic`` (single-turn, ``[task]`` settings)."""

    def __post_init__(self) -> None:
        if self.name not in ENV_NAMES:
            raise ValueError(f"env.name={self.name!r} not in {list(ENV_NAMES)}")


def make_env_source(cfg, *, tok: Tokenizer) -> EnvSource:
    """The source ``cfg.env.name`` selects, built from the run config ``cfg``."""
    if cfg.env.name == "arithmetic":
        from core.envs.arithmetic import ArithmeticSource

        return ArithmeticSource(cfg.task, tok)
    raise ValueError(f"env.name={cfg.env.name!r} not in {list(ENV_NAMES)}")

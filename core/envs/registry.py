"""``env.name`` -> the environment source it selects (the one place a config string picks one)."""

from __future__ import annotations

from dataclasses import dataclass

from core.envs.protocol import EnvSource
from core.tokenizer.tokenizer import Tokenizer

ENV_NAMES = ("arithmetic", "tool", "longhorizon")


@dataclass(frozen=True)
class EnvConfig:
    """Which environment the run trains and evaluates on (the ``[env]`` config section)."""

    name: str = "arithmetic"
    """Environment kind: ``arithmetic`` (single-turn, ``[task]`` settings) | ``tool`` (multi-turn
    calculator calls, ``[tool]`` settings) | ``longhorizon`` (multi-turn recall that outgrows
    the context, ``[longhorizon]`` settings)."""

    def __post_init__(self) -> None:
        if self.name not in ENV_NAMES:
            raise ValueError(f"env.name={self.name!r} not in {list(ENV_NAMES)}")


def make_env_source(cfg, *, tok: Tokenizer) -> EnvSource:
    """The source ``cfg.env.name`` selects, built from the run config ``cfg``."""
    if cfg.env.name == "arithmetic":
        from core.envs.arithmetic import ArithmeticSource

        return ArithmeticSource(cfg.task, tok)
    if cfg.env.name == "tool":
        from core.envs.tool import ToolSource

        return ToolSource(cfg.tool, tok)
    if cfg.env.name == "longhorizon":
        from core.envs.longhorizon import LongHorizonSource

        return LongHorizonSource(cfg.longhorizon, tok)
    raise ValueError(f"env.name={cfg.env.name!r} not in {list(ENV_NAMES)}")


def chat_template_rev(env_name: str) -> str:
    """The chat-template revision episodes of ``env_name`` are rendered with."""
    if env_name == "tool":
        from core.envs.tool_protocol import TOOL_TEMPLATE_REV

        return TOOL_TEMPLATE_REV
    from core.tokenizer.chat_template import CHAT_TEMPLATE_REV

    return CHAT_TEMPLATE_REV

"""Run configuration: a TOML file of sections, each mapped onto one component's frozen dataclass.

``[model]`` → ``ModelConfig``, ``[rollout]`` → ``RolloutConfig``, ``[algorithm]`` →
``AlgorithmConfig``, ``[optim]`` → ``OptimConfig``, ``[train]`` → ``TrainConfig``, ``[env]`` →
``EnvConfig``, ``[task]`` → ``ArithmeticConfig``, ``[tool]`` → ``ToolConfig``, ``[telemetry]`` →
``TelemetryConfig``, ``[quant]`` → ``QuantConfig``, ``[critic]`` → ``CriticConfig``,
``[compaction]`` → ``CompactionConfig``, ``[longhorizon]`` → ``LongHorizonConfig``, ``[teachers]``
→ ``TeacherConfig``, ``[rewards]`` → ``RewardConfig``. ``--set section.key=value`` overrides use
TOML value syntax (tables inline: ``key={a = 1}``). Unknown sections or keys, wrong types
and out-of-range values are errors naming the key and the allowed values; nothing else reads raw
dicts.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.algorithms.config import AlgorithmConfig
from core.envs.longhorizon import LongHorizonConfig
from core.envs.registry import EnvConfig
from core.envs.tool import ToolConfig
from core.loops.config import OptimConfig, TrainConfig
from core.loops.critic import CriticConfig
from core.model.config import ModelConfig
from core.quant.presets import QuantConfig
from core.rewards.config import RewardConfig
from core.rollout.compaction import CompactionConfig
from core.rollout.config import RolloutConfig
from core.tasks.arithmetic import ArithmeticConfig
from core.teachers.config import TeacherConfig
from observability.config import TelemetryConfig

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "grpo_tiny.toml"


class ConfigError(ValueError):
    """A config key, type or value is not allowed (the message names it)."""


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    task: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    tool: ToolConfig = field(default_factory=ToolConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    quant: QuantConfig = field(default_factory=QuantConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    longhorizon: LongHorizonConfig = field(default_factory=LongHorizonConfig)
    teachers: TeacherConfig = field(default_factory=TeacherConfig)
    rewards: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        a, t = self.algorithm, self.teachers
        if self.rollout.engine == "vllm":
            if self.model.dsa_topk > 0:
                raise ConfigError(
                    f"rollout.engine='vllm' with model.dsa_topk={self.model.dsa_topk}: DSA Top-k "
                    "attention stays on the embedded engine (vLLM's sparse-attention kernels are "
                    "GPU-only); set rollout.engine='embedded'"
                )
            if self.model.moe_layers:
                raise ConfigError(
                    f"rollout.engine='vllm' with model.moe_layers={list(self.model.moe_layers)}: "
                    "the MoE actor has no Hugging Face export vLLM loads here; set "
                    "rollout.engine='embedded'"
                )
        if a.uses_teacher and not t.routes:
            raise ConfigError(
                f"algorithm.advantage={a.advantage!r} needs teachers: set teachers.routes"
            )
        if a.uses_teacher and a.opd_loss == "topk" and t.payload == "sampled":
            raise ConfigError(
                "algorithm.opd_loss='topk' needs teachers.payload 'topk' or 'full' (a sampled "
                "payload carries no distribution)"
            )
        if (self.rollout.mode == "async" or a.name != "grpo") and (t.routes or self.rewards.mixed):
            raise ConfigError(
                "teachers.routes and rewards.weights / rewards.penalties are applied by the sync "
                f"GRPO loop only: they need rollout.mode='sync' and algorithm.name='grpo' (not "
                f"{self.rollout.mode!r}, {a.name!r})"
            )

    def to_dict(self) -> dict:
        return {f.name: _section_dict(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(RunConfig)}  # type: ignore[misc]


def _section_dict(obj) -> dict:
    d = dataclasses.asdict(obj)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def _coerce(section: str, key: str, value: Any, typ: Any) -> Any:
    name = f"{section}.{key}"
    origin = typing.get_origin(typ)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None:
            return None
        return _coerce(section, key, value, args[0])
    if typ is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}={value!r}: expected true or false")
        return value
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}={value!r}: expected an integer")
        return value
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{name}={value!r}: expected a number")
        return float(value)
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name}={value!r}: expected a string")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name}={value!r}: expected a list")
        (inner, *_rest) = typing.get_args(typ)
        return tuple(_coerce(section, key, v, inner) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name}={value!r}: expected a table, e.g. {{ name = value }}")
        _, inner = typing.get_args(typ)
        return {str(k): _coerce(section, f"{key}.{k}", v, inner) for k, v in value.items()}
    return value


def build_section(section: str, values: dict) -> Any:
    cls = SECTIONS[section]
    hints = typing.get_type_hints(cls)
    allowed = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in allowed:
            raise ConfigError(f"unknown config key {section}.{key}; allowed: {', '.join(allowed)}")
        kwargs[key] = _coerce(section, key, value, hints[key])
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from e


def parse_override(text: str) -> tuple[str, str, Any]:
    """``section.key=value`` (TOML value syntax; bare words are strings)."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"--set {text!r}: expected section.key=value")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key, value


def load_config(path: str | Path | None = None, overrides: list[str] | tuple = ()) -> RunConfig:
    """Read a TOML config (default ``configs/grpo_tiny.toml``) and apply ``--set`` overrides."""
    path = Path(path) if path else DEFAULT_CONFIG
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    return config_from_dict(raw, overrides)


def config_from_dict(raw: dict, overrides: list[str] | tuple = ()) -> RunConfig:
    raw = {k: dict(v) for k, v in raw.items()}
    for item in overrides:
        section, key, value = parse_override(item)
        raw.setdefault(section, {})[key] = value
    unknown = set(raw) - set(SECTIONS)
    if unknown:
        raise ConfigError(
            f"unknown config section(s) {sorted(unknown)}; allowed: {', '.join(SECTIONS)}"
        )
    cfg = RunConfig(**{s: build_section(s, raw.get(s, {})) for s in SECTIONS})
    _check_async_liveness(cfg)
    return cfg


def _check_async_liveness(cfg: RunConfig) -> None:
    """An async run with τ < K − 1 stalls for good: workers hold the last synced version v, so once
    the trainer reaches v + τ + 1 < v + K every sample is stale, no update lands and the sync at
    v + K never comes."""
    tau, k = cfg.algorithm.staleness_limit, cfg.rollout.sync_every
    if cfg.rollout.mode == "async" and tau < k - 1:
        raise ConfigError(
            f"algorithm.staleness_limit={tau} must be >= rollout.sync_every - 1 = {k - 1} in an "
            "async run: with a smaller τ every sample is stale before the next weight sync and "
            "training stalls"
        )

"""Release policy: thresholds, regression margins and which checks are required, warn-only or off.

Small frozen dataclasses built from parsed TOML (``policy_from_dict``; ``contracts.policy_file``
reads the file and names the registered checks); unknown sections, keys, check names or modes
raise ValueError naming them and the allowed values. Without ``--policy`` the gate takes the policy that
fits the run's loop (``policy_for_run``): ``contracts/agentic.toml`` for an async run, where the
policy lag the run chose moves log-prob mismatch and DIS masking; ``contracts/release.toml`` for
every other run. Simplification: one mode per check, no per-table or per-step overrides.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

DEFAULT_POLICY = Path(__file__).resolve().parent / "release.toml"
AGENTIC_POLICY = Path(__file__).resolve().parent / "agentic.toml"
MODES = ("required", "warn", "off")
"""``required``: a failure fails the gate; ``warn``: reported as ``warn``; ``off``: not run."""


@dataclass(frozen=True)
class Thresholds:
    """Numeric limits of the threshold checks (``[thresholds]``)."""

    mismatch_abs_mean: float = 0.02
    """Max per-step mean |train_logp - rollout_logp| over action tokens (nats, > 0)."""
    mismatch_abs_p99: float = 0.25
    """Max per-step p99 of |train_logp - rollout_logp| (nats, > 0)."""
    masked_fraction: float = 0.05
    """Max per-step fraction of loss tokens removed by the trust masks, in [0, 1]."""
    trust_boundary_tol: float = 1e-6
    """Tokens whose log-ratio is within this of a mask bound are not judged (fp32 vs fp64 exp)."""
    staleness_limit: int | None = None
    """Optional cap on the run's declared staleness limit τ (>= 0); None: use the run's τ."""
    sync_required_phases: tuple[str, ...] = ("gather", "reshard", "send", "switch", "ack")
    """Weight-sync phases every complete sync has (in the store's canonical order; ends in ack)."""
    peak_breakdown_tol_bytes: int = 0
    """Allowed |sum of the peak's tracked breakdown - peak| in bytes (>= 0)."""
    trainer_repeat_tol: float = 0.0
    """Max |old_logp - train_logp| (nats, >= 0) on action tokens when π_old is a separate forward
    of the same weights (``algorithm.old_logp = "separate"``): 0 demands a bitwise-repeatable
    trainer forward (deterministic Top-k and reductions)."""
    tp_logprob_tol: float = 5e-5
    """Max |log-prob| and |logsumexp| difference (nats, >= 0) between tensor-parallel sizes on the
    same weights and ids (``parallel.tp_logprobs``): megatron's row-parallel layers add partial
    products in another fp32 order than one GEMM (measured 1.5e-5 at TP = 2 on the base model)."""

    def __post_init__(self) -> None:
        for name in ("mismatch_abs_mean", "mismatch_abs_p99"):
            if not getattr(self, name) > 0:
                raise ValueError(f"thresholds.{name}={getattr(self, name)} must be > 0")
        if not 0 <= self.masked_fraction <= 1:
            raise ValueError(f"thresholds.masked_fraction={self.masked_fraction} not in [0, 1]")
        if not self.trust_boundary_tol >= 0:
            raise ValueError(
                f"thresholds.trust_boundary_tol={self.trust_boundary_tol} must be >= 0"
            )
        if self.staleness_limit is not None and self.staleness_limit < 0:
            raise ValueError(f"thresholds.staleness_limit={self.staleness_limit} must be >= 0")
        if not self.trainer_repeat_tol >= 0:
            raise ValueError(
                f"thresholds.trainer_repeat_tol={self.trainer_repeat_tol} must be >= 0"
            )
        if not self.tp_logprob_tol >= 0:
            raise ValueError(f"thresholds.tp_logprob_tol={self.tp_logprob_tol} must be >= 0")
        if self.peak_breakdown_tol_bytes < 0:
            raise ValueError(
                f"thresholds.peak_breakdown_tol_bytes={self.peak_breakdown_tol_bytes} must be >= 0"
            )
        from observability.enums import SYNC_PHASES

        bad = [p for p in self.sync_required_phases if p not in SYNC_PHASES]
        if bad or "ack" not in self.sync_required_phases:
            raise ValueError(
                f"thresholds.sync_required_phases={list(self.sync_required_phases)} must be phases "
                f"of {list(SYNC_PHASES)} including 'ack'"
            )


@dataclass(frozen=True)
class Regression:
    """Margins of the ``--baseline`` regression checks (``[regression]``)."""

    mismatch_rel_margin: float = 0.25
    """Run mean |Δlogp| may exceed baseline * (1 + this) + ``mismatch_abs_margin`` by nothing."""
    mismatch_abs_margin: float = 1e-4
    """Absolute slack on the mean |Δlogp| comparison (nats, >= 0)."""
    masked_fraction_margin: float = 0.01
    """Run mean masked fraction may exceed the baseline's by at most this (absolute, >= 0)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"regression.{f.name}={value} must be finite and >= 0")


@dataclass(frozen=True)
class Policy:
    """A gate policy: thresholds, regression margins and per-check modes."""

    name: str = "release"
    """Shown in reports."""
    default: str = "required"
    """Mode of every check not listed in ``checks``."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    regression: Regression = field(default_factory=Regression)
    checks: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Check id (``contract.check``) -> mode; ids are validated against the registry."""

    def __post_init__(self) -> None:
        for where, mode in [("policy.default", self.default), *self.checks.items()]:
            if mode not in MODES:
                raise ValueError(f"{where} = {mode!r}: mode must be one of {list(MODES)}")

    def mode(self, check_id: str) -> str:
        return self.checks.get(check_id, self.default)


def _section(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ValueError(f"policy [{where}] must be a table, got {raw!r}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ValueError(f"unknown policy keys {where}.{unknown}; allowed: {names}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    try:
        return cls(**values)
    except TypeError as e:  # e.g. a string where a number belongs
        raise ValueError(f"policy [{where}]: bad value type: {e}") from e


def policy_from_dict(raw: Mapping[str, Any], known_checks: list[str] | None = None) -> Policy:
    """Build a ``Policy`` from parsed TOML; ``known_checks`` validates the ``[checks]`` ids."""
    allowed = ("policy", "thresholds", "regression", "checks")
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ValueError(f"unknown policy sections {unknown}; allowed: {list(allowed)}")
    head = raw.get("policy", {})
    bad = sorted(set(head) - {"name", "default"})
    if bad:
        raise ValueError(f"unknown policy keys policy.{bad}; allowed: ['name', 'default']")
    checks = dict(raw.get("checks", {}))
    if known_checks is not None:
        typos = sorted(set(checks) - set(known_checks))
        if typos:
            raise ValueError(f"policy [checks] names unknown checks {typos}; known: {known_checks}")
    return Policy(
        name=head.get("name", "release"),
        default=head.get("default", "required"),
        thresholds=_section(Thresholds, raw.get("thresholds", {}), "thresholds"),
        regression=_section(Regression, raw.get("regression", {}), "regression"),
        checks=MappingProxyType(checks),
    )


@dataclass(frozen=True)
class PolicyChoice:
    """Which policy file the gate uses for a run, and why (shown in the report)."""

    path: Path
    reason: str


def policy_for_run(config: Mapping[str, Any]) -> PolicyChoice:
    """The policy that fits a run whose ``runs.config`` is ``config`` (when none is given):
    ``agentic.toml`` for ``rollout.mode = "async"``, else ``release.toml`` (also for runs that
    record no config, e.g. some imports)."""
    rollout = config.get("rollout") if isinstance(config, Mapping) else None
    mode = rollout.get("mode") if isinstance(rollout, Mapping) else None
    if mode == "async":
        return PolicyChoice(AGENTIC_POLICY, "the run's config has rollout.mode = 'async'")
    why = "records no rollout.mode" if mode is None else f"has rollout.mode = {mode!r}"
    return PolicyChoice(DEFAULT_POLICY, f"the run's config {why}")

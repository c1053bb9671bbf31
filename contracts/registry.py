"""The check registry: every named, versioned contract check, in run order.

Check groups (``contracts/checks/*.py``, one file per contract) register functions with
``@check(contract, name, needs=(...))``; ``registered_checks()`` imports them all and returns the
specs. ``needs`` names the schema tables / columns a check reads, so that the gate can report it
``not_applicable`` on a run that declares one of them unrecorded (an imported dump).
A check function takes a ``CheckContext`` and returns a ``CheckResult`` (its ids are filled in
by the gate). Typos in check ids raise ValueError listing the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from observability.unrecorded import unrecorded_names

if TYPE_CHECKING:
    from contracts.context import CheckContext
    from contracts.result import CheckResult

CheckFn = Callable[["CheckContext"], "CheckResult"]

CONTRACTS = (
    "schema",
    "run",
    "action",
    "sparse_version",
    "agentic",
    "teacher_quant",
    "teacher_provenance",
    "long_horizon",
    "reward",
    "memory",
    "parallel",
    "regression",
)
"""Contract groups in run order (the store and schemas first, then whether the run finished,
regressions last)."""


@dataclass(frozen=True)
class CheckSpec:
    """One registered check."""

    contract: str
    """Contract group: ``schema``, ``run``, ``action``, ``sparse_version``, ``teacher_quant``, ..."""
    name: str
    """Check name, unique inside its contract."""
    doc: str
    """What the check asserts, one line (shown in reports)."""
    fn: CheckFn
    needs_baseline: bool = False
    """Runs only when the gate is given a ``--baseline`` run."""
    version: int = 1
    """Bumped when the rule changes meaning (recorded with every result)."""
    needs: tuple[str, ...] = ()
    """``table`` / ``table.column`` names the check reads: when the run declares one of them
    unrecorded (``runs.unrecorded``) the gate reports the check ``not_applicable`` unrun."""

    @property
    def id(self) -> str:
        return f"{self.contract}.{self.name}"


_REGISTRY: dict[str, CheckSpec] = {}


def register(spec: CheckSpec) -> CheckSpec:
    """Add ``spec``; ValueError if its id is already taken, its contract unknown or one of its
    ``needs`` is not a declarable schema name."""
    if spec.contract not in CONTRACTS:
        raise ValueError(f"contract {spec.contract!r} of {spec.name!r} not in {list(CONTRACTS)}")
    unrecorded_names(spec.needs)
    if spec.id in _REGISTRY:
        raise ValueError(f"contract check {spec.id!r} is registered twice")
    _REGISTRY[spec.id] = spec
    return spec


def check(
    contract: str,
    name: str,
    *,
    needs_baseline: bool = False,
    version: int = 1,
    needs: tuple[str, ...] = (),
) -> Callable[[CheckFn], CheckFn]:
    """Decorator registering ``fn`` as ``contract.name``; its docstring's first line is the doc."""

    def decorate(fn: CheckFn) -> CheckFn:
        doc = (fn.__doc__ or name).strip().splitlines()[0]
        register(CheckSpec(contract, name, doc, fn, needs_baseline, version, needs))
        return fn

    return decorate


def registered_checks() -> list[CheckSpec]:
    """Every check, grouped in ``CONTRACTS`` order, in registration order inside a group."""
    import contracts.checks  # noqa: F401  (registers the groups)

    return sorted(_REGISTRY.values(), key=lambda s: CONTRACTS.index(s.contract))


def all_check_ids() -> list[str]:
    return [s.id for s in registered_checks()]


def get_check(check_id: str) -> CheckSpec:
    """The spec of ``check_id``; ValueError listing the valid ids on a typo."""
    specs = {s.id: s for s in registered_checks()}
    try:
        return specs[check_id]
    except KeyError:
        raise ValueError(f"unknown contract check {check_id!r}; checks: {list(specs)}") from None

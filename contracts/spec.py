"""What a contract check is: ``CheckSpec``, the contract groups, and ``@check`` that declares one.

Check groups (``contracts/checks/*.py``, one file per contract) declare their functions with
``@check(contract, name, needs=(...))`` (or ``register(CheckSpec(...))`` for generated checks);
``contracts.registry`` imports the groups and lists what they declared. This module imports no
check group, so the groups and the registry depend on it and not on each other.
``needs`` names the schema tables / columns a check reads, so that the gate can report it
``not_applicable`` on a run that declares one of them unrecorded (an imported dump).
A check function takes a ``CheckContext`` and returns a ``CheckResult`` (its ids are filled in
by the gate).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contracts.context import CheckContext
from contracts.result import CheckResult
from observability.unrecorded import unrecorded_names

CheckFn = Callable[[CheckContext], CheckResult]

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
    """One declared check."""

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


DECLARED: dict[str, CheckSpec] = {}
"""Every check declared so far, by id, in declaration order (filled as the groups import)."""


def register(spec: CheckSpec) -> CheckSpec:
    """Declare ``spec``; ValueError if its id is already taken, its contract unknown or one of
    its ``needs`` is not a declarable schema name."""
    if spec.contract not in CONTRACTS:
        raise ValueError(f"contract {spec.contract!r} of {spec.name!r} not in {list(CONTRACTS)}")
    unrecorded_names(spec.needs)
    if spec.id in DECLARED:
        raise ValueError(f"contract check {spec.id!r} is registered twice")
    DECLARED[spec.id] = spec
    return spec


def check(
    contract: str,
    name: str,
    *,
    needs_baseline: bool = False,
    version: int = 1,
    needs: tuple[str, ...] = (),
) -> Callable[[CheckFn], CheckFn]:
    """Decorator declaring ``fn`` as ``contract.name``; its docstring's first line is the doc."""

    def decorate(fn: CheckFn) -> CheckFn:
        doc = (fn.__doc__ or name).strip().splitlines()[0]
        register(CheckSpec(contract, name, doc, fn, needs_baseline, version, needs))
        return fn

    return decorate

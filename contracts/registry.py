"""The check registry: every named, versioned contract check, in run order.

Importing this module imports every check group (``contracts.checks``), which declare their
checks through ``contracts.spec``; the registry only reads what they declared. Typos in check
ids raise ValueError listing the valid ones.
"""

from __future__ import annotations

import contracts.checks  # noqa: F401  (imports every check group: their checks are declared)
from contracts.spec import CONTRACTS, DECLARED, CheckSpec


def registered_checks() -> list[CheckSpec]:
    """Every check, grouped in ``CONTRACTS`` order, in declaration order inside a group."""
    return sorted(DECLARED.values(), key=lambda s: CONTRACTS.index(s.contract))


def all_check_ids() -> list[str]:
    return [s.id for s in registered_checks()]


def get_check(check_id: str) -> CheckSpec:
    """The spec of ``check_id``; ValueError listing the valid ids on a typo."""
    specs = {s.id: s for s in registered_checks()}
    try:
        return specs[check_id]
    except KeyError:
        raise ValueError(f"unknown contract check {check_id!r}; checks: {list(specs)}") from None

"""``CheckResult``: what one contract check reports, and how statuses combine into a verdict.

A check reports an observed value, the threshold it was compared with, how many rows it looked
at, how many violate and up to ``MAX_EXAMPLES`` violating rows (JSON-safe dicts). Statuses are
the store's ``contract_results.status`` enum. Fail closed: ``error`` always fails the gate.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import math
from dataclasses import dataclass, field
from typing import Any

from observability.enums import CONTRACT_STATUSES

PASS, FAIL, WARN, ERROR, NOT_APPLICABLE = CONTRACT_STATUSES
MAX_EXAMPLES = 5
"""Violating rows kept per check."""


def json_safe(value: Any) -> Any:
    """``value`` with every leaf JSON-serialisable (non-finite floats become strings)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, decimal.Decimal):
        return json_safe(float(value))
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if value is None or isinstance(value, str | int | bool):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    return str(value)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one named check over one run."""

    contract: str
    """Contract group, e.g. ``action`` or ``schema``."""
    check: str
    """Check name inside its contract, e.g. ``logp_finite``."""
    status: str
    """One of ``pass``, ``fail``, ``warn``, ``error``, ``not_applicable``."""
    observed: float | None = None
    """The measured value (a violation count for row checks, a metric for threshold checks)."""
    threshold: float | None = None
    """What ``observed`` was compared with (None when the rule is not a number)."""
    n_rows: int = 0
    """Rows (tokens, samples, steps, ...) the check looked at."""
    n_violations: int = 0
    """Rows breaking the rule."""
    examples: list[dict[str, Any]] = field(default_factory=list)
    """Up to ``MAX_EXAMPLES`` violating rows, JSON-safe."""
    message: str = ""
    """One line saying what was checked or why the check could not run."""
    version: int = 1
    """Version of the check's rule (``CheckSpec.version``)."""
    seconds: float = 0.0
    """Wall time the check took."""

    def __post_init__(self) -> None:
        if self.status not in CONTRACT_STATUSES:
            raise ValueError(f"check status {self.status!r} not in {list(CONTRACT_STATUSES)}")

    @property
    def id(self) -> str:
        """``contract.check``, the name policies and reports use."""
        return f"{self.contract}.{self.check}"

    @property
    def failed(self) -> bool:
        """Whether this result fails the gate (``fail`` or ``error``)."""
        return self.status in (FAIL, ERROR)

    def replace(self, **changes: Any) -> CheckResult:
        return dataclasses.replace(self, **changes)


def verdict(*, n_violations: int) -> str:
    """``pass`` when nothing violates, else ``fail``."""
    return PASS if n_violations == 0 else FAIL

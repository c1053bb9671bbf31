"""A gate's outcome: every check's result for one run under one policy, and the run's state.

Its own module so that the gate (which builds it) and ``contracts.record`` / ``contracts.report``
(which read it) depend on it rather than on each other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from contracts.context import RunState
from contracts.policy import Policy
from contracts.result import CheckResult


@dataclass(frozen=True)
class GateResult:
    """Every check's result for one run under one policy."""

    run_dir: Path
    run_id: str
    policy: Policy
    baseline: Path | None
    results: tuple[CheckResult, ...]
    checked_at: datetime
    seconds: float
    state: RunState
    """The run's status, steps recorded and last write time."""
    policy_source: str = "given"
    """Where the policy came from: ``given`` (a Policy object), the file passed, or the file
    chosen for the run and why."""

    @property
    def passed(self) -> bool:
        """No check failed or errored (warn and not_applicable pass)."""
        return not any(r.failed for r in self.results)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def counts(self) -> Counter:
        return Counter(r.status for r in self.results)

    def result(self, check_id: str) -> CheckResult:
        """The result of ``contract.check``; KeyError listing the ids on a typo."""
        for r in self.results:
            if r.id == check_id:
                return r
        raise KeyError(f"no result for {check_id!r}; results: {[r.id for r in self.results]}")

    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.failed]

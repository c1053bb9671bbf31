"""Contracts and the release gate: pandera schemas and named SQL checks over a run's telemetry.

``run_gate(run_dir, policy=None, baseline=None)`` runs every registered check and records the
results in the run's ``contract_results`` table; ``closedloop gate`` is its command line.
"""

from contracts.gate import GateResult, GateUsageError, run_gate
from contracts.policy import Policy, load_policy
from contracts.result import CheckResult

__all__ = ["CheckResult", "GateResult", "GateUsageError", "Policy", "load_policy", "run_gate"]

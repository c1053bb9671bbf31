"""Contracts and the release gate: pandera schemas and named SQL checks over a run's telemetry.

``run_gate(run_dir, policy=None, baseline=None)`` runs every registered check and records the
results in the run's ``contract_results`` table; ``closedloop gate`` is its command line.
"""

from contracts.gate import GateUsageError, run_gate
from contracts.gate_result import GateResult
from contracts.policy import Policy
from contracts.policy_file import load_policy
from contracts.result import CheckResult

__all__ = ["CheckResult", "GateResult", "GateUsageError", "Policy", "load_policy", "run_gate"]

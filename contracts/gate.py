"""The release gate: run every registered check over a run under a policy; fail closed.

``run_gate`` opens the run (and an optional baseline) with ``observability.open_run``, runs each
check the policy does not switch off (a check that needs a table or column the run declares
unrecorded is ``not_applicable`` without running), turns failures of warn-only checks into
``warn``, and records the results in the run's ``contract_results`` table. Without a policy it
takes the one that fits the run's loop (``contracts.policy.policy_for_run``, from ``runs.config``)
and says which and why. The result carries the run's state (status, steps recorded, last
write) for the report; ``allow_running`` accepts a live run. A check that raises is an ``error``
(fails the gate); a run that cannot be opened or a bad policy raises ``GateUsageError`` (exit 2).
Simplification: checks run sequentially on one DuckDB connection.
"""

from __future__ import annotations

import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from contracts.context import CheckContext, CheckError, error, not_applicable
from contracts.gate_result import GateResult
from contracts.policy import Policy, policy_for_run
from contracts.policy_file import load_policy
from contracts.record import append_results
from contracts.registry import registered_checks
from contracts.result import FAIL, WARN, CheckResult
from contracts.spec import CheckSpec
from observability import open_run
from observability.parts import resolve_run_dir
from observability.unrecorded import covers

DUCKDB_MEMORY_LIMIT = "1GB"
"""Memory limit of the gate's DuckDB connections (spills beyond; keeps the gate under 2 GB)."""


class GateUsageError(ValueError):
    """Bad arguments, a bad policy or a run that cannot be opened (CLI exit code 2)."""


def _open(path: str | Path, what: str) -> tuple[Path, duckdb.DuckDBPyConnection]:
    run_dir = resolve_run_dir(path)
    try:
        with warnings.catch_warnings():  # corrupt parts: reported by schema.store_readable
            warnings.simplefilter("ignore")
            con = open_run(run_dir)
    except (ValueError, OSError, duckdb.Error) as e:
        raise GateUsageError(f"cannot open {what} {path}: {e}") from e
    con.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
    return run_dir, con


def _run_one(spec: CheckSpec, ctx: CheckContext, mode: str) -> CheckResult:
    t0 = time.perf_counter()
    missing = [n for n in spec.needs if covers(ctx.unrecorded, n)]
    try:
        if missing:
            result = not_applicable(f"the run declares {missing} unrecorded (runs.unrecorded)")
        else:
            result = spec.fn(ctx)
    except CheckError as e:
        result = error(str(e))
    except Exception as e:  # fail closed: a check that cannot run fails the gate
        result = error(f"{type(e).__name__}: {e}")
    if mode == "warn" and result.status == FAIL:
        result = result.replace(status=WARN)
    return result.replace(
        contract=spec.contract,
        check=spec.name,
        version=spec.version,
        seconds=time.perf_counter() - t0,
    )


def _run_id(ctx: CheckContext) -> str:
    try:
        return ctx.run.run_id
    except CheckError:
        return ctx.run_dir.name  # the writer's default run id


def _policy(policy: Policy | str | Path | None, ctx: CheckContext) -> tuple[Policy, str]:
    """(the policy, where it came from); GateUsageError when its file cannot be read."""
    if isinstance(policy, Policy):
        return policy, "given"
    if policy is not None:
        path, source = Path(policy), f"{policy} (--policy)"
    else:
        try:
            config = ctx.run.config
        except CheckError:  # no readable runs row: schema.store_readable reports it
            config = {}
        choice = policy_for_run(config)
        path, source = choice.path, f"{choice.path.name}, chosen because {choice.reason}"
    try:
        return load_policy(path), source
    except ValueError as e:
        raise GateUsageError(str(e)) from e


def run_gate(
    run_dir: str | Path,
    policy: Policy | str | Path | None = None,
    baseline: str | Path | None = None,
    *,
    record: bool = True,
    allow_running: bool = False,
) -> GateResult:
    """Gate the run at ``run_dir``; ``policy`` is a Policy, a TOML path, or None: the policy that
    fits the run (``policy_for_run``: agentic.toml for an async run, else release.toml).

    With ``record`` the results are appended to the run's ``contract_results`` table;
    ``allow_running`` lets ``run.finished`` pass a run whose status is still ``running``.
    Raises GateUsageError when the run, the baseline or the policy cannot be read.
    """
    t0 = time.perf_counter()
    run_dir, con = _open(run_dir, "run")
    ctx = CheckContext(con, run_dir=run_dir, policy=Policy(), allow_running=allow_running)
    try:
        ctx.policy, source = _policy(policy, ctx)
        base_dir, base_con = _open(baseline, "baseline") if baseline is not None else (None, None)
    except GateUsageError:
        con.close()
        raise
    ctx.baseline, ctx.baseline_dir = base_con, base_dir
    policy = ctx.policy
    try:
        results = tuple(
            _run_one(spec, ctx, policy.mode(spec.id))
            for spec in registered_checks()
            if policy.mode(spec.id) != "off" and (base_con is not None or not spec.needs_baseline)
        )
        gate = GateResult(
            run_dir=run_dir,
            run_id=_run_id(ctx),
            policy=policy,
            baseline=base_dir,
            results=results,
            checked_at=datetime.now(UTC),
            seconds=time.perf_counter() - t0,
            state=ctx.state,
            policy_source=source,
        )
    finally:
        con.close()
        if base_con is not None:
            base_con.close()
    if record:
        append_results(gate)
    return gate

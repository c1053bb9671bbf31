"""What a check sees: the run's DuckDB views, its declared rule (``RunInfo``), its state
(``RunState``: status, steps recorded, last write), the policy, a baseline.

Plus the SQL helpers every check group shares: rows as dicts, the one-pass "count the population
and its violations, then fetch up to 5 examples" pattern, and result constructors. Predicates are
fail-closed: a violation predicate that evaluates to NULL counts as a violation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb

from contracts.policy import Policy
from contracts.result import ERROR, MAX_EXAMPLES, NOT_APPLICABLE, CheckResult, json_safe, verdict
from observability.parts import last_write_time


class CheckError(Exception):
    """The check cannot be evaluated on this run (reported as ``error``: fails the gate)."""


@dataclass(frozen=True)
class RunInfo:
    """The run's latest ``runs`` row: identity and declared rule."""

    run_id: str
    status: str | None
    schema_version: int | None
    vocab_size: int | None
    tokenizer_rev: str | None
    chat_template_rev: str | None
    icepop_beta: float | None
    dis_eps_low: float | None
    dis_eps_high: float | None
    staleness_limit: int | None
    config: dict
    unrecorded: tuple[str, ...] = ()
    """What the producer declares it does not record (``runs.unrecorded``)."""

    @property
    def trust_rule(self) -> str:
        """``icepop``, ``dis`` or ``none`` from the declared columns (config as a fallback)."""
        icepop = self.icepop_beta is not None
        dis = self.dis_eps_low is not None or self.dis_eps_high is not None
        if icepop and dis:
            raise CheckError("run declares both an IcePop beta and DIS epsilons")
        if icepop:
            return "icepop"
        if dis:
            if self.dis_eps_low is None or self.dis_eps_high is None:
                raise CheckError("run declares only one of dis_eps_low / dis_eps_high")
            return "dis"
        rule = self.config.get("algorithm", {}).get("trust_rule")
        if rule == "none":
            return "none"
        raise CheckError(
            f"run declares no trust rule (icepop_beta, dis_eps_* null; config trust_rule={rule!r})"
        )


@dataclass(frozen=True)
class RunState:
    """Where the run stands: shown in the gate report and judged by ``run.finished``."""

    status: str | None
    """The latest ``runs.status`` (``running`` for a killed run), None when unknown."""
    steps: int
    """Distinct steps in the ``steps`` table."""
    last_step: int | None
    last_write: datetime | None
    """When the run's telemetry was last written (its newest part), UTC."""

    def summary(self) -> str:
        when = "never" if self.last_write is None else self.last_write.isoformat(timespec="seconds")
        last = "" if self.last_step is None else f" (last step {self.last_step})"
        return f"{self.steps} steps recorded{last}, last write {when}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "steps": self.steps,
            "last_step": self.last_step,
            "last_write": None if self.last_write is None else self.last_write.isoformat(),
        }


def _nan_to_none(value: Any) -> Any:
    return None if isinstance(value, float) and value != value else value


class CheckContext:
    """One gate invocation's view of a run (and optionally a baseline run)."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        *,
        run_dir: Path,
        policy: Policy,
        baseline: duckdb.DuckDBPyConnection | None = None,
        baseline_dir: Path | None = None,
        allow_running: bool = False,
    ) -> None:
        self.con = con
        self.run_dir = run_dir
        self.policy = policy
        self.baseline = baseline
        self.baseline_dir = baseline_dir
        self.allow_running = allow_running
        """Accept a ``running`` status (gating a live run, ``--allow-running``)."""

    @cached_property
    def run(self) -> RunInfo:
        rows = self.rows("SELECT * FROM runs")
        if not rows:
            raise CheckError("the runs table has no row: the run's identity and rule are unknown")
        if len(rows) > 1:
            ids = sorted(r["run_id"] for r in rows)
            raise CheckError(f"one run expected in {self.run_dir}, found {ids}")
        r = {k: _nan_to_none(v) for k, v in rows[0].items()}
        try:
            config = json.loads(r["config"]) if r.get("config") else {}
        except json.JSONDecodeError as e:
            raise CheckError(f"runs.config is not valid JSON: {e}") from e
        fields = [k for k in RunInfo.__dataclass_fields__ if k not in ("config", "unrecorded")]
        return RunInfo(
            **{k: r.get(k) for k in fields},
            config=config,
            unrecorded=tuple(r.get("unrecorded") or ()),
        )

    @cached_property
    def state(self) -> RunState:
        try:
            status = self.run.status
        except CheckError:
            status = None
        steps, last_step = self.con.execute(
            "SELECT count(DISTINCT step), max(step) FROM steps"
        ).fetchall()[0]
        written = last_write_time(self.run_dir)
        when = None if written is None else datetime.fromtimestamp(written, UTC)
        return RunState(status, int(steps), last_step, when)

    @cached_property
    def unrecorded(self) -> tuple[str, ...]:
        """The run's declared unrecorded names; none when its identity is unreadable (then
        ``schema.store_readable`` fails the gate)."""
        try:
            return self.run.unrecorded
        except CheckError:
            return ()

    @cached_property
    def token_counts(self) -> dict[str, int]:
        """One pass over ``tokens``: rows, action rows, trainer ids and teacher log-probs."""
        return self.rows(
            "SELECT count(*) AS tokens, count(*) FILTER (WHERE role = 'action') AS actions, "
            "count(train_token_id) AS train_token_ids, count(teacher_logp) AS teacher_logps "
            "FROM tokens"
        )[0]

    # -- SQL helpers ---------------------------------------------------------------------------

    def rows(self, sql: str, params: list | None = None) -> list[dict[str, Any]]:
        """All result rows of ``sql`` as dicts."""
        cur = self.con.execute(sql, params or [])
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def scalar(self, sql: str, params: list | None = None) -> Any:
        rows = self.con.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    def count_violations(
        self,
        *,
        source: str,
        violation: str,
        columns: str = "*",
        order: str = "1",
        one_per: str | None = None,
        message: str,
        params: list | None = None,
    ) -> CheckResult:
        """Rows of ``source`` (a SELECT) and those where ``violation`` holds (NULL counts).

        One pass counts both; a second query fetches up to ``MAX_EXAMPLES`` violating rows
        (``columns``, ordered by ``order``) only when there are violations; ``one_per`` (e.g.
        ``"sample_id"``) keeps only the first violating row of each such group as an example.
        """
        bad = f"coalesce(({violation}), true)"
        n, n_bad = self.con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {bad}) FROM ({source})", params or []
        ).fetchall()[0]
        examples = []
        if n_bad:
            first = (
                f"QUALIFY row_number() OVER (PARTITION BY {one_per} ORDER BY {order}) = 1 "
                if one_per
                else ""
            )
            examples = self.rows(
                f"SELECT {columns} FROM ({source}) WHERE {bad} {first}ORDER BY {order} "
                f"LIMIT {MAX_EXAMPLES}",
                params,
            )
        return finding(
            verdict(n_violations=n_bad),
            observed=n_bad,
            threshold=0,
            n_rows=n,
            n_violations=n_bad,
            examples=examples,
            message=message,
        )


def finding(status: str, *, examples: list | None = None, **fields: Any) -> CheckResult:
    """A result without ids (the gate fills in contract and check)."""
    return CheckResult("", "", status, examples=json_safe(examples or []), **fields)


def not_applicable(message: str) -> CheckResult:
    return finding(NOT_APPLICABLE, message=message)


def error(message: str) -> CheckResult:
    return finding(ERROR, message=message)

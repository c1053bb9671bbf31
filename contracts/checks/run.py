"""Contract *run*: the gated run finished.

A run killed mid-training (``kill -9``, a lost node) leaves readable telemetry whose ``runs``
status stays ``running``; one that failed records ``failed``. Both fail ``run.finished`` unless the
gate runs with ``allow_running`` (``closedloop gate --allow-running``), which accepts a
``running`` status for gating a live run. The report header shows the status, the steps recorded
and the last write time (``contracts.gate.RunState``).
"""

from __future__ import annotations

from contracts.context import CheckContext, finding
from contracts.result import FAIL, PASS, CheckResult
from contracts.spec import check


@check("run", "finished")
def finished(ctx: CheckContext) -> CheckResult:
    """The run's status is ``finished`` (``running`` too with ``--allow-running``)."""
    state = ctx.state
    if state.status == "finished" or (state.status == "running" and ctx.allow_running):
        note = " (a live run: --allow-running)" if state.status == "running" else ""
        return finding(
            PASS, n_rows=1, message=f"run status {state.status!r}{note}; {state.summary()}"
        )
    hint = "killed or still training" if state.status == "running" else "not a clean exit"
    allow = "; pass --allow-running to gate a live run" if state.status == "running" else ""
    return finding(
        FAIL,
        observed=1,
        threshold=0,
        n_rows=1,
        n_violations=1,
        examples=[state.as_dict()],
        message=f"run status is {state.status!r} ({hint}), not 'finished'{allow}",
    )

"""Contract *memory*: the ledger accounts for every byte it claims.

Rules, per (rank, object), lifecycle events ordered by ``event_id``: every ``create`` is followed
by a ``free`` before the object is created again, unless declared ``persistent`` and still live at
the end; every ``free`` follows a ``create`` (no double free, no free of an unknown object); every
event names its object, producer, consumer, owner and category; for every (step, rank) in
``memory_peaks`` the tracked breakdown sums to ``steps.peak_memory_bytes``.
Simplification: ``transfer``/``reuse`` events do not affect liveness here.
"""

from __future__ import annotations

from contracts.context import CheckContext, not_applicable
from contracts.result import CheckResult
from contracts.spec import check

C = "memory"

UNTRACKED_LINES = (("allocator", "allocator"), ("runtime_margin", "untracked"))
"""(category, owner) lines of ``memory_peaks`` that are not tracked objects (mirrors
``core.memory.peak.ALLOCATOR_LINE`` / ``UNTRACKED_LINE``)."""
NOT_MEASURED_OWNER = "not_measured"
"""Owner of breakdown lines that were not measured (``core.memory.peak.NOT_MEASURED_OWNER``)."""

_LIFE = """
    SELECT rank, object, event_id, event, step, ts, category, owner, bytes, persistent,
           lag(event) OVER w AS prev_event, lead(event) OVER w AS next_event
    FROM memory_events WHERE event IN ('create', 'free')
    WINDOW w AS (PARTITION BY rank, object ORDER BY event_id)"""


def _no_events(ctx: CheckContext) -> CheckResult | None:
    if ctx.scalar("SELECT count(*) FROM memory_events"):
        return None
    return not_applicable("the run recorded no memory events")


@check(C, "create_has_free", needs=("memory_events",))
def create_has_free(ctx: CheckContext) -> CheckResult:
    """Every create has a free or is declared persistent (no leaked object)."""
    skip = _no_events(ctx)
    if skip is not None:
        return skip
    return ctx.count_violations(
        source=f"SELECT * EXCLUDE (prev_event) FROM ({_LIFE}) WHERE event = 'create'",
        violation="NOT (next_event = 'free' OR (next_event IS NULL AND coalesce(persistent, false)))",
        order="rank, event_id",
        message="created objects never freed (and not persistent) or created again while live",
    )


@check(C, "no_double_free", needs=("memory_events",))
def no_double_free(ctx: CheckContext) -> CheckResult:
    """Every free follows a create of the same object (no double free, no unknown object)."""
    skip = _no_events(ctx)
    if skip is not None:
        return skip
    return ctx.count_violations(
        source=f"SELECT * EXCLUDE (next_event) FROM ({_LIFE}) WHERE event = 'free'",
        violation="prev_event IS DISTINCT FROM 'create'",
        order="rank, event_id",
        message="frees of an object that was already freed or never created",
    )


@check(C, "attribution_complete", needs=("memory_events",))
def attribution_complete(ctx: CheckContext) -> CheckResult:
    """Every memory event names its object, producer, consumer, owner and category."""
    skip = _no_events(ctx)
    if skip is not None:
        return skip
    fields = ("object", "producer", "consumer", "owner", "category")
    return ctx.count_violations(
        source=f"SELECT rank, event_id, event, step, {', '.join(fields)} FROM memory_events",
        violation=" OR ".join(f"nullif({f}, '') IS NULL" for f in fields),
        order="rank, event_id",
        one_per="object",
        message=f"memory events missing one of {list(fields)} (one example per object)",
    )


@check(C, "peak_breakdown_sums", needs=("memory_peaks", "steps.peak_memory_bytes"))
def peak_breakdown_sums(ctx: CheckContext) -> CheckResult:
    """At each step's peak the per-category tracked breakdown sums to steps.peak_memory_bytes."""
    if not ctx.scalar("SELECT count(*) FROM memory_peaks"):
        return not_applicable("the run recorded no memory peaks")
    tol = ctx.policy.thresholds.peak_breakdown_tol_bytes
    untracked = (
        " OR ".join(f"(category = '{c}' AND owner = '{o}')" for c, o in UNTRACKED_LINES)
        + f" OR owner = '{NOT_MEASURED_OWNER}'"
    )
    source = f"""
        WITH b AS (
            SELECT step, rank, coalesce(sum(bytes) FILTER (WHERE NOT ({untracked})), 0)
                   AS breakdown_bytes,
                   list({{'category': category, 'owner': owner, 'bytes': bytes}}
                        ORDER BY category, owner) AS lines
            FROM memory_peaks GROUP BY step, rank)
        SELECT b.step, b.rank, b.breakdown_bytes, s.peak_memory_bytes,
               b.breakdown_bytes - s.peak_memory_bytes AS difference, b.lines
        FROM b LEFT JOIN steps s ON s.step = b.step AND s.rank = b.rank"""
    return ctx.count_violations(
        source=source,
        violation=f"NOT (abs(difference) <= {int(tol)})",
        order="step, rank",
        message=f"(step, rank) peaks whose tracked breakdown differs from steps.peak_memory_bytes "
        f"by more than {int(tol)} bytes (or the peak is not recorded)",
    )

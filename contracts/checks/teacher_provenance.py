"""Contract *teacher provenance*: every domain is routed to a teacher trained on that domain, from
the source the run declared.

Per route (domain, teacher) of ``teacher_routes``: the teacher checkpoint's trained domains
(``teacher_domains``) contain the domain, and its observed source — ``same`` when the first weights
of its lineage (``teacher_source_sha256``) are the student's (``student_source_sha256``), ``off``
otherwise — equals ``declared_source`` (``teachers.sources``, default ``same``). A route whose
provenance is unknown (a null domain list or hash) is a violation: it cannot be proven (fail
closed). Runs recorded before schema version 6 carry no provenance: not applicable.
"""

from __future__ import annotations

from contracts.context import CheckContext, not_applicable
from contracts.result import CheckResult
from contracts.spec import check

C = "teacher_provenance"

_ROUTES = """
WITH r AS (
  SELECT domain, teacher_id, min(step) AS first_step, count(*) AS n_steps,
         any_value(teacher_domains) AS teacher_domains,
         any_value(teacher_source_sha256) AS teacher_source,
         any_value(student_source_sha256) AS student_source,
         any_value(teacher_config_sha256) AS teacher_config,
         any_value(declared_source) AS declared_source
  FROM teacher_routes GROUP BY domain, teacher_id),
o AS (
  SELECT *, CASE WHEN teacher_source IS NULL OR student_source IS NULL THEN NULL
                 WHEN teacher_source = student_source THEN 'same' ELSE 'off' END AS observed_source
  FROM r)
SELECT domain || ' -> ' || teacher_id AS route, domain, teacher_id, first_step, n_steps,
       teacher_domains, declared_source, observed_source, teacher_config,
       CASE
         WHEN teacher_domains IS NULL THEN 'the teacher records no trained domains'
         WHEN NOT list_contains(teacher_domains, domain)
           THEN 'the teacher was trained on ' || array_to_string(teacher_domains, ', ')
                || ', not ' || domain
         WHEN observed_source IS NULL THEN 'the teacher or the student records no source'
         WHEN declared_source IS NULL THEN 'the run declares no source for the route'
         WHEN observed_source <> declared_source
           THEN 'declared ' || declared_source || '-source, the teacher is ' || observed_source
                || '-source'
       END AS problem
FROM o"""


@check(
    C,
    "routes_match_provenance",
    needs=(
        "teacher_routes.teacher_domains",
        "teacher_routes.teacher_source_sha256",
        "teacher_routes.student_source_sha256",
        "teacher_routes.declared_source",
    ),
)
def routes_match_provenance(ctx: CheckContext) -> CheckResult:
    """Each routed domain's teacher was trained on that domain, from the declared source."""
    if not ctx.scalar("SELECT count(*) FROM teacher_routes"):
        return not_applicable("the run routed no sample to a teacher")
    version = ctx.run.schema_version
    if version is not None and version < 6:
        return not_applicable(f"recorded at schema version {version}: no teacher provenance")
    bad = ctx.rows(f"SELECT route, problem FROM ({_ROUTES}) WHERE problem IS NOT NULL ORDER BY 1")
    named = "; ".join(f"{r['route']}: {r['problem']}" for r in bad)
    return ctx.count_violations(
        source=_ROUTES,
        violation="problem IS NOT NULL",
        order="domain, teacher_id",
        message=f"routes whose teacher was not trained on the domain or whose source differs "
        f"from the declared one ({named})"
        if bad
        else "routes whose teacher was not trained on the domain or not from the declared source",
    )

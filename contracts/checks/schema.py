"""Contract *schema*: the store is readable and every table matches its pandera model.

``store_readable`` fails closed on what the readers would silently skip or paper over: corrupt
parts, a missing table directory, no or several ``runs`` identities, a schema version this gate
does not know. ``unrecorded_null`` holds a run to what it declares unrecorded (``runs.unrecorded``:
known names, no values), since those declarations turn other checks ``not_applicable``.
``schema.<table>`` validates every part of one table (``contracts.validate``).
"""

from __future__ import annotations

from functools import partial

from contracts.context import CheckContext, CheckError, finding, not_applicable
from contracts.result import CheckResult, verdict
from contracts.spec import CheckSpec, check, register
from contracts.validate import validate_table
from observability.parts import check_part, list_parts, telemetry_dir
from observability.schema import SCHEMA_VERSION, TABLES
from observability.spec import KNOWN_SCHEMA_VERSIONS
from observability.unrecorded import unrecorded_names

C = "schema"


@check(C, "store_readable")
def store_readable(ctx: CheckContext) -> CheckResult:
    """Every table directory exists, every part is readable, the run has one known identity."""
    problems: list[dict] = []
    n_parts = 0
    for table in TABLES:
        directory = telemetry_dir(ctx.run_dir) / table
        if not directory.is_dir():
            problems.append({"problem": "missing table directory", "path": str(directory)})
            continue
        for path in list_parts(ctx.run_dir, table):
            n_parts += 1
            status = check_part(path)
            if status.error is not None:
                problems.append(
                    {"problem": "corrupt part", "path": str(path), "error": status.error}
                )
    try:
        run = ctx.run
        if run.schema_version not in KNOWN_SCHEMA_VERSIONS:
            problems.append(
                {
                    "problem": "unknown schema version",
                    "run_schema_version": run.schema_version,
                    "gate_schema_version": SCHEMA_VERSION,
                }
            )
    except CheckError as e:
        problems.append({"problem": str(e)})
    n = len(problems)
    return finding(
        verdict(n_violations=n),
        observed=n,
        threshold=0,
        n_rows=n_parts,
        n_violations=n,
        examples=problems[:5],
        message=f"{n_parts} parts over {len(TABLES)} tables; {n} problems",
    )


@check(C, "unrecorded_null")
def unrecorded_null(ctx: CheckContext) -> CheckResult:
    """What the run declares unrecorded names a declarable table or column and holds no value."""
    declared = ctx.unrecorded
    if not declared:
        return not_applicable("the run declares nothing unrecorded")
    problems: list[dict] = []
    for name in declared:
        try:
            unrecorded_names([name])
        except ValueError as e:
            problems.append({"name": name, "problem": str(e)})
            continue
        table, _, column = name.partition(".")
        counted = f'count("{column}")' if column else "count(*)"
        n = ctx.scalar(f"SELECT {counted} FROM {table}")
        if n:
            problems.append(
                {"name": name, "problem": f"declared unrecorded, {n} rows hold a value"}
            )
    n = len(problems)
    return finding(
        verdict(n_violations=n),
        observed=n,
        threshold=0,
        n_rows=len(declared),
        n_violations=n,
        examples=problems[:5],
        message=f"{len(declared)} names declared unrecorded; {n} unknown or holding values",
    )


def _validate(ctx: CheckContext, *, table: str) -> CheckResult:
    try:
        vocab = ctx.run.vocab_size
    except CheckError:
        vocab = None  # store_readable fails the gate in that case
    found = validate_table(ctx.run_dir, table, vocab_size=vocab)
    note = "" if vocab is not None or table != "tokens" else " (no vocab_size: id rule skipped)"
    return finding(
        verdict(n_violations=found.n_failures),
        observed=found.n_failures,
        threshold=0,
        n_rows=found.n_rows,
        n_violations=found.n_failures,
        examples=found.examples,
        message=found.summary() + note,
    )


for _table in TABLES:
    register(
        CheckSpec(
            C,
            _table,
            f"every part of {_table} matches its pandera model (types, nulls, enums, ranges)",
            partial(_validate, table=_table),
        )
    )

"""What a run declares it does not record (``runs.unrecorded``): whole tables or single columns.

An imported dump or a third-party trainer lacks fields closedloop's own trainer writes. It leaves
them null and names them here, so that the gate reports the checks needing them
``not_applicable`` instead of failing them (or, worse, passing on nothing). Only nullable
columns and the tables a producer writes can be declared; ``contracts`` verifies that a declared column
really holds no value. Names are ``"table"`` or ``"table.column"``.
"""

from __future__ import annotations

from collections.abc import Iterable

from observability.schema import TABLES

SINK_TABLES = ("runs", "contract_results")
"""Tables the sink or the gate write themselves: a producer cannot declare them unrecorded."""


def unrecorded_names(names: Iterable[str] | None) -> list[str]:
    """``names`` checked and sorted (duplicates dropped); ValueError naming the first bad one.

    A name is a table the producer writes (not ``runs`` / ``contract_results``) or
    ``table.column`` for a nullable column (a required column cannot be missing: the writer rejects its nulls).
    """
    if names is None:
        return []
    if isinstance(names, str):
        raise ValueError(f"unrecorded must be a list of names, got the string {names!r}")
    out = set()
    for name in names:
        table, _, column = str(name).partition(".")
        if table not in TABLES:
            raise ValueError(
                f"unrecorded name {name!r}: unknown table {table!r}; tables: {list(TABLES)}"
            )
        if not column and table in SINK_TABLES:
            raise ValueError(f"unrecorded name {name!r}: table {table!r} is written by the sink")
        if column:
            spec = TABLES[table]
            if not spec.has_column(column):
                raise ValueError(
                    f"unrecorded name {name!r}: table {table!r} has no column {column!r}; "
                    f"columns: {list(spec.column_names)}"
                )
            if not spec.column(column).nullable:
                raise ValueError(
                    f"unrecorded name {name!r}: {table}.{column} is required (not nullable)"
                )
        out.add(str(name))
    return sorted(out)


def covers(unrecorded: Iterable[str], need: str) -> bool:
    """Whether ``need`` (``table`` or ``table.column``) is declared unrecorded, directly or
    through its table."""
    declared = set(unrecorded)
    return need in declared or need.partition(".")[0] in declared

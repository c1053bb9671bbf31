"""CLI: ``closedloop telemetry compact RUN`` and ``closedloop telemetry verify RUN``.

``register(subparsers)`` adds the ``telemetry`` command to the main CLI; every subcommand sets
``args.func(args) -> int`` (the exit code). ``python -m observability.cli`` runs it standalone.
"""

from __future__ import annotations

import argparse
import sys

from observability.compact import compact
from observability.verify import verify


def _compact(args: argparse.Namespace) -> int:
    result = compact(args.run)
    total = sum(result.rows.values())
    print(f"compacted {result.parts} parts, {total} rows into {result.db_path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    report = verify(args.run, full=not args.quick)
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``telemetry {compact,verify}`` to an argparse subparsers object."""
    parser = subparsers.add_parser("telemetry", help="telemetry store maintenance")
    sub = parser.add_subparsers(dest="telemetry_command", required=True)
    p = sub.add_parser("compact", help="fold a run's parts into RUN/telemetry.duckdb")
    p.add_argument("run", help="run directory")
    p.set_defaults(func=_compact)
    p = sub.add_parser("verify", help="report corrupt parts (exit 1 if any)")
    p.add_argument("run", help="run directory")
    p.add_argument("--quick", action="store_true", help="read footers only, not every page")
    p.set_defaults(func=_verify)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="closedloop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

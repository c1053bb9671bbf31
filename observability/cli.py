"""CLI: ``closedloop telemetry compact|verify RUN``, ``closedloop import FRAMEWORK SRC`` and
``closedloop explain RUN [--baseline RUN] [--json]``.

``register(subparsers)`` adds the ``telemetry`` and ``import`` commands to the main CLI; every
subcommand sets ``args.func(args) -> int`` (the exit code). ``python -m observability.cli`` runs it standalone.
"""

from __future__ import annotations

import argparse
import sys

import duckdb

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


def _import(args: argparse.Namespace) -> int:
    from observability.importers import DumpError, import_dump

    try:
        result = import_dump(
            args.framework,
            args.src,
            args.run_dir,
            run_id=args.run_id,
            vocab_size=args.vocab_size,
        )
    except (DumpError, FileExistsError) as e:
        print(f"closedloop import: {e}", file=sys.stderr)
        return 2
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(
        f"imported {result.steps} steps, {result.samples} samples, {result.tokens} tokens "
        f"into {result.run_dir} ({len(result.unrecorded)} tables/columns unrecorded)"
    )
    return 0


def _explain(args: argparse.Namespace) -> int:
    import json

    from observability.explain import explain

    try:
        result = explain(args.run, args.baseline)
    except (ValueError, OSError, duckdb.Error) as e:
        print(f"closedloop explain: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.text())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``telemetry {compact,verify}``, ``import`` and ``explain`` to an argparse subparsers
    object."""
    from observability.importers import IMPORTERS

    parser = subparsers.add_parser("telemetry", help="telemetry store maintenance")
    sub = parser.add_subparsers(dest="telemetry_command", required=True)
    p = sub.add_parser("compact", help="fold a run's parts into RUN/telemetry.duckdb")
    p.add_argument("run", help="run directory")
    p.set_defaults(func=_compact)
    p = sub.add_parser("verify", help="report corrupt parts (exit 1 if any)")
    p.add_argument("run", help="run directory")
    p.add_argument("--quick", action="store_true", help="read footers only, not every page")
    p.set_defaults(func=_verify)
    p = subparsers.add_parser(
        "import", help="convert another framework's per-token dump into a closedloop run"
    )
    p.add_argument("framework", choices=list(IMPORTERS), help="the framework that wrote SRC")
    p.add_argument(
        "src",
        help="slime: the --dump-details directory; nemo-rl: the log directory with "
        "train_data_step<N>.jsonl; prime-rl: the trainer output directory (token_exports/)",
    )
    p.add_argument("--run-dir", default="runs", help="runs root: the run goes to RUNS/<run_id>/")
    p.add_argument("--run-id", default=None, help="run id (default <time>-import-<framework>-…)")
    p.add_argument(
        "--vocab-size", type=int, default=None, help="tokenizer vocabulary size (id checks)"
    )
    p.set_defaults(func=_import)
    p = subparsers.add_parser(
        "explain", help="collapse or stall, the ranked suspects and where to drill down"
    )
    p.add_argument("run", help="run directory")
    p.add_argument("--baseline", default=None, help="baseline (control) run directory")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(func=_explain)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="closedloop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

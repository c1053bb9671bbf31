"""CLI: ``closedloop gate RUN [--policy P] [--baseline RUN] [--allow-running] [--junit FILE]
[--markdown FILE]``.

Exit codes: 0 every required check passed, 1 a required check failed or errored, 2 usage error,
unreadable run, baseline or policy, or results that could not be recorded. ``register`` adds the
command to the main CLI; ``python -m contracts.cli`` runs it standalone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from contracts.gate import GateUsageError, run_gate
from contracts.record import append_results
from contracts.report import format_table, junit_xml, markdown

USAGE_ERROR = 2


def _write(path: str, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)


def _gate(args: argparse.Namespace) -> int:
    try:
        gate = run_gate(
            args.run,
            policy=args.policy,
            baseline=args.baseline,
            record=False,
            allow_running=args.allow_running,
        )
    except GateUsageError as e:
        print(f"closedloop gate: {e}", file=sys.stderr)
        return USAGE_ERROR
    print(format_table(gate))
    try:
        if args.junit:
            _write(args.junit, junit_xml(gate))
        if args.markdown:
            _write(args.markdown, markdown(gate))
        append_results(gate)
    except (OSError, ValueError) as e:
        print(f"closedloop gate: cannot write results: {e}", file=sys.stderr)
        return USAGE_ERROR
    return gate.exit_code


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``gate`` to an argparse subparsers object."""
    p = subparsers.add_parser(
        "gate", help="check a run's telemetry against the release contracts (exit 0/1/2)"
    )
    p.add_argument("run", help="run directory")
    p.add_argument(
        "--policy",
        default=None,
        help="policy TOML (default: the one that fits the run, contracts/agentic.toml for an async "
        "run, else contracts/release.toml)",
    )
    p.add_argument("--baseline", default=None, help="baseline run for the regression checks")
    p.add_argument(
        "--allow-running",
        action="store_true",
        help="gate a live run: run.finished accepts status 'running' (a killed run has it too)",
    )
    p.add_argument("--junit", default=None, metavar="FILE", help="write JUnit XML here")
    p.add_argument("--markdown", default=None, metavar="FILE", help="write a Markdown summary")
    p.set_defaults(func=_gate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="closedloop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

"""``closedloop``: the command line. Each package registers its own commands; this module only
composes them (the one module allowed to import core, contracts and dashboards together).

Commands: ``train``, ``pretrain``, ``scenario``, ``rewards`` (core) · ``telemetry`` (observability) · ``gate``
(contracts) · ``dashboard`` (dashboards) · ``demo`` (train, then gate the run).
"""

from __future__ import annotations

import argparse
import sys

import contracts.cli
import core.cli
import dashboards.cli
import observability.cli
from closedloop import demo


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="closedloop", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    core.cli.register(sub)
    demo.register(sub)
    observability.cli.register(sub)
    contracts.cli.register(sub)
    dashboards.cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    core.cli.quiet()
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

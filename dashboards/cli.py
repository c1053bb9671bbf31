"""CLI: ``closedloop dashboard [RUNS_ROOT | RUN ...] [--port 8501] [--host 127.0.0.1]``.

Resolves the runs root (a root, or the common parent of the given runs, which are preselected),
prints the URL and replaces this process with ``streamlit run dashboards/Overview.py`` (so signals
reach the server directly). Binds 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dashboards import paths

APP = Path(__file__).resolve().parent / "Overview.py"


def streamlit_command(*, port: int, host: str) -> list[str]:
    """The ``streamlit run`` command line of the app (headless, no telemetry, no file watcher)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--server.runOnSave",
        "false",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "minimal",
    ]


def _dashboard(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        print(
            f"closedloop dashboard: --port must be in [1, 65535], got {args.port}", file=sys.stderr
        )
        return 2
    try:
        root, names = paths.split_targets(args.targets)
    except paths.PathRefused as e:
        print(f"closedloop dashboard: {e}", file=sys.stderr)
        return 2
    env = {**os.environ, paths.ROOT_ENV: str(root), paths.RUNS_ENV: os.pathsep.join(names)}
    shown = f" ({', '.join(names)})" if names else ""
    print(f"closedloop dashboard over {root}{shown}: http://{args.host}:{args.port}", flush=True)
    cmd = streamlit_command(port=args.port, host=args.host)
    os.execve(sys.executable, cmd, env)
    return 0  # not reached


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``dashboard`` to an argparse subparsers object."""
    p = subparsers.add_parser("dashboard", help="live Streamlit dashboard over telemetry runs")
    p.add_argument(
        "targets",
        nargs="*",
        metavar="RUNS_ROOT | RUN",
        help="a runs root (default runs/) or one or more run directories",
    )
    p.add_argument("--port", type=int, default=8501, help="port (default 8501)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.set_defaults(func=_dashboard)

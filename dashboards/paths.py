"""Which runs the dashboard may show: the runs root, the runs under it, and path refusal.

The app only ever opens run directories *inside* the runs root it was started with; a run name
typed by a user (URL ``?run=``, CLI argument) is resolved against the root and refused when it
escapes it (``..``, absolute paths, symlinks pointing out). The root and the preselected runs
reach the Streamlit process through two environment variables set by ``closedloop dashboard``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT_ENV = "CLOSEDLOOP_DASHBOARD_ROOT"
"""Environment variable holding the runs root (default ``runs``)."""
RUNS_ENV = "CLOSEDLOOP_DASHBOARD_RUNS"
"""Environment variable holding the preselected run names, ``os.pathsep``-separated."""
TELEMETRY_DIR = "telemetry"


class PathRefused(ValueError):
    """A requested run lies outside the runs root (or is no telemetry run)."""


@dataclass(frozen=True)
class RunRef:
    """One run the dashboard shows: its name (the directory name, = ``run_id``) and directory."""

    name: str
    path: Path


def runs_root() -> Path:
    """The runs root from ``CLOSEDLOOP_DASHBOARD_ROOT`` (default ``./runs``), resolved."""
    return Path(os.environ.get(ROOT_ENV) or "runs").resolve()


def preselected() -> list[str]:
    """Run names preselected on the command line (``CLOSEDLOOP_DASHBOARD_RUNS``)."""
    raw = os.environ.get(RUNS_ENV, "")
    return [name for name in raw.split(os.pathsep) if name]


def is_run_dir(path: Path) -> bool:
    return (path / TELEMETRY_DIR).is_dir()


def list_runs(root: Path) -> list[str]:
    """Names of the telemetry runs directly under ``root``, newest first (by name, then mtime).

    Entries that resolve outside ``root`` (symlinks pointing out) are left out.
    """
    if not root.is_dir():
        return []
    root = root.resolve()
    runs = [d for d in root.iterdir() if is_run_dir(d) and d.resolve().parent == root]
    runs.sort(key=lambda d: (d.name, d.stat().st_mtime), reverse=True)
    return [d.name for d in runs]


def resolve_run(root: Path, name: str | os.PathLike) -> RunRef:
    """The run ``name`` (a directory name or a path) under ``root``; PathRefused otherwise."""
    root = Path(root).resolve()
    text = str(name)
    if not text or "\x00" in text:
        raise PathRefused(f"empty or invalid run name {text!r}")
    candidate = Path(text)
    path = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if path == root or not path.is_relative_to(root):
        raise PathRefused(f"run {text!r} is outside the runs root {root}")
    if path.parent != root:
        raise PathRefused(f"run {text!r} is not a run directory directly under {root}")
    if not is_run_dir(path):
        raise PathRefused(f"{path} is not a telemetry run (no {TELEMETRY_DIR}/ directory)")
    return RunRef(path.name, path)


def split_targets(targets: list[str]) -> tuple[Path, list[str]]:
    """CLI ``[RUNS_ROOT | RUN ...]`` → (runs root, preselected run names).

    No argument: ``./runs``. One path that is not a run: that runs root, nothing preselected (it
    may not exist yet: runs appear as training creates them). One or more run directories: their
    common parent is the root (all must share it).
    """
    if not targets:
        return Path("runs").resolve(), []
    paths = [Path(t).resolve() for t in targets]
    if len(paths) == 1 and not is_run_dir(paths[0]):
        if paths[0].exists() and not paths[0].is_dir():
            raise PathRefused(f"{targets[0]} is neither a runs root nor a run directory")
        return paths[0], []
    not_runs = [t for t, p in zip(targets, paths) if not is_run_dir(p)]
    if not_runs:
        raise PathRefused(f"not telemetry runs (no {TELEMETRY_DIR}/ directory): {not_runs}")
    parents = {p.parent for p in paths}
    if len(parents) != 1:
        raise PathRefused(
            "runs given together must share one parent directory (the runs root); got "
            + ", ".join(sorted(str(p) for p in parents))
        )
    return parents.pop(), [p.name for p in paths]

"""``RunHandle``: one run's live DuckDB connection, refreshed only when its files change.

A run's snapshot key is the modification time of its telemetry folders (a part renamed into a
table folder changes that folder's mtime), the manifest and the compacted database. While the
key is unchanged, query results are served from a per-handle memo; when it changes, the views are
rebuilt (``observability.refresh``) and the memo is dropped. The ``steps`` rollup is kept
incrementally: only steps ≥ the last one seen are queried again. A query that fails on an I/O
race is retried once after a refresh, then reported as ``QueryError`` (pages show a warning and
keep going). Streamlit-free, so the benchmark measures exactly what the pages run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import pandas as pd

import observability
from dashboards import queries
from observability.schema import TABLES

_MEMO_MAX = 256


class QueryError(RuntimeError):
    """A query failed twice (the telemetry files changed under it, or they are unreadable)."""


def snapshot_key(run_dir: Path) -> tuple[int, ...]:
    """mtimes (ns) of the telemetry folder, each table folder, manifest and compacted DB."""
    tele = run_dir / "telemetry"
    paths = [tele, tele / "manifest.json", run_dir / "telemetry.duckdb"]
    paths += [tele / name for name in TABLES]
    key = []
    for p in paths:
        try:
            key.append(os.stat(p).st_mtime_ns)
        except OSError:
            key.append(0)
    return tuple(key)


class RunHandle:
    """One run's connection, its snapshot key, a result memo and the incremental steps rollup."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self._lock = threading.RLock()
        self._key = snapshot_key(self.run_dir)
        self.con = observability.open_run(self.run_dir)
        self._memo: dict[tuple, object] = {}
        self._steps: pd.DataFrame | None = None
        self._steps_key: tuple[int, ...] | None = None

    def _sync(self, force: bool = False) -> None:
        key = snapshot_key(self.run_dir)
        if force or key != self._key:
            observability.refresh(self.con)
            self._key = key
            self._memo.clear()

    def query(self, fn: Callable[..., object], **params) -> object:
        """``fn(con, **params)`` (a ``dashboards.queries`` function) on the current snapshot."""
        memo_key = (fn.__name__, tuple(sorted(params.items())))
        with self._lock:
            self._sync()
            if memo_key in self._memo:
                return _copy(self._memo[memo_key])
            result = self._run(lambda: fn(self.con, **params))
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[memo_key] = result
            return _copy(result)

    def steps(self) -> pd.DataFrame:
        """The whole ``steps`` rollup; after the first call only steps ≥ the last seen are read."""
        with self._lock:
            self._sync()
            if self._steps is not None and self._steps_key == self._key:
                return self._steps.copy()
            old = self._steps
            start = int(old["step"].max()) if old is not None and len(old) else 0
            new = self._run(lambda: queries.steps(self.con, from_step=start))
            if old is not None and len(old):
                keep = old[old["step"] < start]
                new = pd.concat([keep, new], ignore_index=True) if len(keep) else new
            self._steps, self._steps_key = new, self._key
            return new.copy()

    def _run(self, call: Callable[[], object]) -> object:
        try:
            return call()
        except (duckdb.IOException, duckdb.InvalidInputException, duckdb.InternalException):
            pass  # a part set changed under the snapshot: rebuild the views, try once more
        try:
            self._sync(force=True)
            return call()
        except duckdb.Error as e:
            raise QueryError(f"query on {self.run_dir.name} failed: {e}") from e


def _copy(result: object) -> object:
    return result.copy() if isinstance(result, pd.DataFrame) else result

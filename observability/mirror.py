"""Mirrors of the step rollups into the trackers users already watch (``--telemetry duckdb,tensorboard``).

``Mirrored(sink, mirrors)`` is a sink that tees: every batch goes to ``sink`` (the DuckDB store
stays the source of truth, and its validation decides what a run holds); each ``steps`` row is
also handed to every mirror as scalars tagged ``steps/<column>`` at the row's step.
``TensorBoardMirror`` writes them with the ``tensorboard`` package's event-file writer into
``RUN_DIR/tensorboard/``. ``WandbMirror`` logs them to an offline W&B run in ``RUN_DIR/wandb/``
(``wandb sync`` uploads it later; nothing is sent while training). Simplifications: only numeric
``steps`` columns are mirrored (nulls, NaN, strings and times are skipped); a mirror that fails is
reported by ``close`` and never stops the store; W&B drops a row whose step is below one it
already logged (its steps only increase); closing the W&B mirror ends the process's W&B service.
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MIRRORS = {"tensorboard": "tensorboard", "wandb": "wandb"}
"""Mirror names ``--telemetry`` accepts after ``duckdb`` → the package each needs (an extra of
the same name: ``pip install 'closedloop[wandb]'``)."""
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"


def _column(values: Any, n: int) -> np.ndarray | None:
    """A numeric column as float64 [n] (NaN where null), or None when it is not numeric."""
    if hasattr(values, "detach"):  # a CPU tensor
        values = values.detach().float().numpy()
    if isinstance(values, np.ma.MaskedArray):
        values = values.astype(np.float64).filled(np.nan)
    try:
        a = np.array(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    if a.size == 1 and n > 1:
        a = np.full(n, a[0])
    return a if a.size == n else None


def step_scalars(columns: Mapping[str, Any]) -> list[tuple[int, dict[str, float]]]:
    """``(step, {column: value})`` for each row of a ``steps`` batch (finite numbers only)."""
    steps = _column(columns["step"], np.size(columns["step"]))
    n = len(steps)
    numeric = {}
    for name, values in columns.items():
        if name in ("step", "rank") or isinstance(values, str) or values is None:
            continue
        if isinstance(values, list) and any(isinstance(v, str | bool) for v in values):
            continue
        col = _column(values, n)
        if col is not None:
            numeric[name] = col
    return [
        (int(steps[i]), {k: float(v[i]) for k, v in numeric.items() if np.isfinite(v[i])})
        for i in range(n)
    ]


class TensorBoardMirror:
    """Step scalars as a TensorBoard event file in ``RUN_DIR/tensorboard/``."""

    def __init__(self, run_dir: str | Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.log_dir = Path(run_dir) / TENSORBOARD_DIR
        self._writer = EventFileWriter(str(self.log_dir))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(
            value=[Summary.Value(tag=f"steps/{k}", simple_value=v) for k, v in values.items()]
        )
        self._writer.add_event(Event(step=step, wall_time=time.time(), summary=summary))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbMirror:
    """Step scalars logged to an offline W&B run in ``RUN_DIR/wandb/`` (named after the run id,
    ``run_info`` as its config)."""

    def __init__(self, run_dir: str | Path, *, run_info: Mapping[str, Any] | None = None) -> None:
        import wandb

        run_dir = Path(run_dir)
        self.log_dir = run_dir / WANDB_DIR
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            mode="offline",
            dir=str(run_dir),
            project="closedloop",
            name=run_dir.name,
            config=dict(run_info or {}),
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True),
        )

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._run.log({f"steps/{k}": v for k, v in values.items()}, step=step)

    def flush(self) -> None:
        """Nothing to do: the offline run's writer appends as rows are logged."""

    def close(self) -> None:
        """Finish the run and wait until its file is whole: ``finish`` alone returns before
        wandb's service has written the last records, and a signal's default action would not
        wait for it. Simplification: that service is the process's, so another W&B run still
        open in the same process ends too."""
        import wandb

        self._run.finish()
        wandb.teardown()


def check_mirror(name: str) -> None:
    """ValueError naming the ``--telemetry`` option on an unknown mirror or a missing package."""
    if name not in MIRRORS:
        raise ValueError(f"telemetry mirror {name!r} not in {list(MIRRORS)}")
    package = MIRRORS[name]
    if importlib.util.find_spec(package) is None:
        raise ValueError(
            f"--telemetry duckdb,{name} needs the {package} package, which is not installed: "
            f"pip install 'closedloop[{name}]'"
        )


def open_mirror(
    name: str, run_dir: str | Path, *, run_info: Mapping[str, Any] | None = None
) -> TensorBoardMirror | WandbMirror:
    """The mirror ``name``; ValueError naming the option on a typo or a missing package."""
    check_mirror(name)
    try:
        if name == "wandb":
            return WandbMirror(run_dir, run_info=run_info)
        return TensorBoardMirror(run_dir)
    except ImportError as e:
        raise ValueError(f"--telemetry duckdb,{name} needs the {MIRRORS[name]} package: {e}") from e


class Mirrored:
    """A sink that tees ``steps`` rows to mirrors; everything else is ``sink``'s."""

    def __init__(self, sink: Any, mirrors: Sequence[Any]) -> None:
        self.sink = sink
        self.mirrors = list(mirrors)
        self._errors: list[str] = []

    def __getattr__(self, name: str) -> Any:  # run_id, run_dir, flush, ... of the store
        return getattr(self.sink, name)

    def emit(self, table: str, columns: Mapping[str, Any]) -> None:
        self.sink.emit(table, columns)  # the store first: it validates the batch
        if table == "steps" and self.mirrors:
            for step, values in step_scalars(columns):
                self._each(lambda m, s=step, v=values: m.scalars(s, v))

    def step_end(self, step: int) -> None:
        self.sink.step_end(step)
        self._each(lambda m: m.flush())

    def close(self, status: str = "finished") -> None:
        try:
            self.sink.close(status)
        finally:
            self._each(lambda m: m.close())
            self.mirrors = []
            if self._errors:
                warnings.warn(f"telemetry mirrors failed: {self._errors[:3]}", stacklevel=2)

    def _each(self, call) -> None:
        for mirror in self.mirrors:
            try:
                call(mirror)
            except Exception as e:  # a mirror never stops the store
                self._errors.append(f"{type(mirror).__name__}: {e}")

"""Importers: another framework's per-token dump -> a closedloop run (same schema, same gate).

``import_dump(framework, src, runs_root)`` reads the dump with the framework's reader (one
module per framework, each pinning the commit whose writer code it follows) and writes the run
all-or-nothing (``atomic_run``). Fields a dump lacks stay null and are declared in
``runs.unrecorded``, so the gate reports the checks needing them ``not_applicable``.
"""

from __future__ import annotations

import importlib
import time
import uuid
from pathlib import Path
from types import ModuleType

from observability.importers.atomic_run import ImportResult, write_run
from observability.importers.dump import DumpError

IMPORTERS = {
    "slime": "observability.importers.slime",
    "nemo-rl": "observability.importers.nemo_rl",
    "prime-rl": "observability.importers.prime_rl",
}
"""Framework name (as the CLI spells it) -> reader module."""

__all__ = ["IMPORTERS", "DumpError", "ImportResult", "import_dump", "reader"]


def reader(framework: str) -> ModuleType:
    """The reader module of ``framework``; ValueError listing the frameworks on a typo."""
    if framework not in IMPORTERS:
        raise ValueError(f"unknown framework {framework!r}; importers: {list(IMPORTERS)}")
    return importlib.import_module(IMPORTERS[framework])


def import_dump(
    framework: str,
    src: str | Path,
    runs_root: str | Path,
    *,
    run_id: str | None = None,
    vocab_size: int | None = None,
) -> ImportResult:
    """Import ``src`` (a ``framework`` dump) as ``RUNS/<run_id>``; DumpError on bad input.

    ``run_id`` defaults to ``<time>-import-<framework>-<random>``; ``vocab_size`` (the dump
    does not hold it) enables the store's token-id range checks.
    """
    module = reader(framework)
    src = Path(src)
    if not src.exists():
        raise DumpError(f"{src}: no such file or directory")
    if vocab_size is not None and vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    run_id = run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-import-{framework}-{uuid.uuid4().hex[:6]}"
    info = {
        "config": {
            "import": {
                "framework": framework,
                "source": str(src.resolve()),
                "source_repo": module.SOURCE_REPO,
                "source_commit": module.SOURCE_COMMIT,
            }
        },
        "vocab_size": vocab_size,
    }
    steps = module.read_steps(src, vocab_size=vocab_size)
    return write_run(steps, runs_root=runs_root, run_id=run_id, run_info=info)

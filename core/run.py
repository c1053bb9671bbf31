"""Starting a run: its directory ``RUNS/<run_id>/``, resolved config, log and telemetry sink."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from core.algorithms.config import run_label
from core.config import RunConfig
from observability.telemetry import NullTelemetry

REPO_ROOT = Path(__file__).resolve().parent.parent


def git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def new_run_dir(runs_root: str | Path, name: str = "grpo") -> Path:
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-{uuid.uuid4().hex[:6]}"
    path = Path(runs_root) / run_id
    path.mkdir(parents=True, exist_ok=False)
    return path


def open_telemetry(
    kind: str,
    run_dir: Path,
    cfg: RunConfig,
    *,
    tokenizer_rev: str,
    chat_template_rev: str,
    vocab_size: int,
):
    """``none`` → ``NullTelemetry``; ``duckdb`` → the Parquet-parts store of ``observability``;
    ``duckdb,tensorboard`` / ``duckdb,wandb`` (or both) → the store, its ``steps`` rows also
    written as TensorBoard scalars to ``RUN_DIR/tensorboard/`` / an offline W&B run in
    ``RUN_DIR/wandb/`` (``observability.mirror``; the store stays the source of truth)."""
    if kind == "none":
        return NullTelemetry(run_id=run_dir.name, run_dir=str(run_dir))
    from observability import DuckDBTelemetry
    from observability.mirror import Mirrored, open_mirror

    kinds = check_telemetry(kind)

    a = cfg.algorithm
    info = {
        "config": cfg.to_dict(),
        "git_sha": git_sha(),
        "device": "cpu",
        "algorithm": run_label(a.name, a.advantage, len(set(cfg.teachers.routes.values()))),
        "tokenizer_rev": tokenizer_rev,
        "chat_template_rev": chat_template_rev,
        "vocab_size": vocab_size,
        "icepop_beta": a.icepop_beta if a.trust_rule == "icepop" else None,
        "dis_eps_low": a.eps_low if a.trust_rule == "dis" else None,
        "dis_eps_high": a.eps_high if a.trust_rule == "dis" else None,
        "staleness_limit": a.staleness_limit,
    }
    # mirrors first: a missing package fails before the store exists
    mirrors = [open_mirror(k, run_dir, run_info=info) for k in kinds[1:]]
    sink = DuckDBTelemetry(run_dir, run_id=run_dir.name, run_info=info, config=cfg.telemetry)
    return Mirrored(sink, mirrors) if mirrors else sink


def telemetry_choices() -> list[str]:
    """What ``--telemetry`` accepts: ``none``, ``duckdb``, and ``duckdb`` followed by mirrors."""
    from itertools import combinations

    from observability.mirror import MIRRORS

    mirrors = [",".join(c) for n in range(1, len(MIRRORS) + 1) for c in combinations(MIRRORS, n)]
    return ["duckdb", "none", *(f"duckdb,{m}" for m in mirrors)]


def check_telemetry(kind: str) -> list[str]:
    """``kind`` split at commas; ValueError naming ``--telemetry`` on an unknown kind or a mirror
    whose package is not installed (before anything of the run is written)."""
    from observability.mirror import check_mirror

    if kind not in telemetry_choices():
        raise ValueError(f"--telemetry {kind!r} not in {telemetry_choices()}")
    kinds = kind.split(",")
    for mirror in kinds[1:]:
        check_mirror(mirror)
    return kinds


def is_store(kind: str) -> bool:
    """Whether ``--telemetry kind`` writes the DuckDB store (``duckdb`` with or without mirrors)."""
    return kind.split(",")[0] == "duckdb"


def write_resolved_config(run_dir: Path, cfg: RunConfig) -> None:
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True) + "\n")


def write_tokenizer(run_dir: Path, tokenizer_path: str | Path) -> Path:
    """Copy the run's tokenizer JSON to ``RUN_DIR/tokenizer.json`` (readers decode the run's ids
    with the tokenizer that produced them; its sha256 is the run's ``tokenizer_rev``)."""
    out = run_dir / "tokenizer.json"
    shutil.copyfile(tokenizer_path, out)
    return out


def file_logger(run_dir: Path) -> logging.Logger:
    log = logging.getLogger(f"closedloop.{run_dir.name}")
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(run_dir / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    return log

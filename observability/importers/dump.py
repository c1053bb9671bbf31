"""What every importer reads a dump into (``DumpStep``), how it reports bad input (``DumpError``),
and the JSON-lines reading that NeMo-RL and prime-rl dumps share.

Errors name the file and the record (``file:line`` for JSON lines, ``file: sample i`` for torch
files) and say what is wrong with it; a record cut short by a crash is reported as truncated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from observability.trajectory import Trajectory


class DumpError(ValueError):
    """Bad or truncated input; the message names the file and the record."""


@dataclass(frozen=True)
class DumpStep:
    """One training step of a dump, as closedloop trajectories."""

    step: int
    """The framework's own step number (as its logs show it)."""
    policy_version: int
    """The weights version after the step (``steps.policy_version``)."""
    trajectories: list[Trajectory]
    source: str
    """The file(s) the step was read from, for error messages."""
    values: Mapping[str, Any] = field(default_factory=dict)
    """Other ``steps`` columns the dump records for the step."""


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) of every line of ``path``; DumpError on an unreadable file, a line
    that is not one JSON object, or a last line without its newline (a truncated write)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DumpError(f"{path}: cannot read: {e}") from e
    if text and not text.endswith("\n"):
        n = text.count("\n") + 1
        raise DumpError(f"{path}:{n}: truncated: the last record has no newline")
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DumpError(f"{path}:{i}: not a complete JSON record ({e})") from None
        if not isinstance(record, dict):
            raise DumpError(f"{path}:{i}: a JSON object expected, got {type(record).__name__}")
        yield i, record


def require(record: Mapping[str, Any], key: str, where: str) -> Any:
    """``record[key]``; DumpError naming the record when the key is absent."""
    if key not in record:
        raise DumpError(f"{where}: missing field {key!r} (fields: {sorted(record)})")
    return record[key]


def floats(values: Any, where: str, name: str) -> np.ndarray:
    """A list of numbers (null allowed: NaN) as float64; DumpError otherwise."""
    try:
        return np.array(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise DumpError(f"{where}: field {name!r} is not a list of numbers ({e})") from None


def ints(values: Any, where: str, name: str) -> np.ndarray:
    """A list of integers as int64; DumpError on anything else (floats with fractions, nulls)."""
    a = floats(values, where, name)
    if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
        raise DumpError(f"{where}: field {name!r} holds non-integer values")
    return a.astype(np.int64)


def check_trajectory(tr: Trajectory, where: str, vocab_size: int | None = None) -> Trajectory:
    """``tr`` after the value rules the store enforces on a row, raised as DumpError naming the
    record and position: token ids in [0, ``vocab_size``) (int32 without one), log-probs <= 0."""
    limit = vocab_size if vocab_size is not None else 2**31  # token ids are int32
    for name in ("token_ids", "train_token_ids"):
        ids = getattr(tr, name)
        if ids is None:
            continue
        bad = np.flatnonzero(np.ma.filled((ids < 0) | (ids >= limit), False))
        if len(bad):
            raise DumpError(f"{where}: {name} {ids[bad[0]]} at position {bad[0]} out of range")
    for name in ("rollout_logp", "train_logp", "old_logp"):
        values = getattr(tr, name)
        if values is None:
            continue
        positive = np.flatnonzero(tr.action & (values > 0))  # NaN compares False
        if len(positive):
            p = positive[0]
            raise DumpError(
                f"{where}: {name} {float(values[p]):g} > 0 at position {p} (a log-prob is <= 0)"
            )
    return tr


def finite_or_none(value: Any) -> float | None:
    """A finite float, or None."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None

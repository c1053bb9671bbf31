"""prime-rl token exports -> closedloop steps (format of PrimeIntellect-ai/prime-rl at commit
559b44772e471d1538537b8805cc77f3824a5e64).

What prime-rl writes, from its source at that commit: with ``trainer.enable_token_export``,
``src/prime_rl/trainer/rl/token_export.py::TokenExporter`` appends one JSON line per exported
sequence (``json.dumps(allow_nan=False)``; non-finite floats become null) to
``<output_dir>/token_exports/step_<step>/rank_<rank>.jsonl``, and ``mark_stable`` touches
``step_<step>/STABLE`` once every rank has written the step (after a barrier in
``trainer/rl/train.py``). A record: ``schema_version`` 1, ``step``, ``rank``, ``micro_step``,
``micro_sequence_idx``, ``export_sequence_idx``, ``env_name`` and aligned per-token lists
``token_ids``, ``position_ids``, ``loss_mask``, ``advantages``, ``inference_logprobs``,
``trainer_logprobs`` (shifted right in ``train.py``: entry t is token t's), ``entropy``,
``mismatch_kl``, ``log_importance_ratio``, ``importance_ratio``, ``prob_delta``,
``is_masked`` / ``is_masked_high`` / ``is_masked_low`` (DPPO's probability-difference mask;
null lists for other losses), ``rl_weights`` / ``ce_weights`` / ``ref_kl_weights`` (null
lists: the defaults, rl on the loss mask). ``progress.step`` starts at 1; step s trains and
publishes policy v{s}.

Mapping: step = s, policy_version = s; one sample per record, in (rank, export) order; the
prompt ends at the first loss-mask token, later tokens outside it are observations (environment
turns); ``trust_mask`` = not ``is_masked`` on loss tokens (the rule's thresholds are not
exported: ``mask_reason`` unrecorded); ``domain`` = ``env_name``.
Refused: a step directory without ``STABLE`` (not completely written), records whose weight
streams put tokens the policy did not sample into the loss (ce-only distillation tokens).
Not in the format, hence unrecorded: the rollout's own ids (TITO is not checkable; a
re-tokenized id shows only as a log-prob gap), rewards, groups, policy versions, tokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from observability.importers.dump import (
    DumpError,
    DumpStep,
    check_trajectory,
    floats,
    ints,
    read_jsonl,
    require,
)
from observability.trajectory import Trajectory

SOURCE_REPO = "PrimeIntellect-ai/prime-rl"
SOURCE_COMMIT = "559b44772e471d1538537b8805cc77f3824a5e64"
SCHEMA_VERSION = 1
EXPORT_DIR = "token_exports"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_RANK_FILE = re.compile(r"^rank_(\d+)\.jsonl$")


def _step_dirs(src: Path) -> list[tuple[int, Path]]:
    root = src / EXPORT_DIR if (src / EXPORT_DIR).is_dir() else src
    dirs = (
        sorted((int(m[1]), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)))
        if root.is_dir()
        else []
    )
    if not dirs:
        raise DumpError(f"{src}: no {EXPORT_DIR}/step_<N>/ directories")
    return dirs


def _list(record: dict, key: str, where: str, n: int, *, kind=floats) -> np.ndarray | None:
    """Per-token list ``key`` (None when the whole list is null: the field is not computed)."""
    value = require(record, key, where)
    if not isinstance(value, list) or len(value) != n:
        raise DumpError(f"{where}: field {key!r} is not a list of {n} values")
    if all(v is None for v in value):
        return None
    return kind(value, where, key)


def _trajectory(record: dict, *, sample_id: int, where: str, vocab_size: int | None):
    if record.get("schema_version") != SCHEMA_VERSION:
        raise DumpError(
            f"{where}: schema_version {record.get('schema_version')!r}, this importer reads "
            f"{SCHEMA_VERSION} (prime-rl {SOURCE_COMMIT[:12]})"
        )
    ids = require(record, "token_ids", where)
    if not isinstance(ids, list):
        raise DumpError(f"{where}: field 'token_ids' is not a list")
    n = len(ids)
    ids = ints(ids, where, "token_ids")
    loss = _list(record, "loss_mask", where, n, kind=ints)
    if loss is None:
        raise DumpError(f"{where}: field 'loss_mask' is null")
    loss = loss != 0
    rl = _list(record, "rl_weights", where, n)
    ref_kl = _list(record, "ref_kl_weights", where, n)
    sampled = np.ones(n, bool) if rl is None else rl != 0
    if ref_kl is not None:
        sampled |= ref_kl != 0
    if np.any(loss & ~sampled):
        p = int(np.flatnonzero(loss & ~sampled)[0])
        raise DumpError(
            f"{where}: loss token at position {p} was not sampled by the policy (ce-only "
            "weight stream): distillation records are not supported"
        )
    masked = _list(record, "is_masked", where, n, kind=ints)
    tr = Trajectory(
        sample_id=sample_id,
        token_ids=ids,
        n_prompt=int(np.argmax(loss)) if loss.any() else n,
        rollout_logp=_list(record, "inference_logprobs", where, n),
        train_logp=_list(record, "trainer_logprobs", where, n),
        action=loss,
        loss_mask=loss,
        advantage=_list(record, "advantages", where, n),
        entropy=_list(record, "entropy", where, n),
        trust_mask=None if masked is None else masked == 0,
        sample={"domain": record.get("env_name")},
    )
    return check_trajectory(tr, where, vocab_size)


def read_steps(src: str | Path, *, vocab_size: int | None = None) -> Iterator[DumpStep]:
    """The steps of the prime-rl output directory (or its ``token_exports/``) ``src``."""
    next_id = 0
    for step, directory in _step_dirs(Path(src)):
        if not (directory / "STABLE").is_file():
            raise DumpError(f"{directory}: no STABLE marker: the trainer did not finish the step")
        files = sorted(
            (int(m[1]), p) for p in directory.iterdir() if (m := _RANK_FILE.match(p.name))
        )
        trajs = []
        for _, path in files:  # a rank's records in export order (export_sequence_idx)
            for line, record in read_jsonl(path):
                where = f"{path}:{line}"
                if record.get("step") != step:
                    raise DumpError(f"{where}: step {record.get('step')!r} in {directory.name}")
                trajs.append(
                    _trajectory(record, sample_id=next_id, where=where, vocab_size=vocab_size)
                )
                next_id += 1
        if not trajs:
            raise DumpError(f"{directory}: no records")
        yield DumpStep(step, step, trajs, source=str(directory))

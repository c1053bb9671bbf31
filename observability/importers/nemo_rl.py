"""NeMo-RL ``train_data_step{N}.jsonl`` -> closedloop steps (format of NVIDIA-NeMo/RL at commit
7ea279abfbeb698b092856d0dab61e7cf39bc909).

What NeMo-RL writes, from its source at that commit: ``nemo_rl/algorithms/grpo.py``
(``grpo_train``, ``async_grpo_train``; ``grpo_sync.py`` and ``ppo.py`` alike) builds
``log_data`` = ``content``, ``rewards``, ``input_lengths``, ``token_ids`` [B, T] (right-padded
``train_data["input_ids"]``), ``token_loss_mask`` [B, T], ``sample_loss_mask`` [B],
``advantages`` [B, T], ``generation_logprobs`` [B, T], ``prev_logprobs`` [B, T] (plus
``agent_ref``, and ``filtered_rewards`` under dynamic sampling) and hands it to
``nemo_rl/utils/logger.py::Logger.log_batched_dict_as_jsonl``, which writes one line per sample
from ``make_microbatch_iterator(1)``: every key holds a one-element list, plus ``"idx": i``.
Log-probs follow the policy workers' convention (``get_logprobs``): entry t is token t's, the
first is 0. ``token_loss_mask`` marks generated assistant tokens
(``add_grpo_token_loss_masks_and_generation_logprobs``); ``prev_logprobs`` is the trainer's
forward before the update, or a zero placeholder when ``skip_prev_logprobs``
(``force_on_policy_ratio``).

Mapping: step = N, policy_version = N (N steps done); one sample per line, ``input_lengths``
tokens; the prompt ends at the first loss-mask token, later tokens outside it are observations
(environment turns); loss mask = ``token_loss_mask`` and ``sample_loss_mask``, status
``masked`` when the sample's mask is 0; reward: ``filtered_rewards`` when present (the trained
ones), else ``rewards``. A run whose every ``prev_logprobs`` entry on generated tokens is 0 has
no trainer log-probs (the placeholder): ``train_logp`` is unrecorded. Not in the format, hence
unrecorded: the rollout's own token ids (TITO is not checkable; a re-tokenized id shows only as
a log-prob gap), groups, policy versions, tokenizer and sampling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from observability.importers.dump import (
    DumpError,
    DumpStep,
    check_trajectory,
    finite_or_none,
    floats,
    ints,
    read_jsonl,
    require,
)
from observability.trajectory import Trajectory

SOURCE_REPO = "NVIDIA-NeMo/RL"
SOURCE_COMMIT = "7ea279abfbeb698b092856d0dab61e7cf39bc909"
_FILE = re.compile(r"^train_data_step(\d+)\.jsonl$")
_ROW_KEYS = ("token_ids", "token_loss_mask", "generation_logprobs", "prev_logprobs")


def _one(record: dict, key: str, where: str, *, required: bool = False) -> Any:
    """The single element of ``record[key]`` (a one-sample microbatch); None when absent."""
    if key not in record:
        return require(record, key, where) if required else None
    value = record[key]
    if not isinstance(value, list) or len(value) != 1:
        raise DumpError(f"{where}: field {key!r} is not a one-sample list")
    return value[0]


def _files(src: Path) -> list[tuple[int, Path]]:
    paths = [src] if src.is_file() else sorted(src.iterdir()) if src.is_dir() else []
    files = sorted((int(m[1]), p) for p in paths if (m := _FILE.match(p.name)))
    if not files:
        raise DumpError(f"{src}: no train_data_step<N>.jsonl files")
    return files


def _trajectory(record: dict, *, sample_id: int, where: str, vocab_size: int | None):
    """(trajectory, whether its generated tokens' prev_logprobs are all exactly 0)."""
    n = _one(record, "input_lengths", where, required=True)
    if not isinstance(n, int) or n < 0:
        raise DumpError(f"{where}: input_lengths {n!r} is not a length")
    rows = {}
    for key in (*_ROW_KEYS, "advantages"):
        value = _one(record, key, where, required=key in _ROW_KEYS)
        if value is None:
            continue
        a = ints(value, where, key) if key == "token_ids" else floats(value, where, key)
        if len(a) < n:
            raise DumpError(f"{where}: field {key!r} has {len(a)} values, input_lengths={n}")
        rows[key] = a[:n]  # right padding dropped
    gen = rows["token_loss_mask"] != 0
    mask = _one(record, "sample_loss_mask", where)
    in_loss = mask is None or finite_or_none(mask) != 0
    reward = _one(record, "filtered_rewards", where)
    reward = _one(record, "rewards", where) if reward is None else reward
    tr = Trajectory(
        sample_id=sample_id,
        token_ids=rows["token_ids"],
        n_prompt=int(np.argmax(gen)) if gen.any() else n,
        rollout_logp=rows["generation_logprobs"],
        train_logp=rows["prev_logprobs"],
        action=gen,
        loss_mask=gen & in_loss,
        advantage=rows.get("advantages"),
        reward=finite_or_none(reward),
        status="trained" if in_loss or not gen.any() else "masked",
    )
    placeholder = not np.any(rows["prev_logprobs"][gen])
    return check_trajectory(tr, where, vocab_size), placeholder


def read_steps(src: str | Path, *, vocab_size: int | None = None) -> Iterator[DumpStep]:
    """The steps of the NeMo-RL log directory (or one file) ``src``, in step order."""
    next_id = 0
    placeholders: bool | None = None  # decided by the first file: a run skips the forward or not
    for n, path in _files(Path(src)):
        read = []
        for line, record in read_jsonl(path):
            read.append(
                _trajectory(
                    record, sample_id=next_id, where=f"{path}:{line}", vocab_size=vocab_size
                )
            )
            next_id += 1
        if not read:
            raise DumpError(f"{path}: no records")
        if placeholders is None:
            placeholders = all(p for _, p in read)
        trajs = [replace(tr, train_logp=None) if placeholders else tr for tr, _ in read]
        yield DumpStep(n, n, trajs, source=str(path))

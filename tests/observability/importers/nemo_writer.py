"""NeMo-RL's ``train_data_step{N}.jsonl`` writer, re-enacted for fixtures (NVIDIA-NeMo/RL @
7ea279abfbeb).

``write_step`` follows ``grpo_train``'s logging block (``nemo_rl/algorithms/grpo.py``): the
flattened batch as [B, T] lists right-padded to a multiple of
``make_sequence_length_divisible_by``, ``prev_logprobs`` with the workers' convention (entry t
is token t's, the first is 0; prompt entries are real trainer values), and the truncated sample's
``sample_loss_mask`` set to 0 (overlong filtering). ``log_batched_dict_as_jsonl``
(``nemo_rl/utils/logger.py``) writes one line per sample of ``make_microbatch_iterator(1)``:
every key's one-sample slice, plus ``"idx"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.observability.importers.episodes import Episode

PAD_ID = 0
DIVISIBLE_BY = 8


def log_data(episodes: list[Episode], *, seed: int = 0) -> dict[str, list]:
    """The ``log_data`` dict of one step (lists, as after ``.tolist()``)."""
    rng = np.random.default_rng(seed)
    lengths = [len(e.prompt) + len(e.train_response) for e in episodes]
    width = -(-max(lengths) // DIVISIBLE_BY) * DIVISIBLE_BY
    rows: dict[str, list] = {
        k: [] for k in ("token_ids", "token_loss_mask", "advantages", "gen", "prev")
    }
    for e, n in zip(episodes, lengths):
        p, pad = len(e.prompt), width - n
        rows["token_ids"].append(e.prompt + e.train_response + [PAD_ID] * pad)
        rows["token_loss_mask"].append([0] * p + [1] * len(e.train_response) + [0] * pad)
        rows["advantages"].append([e.advantage] * width)
        rows["gen"].append([0.0] * p + list(e.rollout_logp) + [0.0] * pad)
        prompt_lp = (-rng.uniform(0.1, 6.0, size=p)).tolist()
        rows["prev"].append([0.0] + prompt_lp[1:] + list(e.train_logp) + [0.0] * pad)
    return {
        "content": [[f"question {e.index}", f"answer {e.index}"] for e in episodes],
        "rewards": [e.reward for e in episodes],
        "input_lengths": lengths,
        "token_ids": rows["token_ids"],
        "token_loss_mask": rows["token_loss_mask"],
        "sample_loss_mask": [0.0 if e.truncated else 1.0 for e in episodes],
        "advantages": rows["advantages"],
        "generation_logprobs": rows["gen"],
        "prev_logprobs": rows["prev"],
    }


def log_batched_dict_as_jsonl(to_log: dict[str, list], path: Path) -> None:
    """``Logger.log_batched_dict_as_jsonl``: ``slice(i, i + 1)`` of every key, one line each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    size = len(next(iter(to_log.values())))
    with open(path, "w") as f:
        for i in range(size):
            sample = {key: value[i : i + 1] for key, value in to_log.items()}
            f.write(json.dumps({**sample, "idx": i}, default=str) + "\n")


def write_log(log_dir: Path, steps: list[list[Episode]], *, placeholder: bool = False) -> Path:
    """``train_data_step{N}.jsonl`` for N = 1, 2, ...; ``placeholder``: the run skipped the
    prev_logprobs forward (zeros)."""
    for n, episodes in enumerate(steps, start=1):
        data = log_data(episodes, seed=n)
        if placeholder:
            data["prev_logprobs"] = [[0.0] * len(row) for row in data["prev_logprobs"]]
        log_batched_dict_as_jsonl(data, log_dir / f"train_data_step{n}.jsonl")
    return log_dir

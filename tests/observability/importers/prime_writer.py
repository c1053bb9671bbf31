"""prime-rl's token export, re-enacted for fixtures (PrimeIntellect-ai/prime-rl @ 559b44772e47).

``export`` follows ``TokenExporter.export`` and ``_export_columns`` /
``_compute_export_tensors`` (``src/prime_rl/trainer/rl/token_export.py``) on packed micro
batches: samples concatenated with padding (``env_names`` "" and no loss mask) at the end, the
trainer's log-probs and entropy shifted right as ``trainer/rl/train.py`` does (the first entry
is log(1/V)), DPPO masks of ``DefaultLossConfig`` (0.2 / 0.2), records written with
``json.dumps(separators=(",", ":"), allow_nan=False)`` and non-finite floats as null;
``mark_stable`` touches ``STABLE`` once every rank has written the step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from tests.observability.importers.episodes import VOCAB, Episode

DPPO_MASK_LOW = DPPO_MASK_HIGH = 0.2
PAD = 3
"""Padding tokens at the end of each packed micro batch."""


def _json_float(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _micro_batch(episodes: list[Episode], rng) -> tuple[dict, np.ndarray, np.ndarray, list[int]]:
    """A packed micro batch: columns [N], trainer log-probs and entropy [N] (shifted right),
    and the per-sample sequence lengths (the last one includes the padding)."""
    cols: dict[str, list] = {
        k: []
        for k in ("input_ids", "position_ids", "loss_mask", "advantages", "inference_logprobs")
    }
    env_names: list[str] = []
    logprobs, entropy, lengths = [], [], []
    for e in episodes:
        p, r = len(e.prompt), len(e.train_response)
        cols["input_ids"] += e.prompt + e.train_response
        cols["position_ids"] += list(range(p + r))
        cols["loss_mask"] += [False] * p + [True] * r
        cols["advantages"] += [e.advantage] * (p + r)
        cols["inference_logprobs"] += [0.0] * p + list(e.rollout_logp)
        env_names += ["arith"] * (p + r)
        logprobs += (-rng.uniform(0.1, 6.0, size=p)).tolist() + list(e.train_logp)
        entropy += rng.uniform(0.1, 3.0, size=p).tolist() + list(e.entropy)
        lengths.append(p + r)
    cols["input_ids"] += [0] * PAD
    cols["position_ids"] += list(range(PAD))
    cols["loss_mask"] += [False] * PAD
    cols["advantages"] += [0.0] * PAD
    cols["inference_logprobs"] += [0.0] * PAD
    env_names += [""] * PAD
    logprobs += [-1.0] * PAD
    entropy += [1.0] * PAD
    lengths[-1] += PAD
    cols["env_names"] = env_names
    # train.py: shift_tensor_right(pad_value=log(1/V)) on the per-position log-probs (the
    # logprob of token t sits at t); entries already are token t's, so the shift is the data.
    lp = np.array(logprobs, dtype=np.float32)
    lp[0] = math.log(1.0 / VOCAB)
    ent = np.array(entropy, dtype=np.float32)
    ent[0] = math.log(VOCAB)
    return cols, lp, ent, lengths


def _export_columns(cols: dict, lp: np.ndarray, ent: np.ndarray) -> dict[str, list]:
    """``_export_columns`` + ``_compute_export_tensors`` with ``DefaultLossConfig``."""
    n = len(cols["input_ids"])
    inference = np.array(cols["inference_logprobs"], dtype=np.float32)
    loss = np.array(cols["loss_mask"])
    adv = np.array(cols["advantages"], dtype=np.float32)
    log_ratio = lp - inference
    ratio = np.exp(log_ratio)
    prob_delta = np.exp(lp) - np.exp(inference)
    invalid_high, invalid_low = prob_delta > DPPO_MASK_HIGH, prob_delta < -DPPO_MASK_LOW
    invalid = np.where(adv > 0, invalid_high, invalid_low)
    floats = lambda a: [_json_float(v) for v in np.asarray(a, dtype=np.float32).tolist()]  # noqa: E731
    return {
        "token_ids": [int(v) for v in cols["input_ids"]],
        "position_ids": [int(v) for v in cols["position_ids"]],
        "loss_mask": [bool(v) for v in loss],
        "advantages": floats(adv),
        "inference_logprobs": floats(inference),
        "trainer_logprobs": floats(lp),
        "entropy": floats(ent),
        "mismatch_kl": floats(ratio - log_ratio - 1),
        "log_importance_ratio": floats(log_ratio),
        "importance_ratio": floats(ratio),
        "prob_delta": floats(prob_delta),
        "is_masked": [bool(v) for v in loss & invalid],
        "is_masked_high": [bool(v) for v in loss & (adv > 0) & invalid_high],
        "is_masked_low": [bool(v) for v in loss & (adv < 0) & invalid_low],
        "rl_weights": [None] * n,
        "ce_weights": [None] * n,
        "ref_kl_weights": [None] * n,
        "env_names": list(cols["env_names"]),
    }


def _trim_padding(columns: dict, start: int, end: int) -> int:
    while end > start and columns["env_names"][end - 1] == "" and not columns["loss_mask"][end - 1]:
        end -= 1
    return end


def export_step(out_dir: Path, step: int, episodes: list[Episode], *, ranks: int = 2) -> Path:
    """Every rank's ``export`` calls for ``step`` (one micro batch of two samples each), then
    ``mark_stable``."""
    rng = np.random.default_rng(step)
    step_dir = out_dir / "token_exports" / f"step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    per_rank = [episodes[r::ranks] for r in range(ranks)]
    for rank, mine in enumerate(per_rank):
        exported = 0
        path = step_dir / f"rank_{rank}.jsonl"
        for micro_step in range(0, len(mine), 2):
            cols, lp, ent, lengths = _micro_batch(mine[micro_step : micro_step + 2], rng)
            columns = _export_columns(cols, lp, ent)
            start = 0
            for idx, length in enumerate(lengths):
                raw_end = start + length
                end = _trim_padding(columns, start, raw_end)
                if end > start and any(columns["loss_mask"][start:end]):
                    env = next((v for v in columns["env_names"][start:end] if v), None)
                    record = {
                        "schema_version": 1,
                        "step": step,
                        "rank": rank,
                        "micro_step": micro_step // 2,
                        "micro_sequence_idx": idx,
                        "export_sequence_idx": exported,
                        "env_name": env,
                        **{k: v[start:end] for k, v in columns.items() if k != "env_names"},
                    }
                    with path.open("a" if exported else "w", encoding="utf-8") as f:
                        f.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
                    exported += 1
                start = raw_end
    (step_dir / "STABLE").touch()
    return step_dir


def write_export(out_dir: Path, steps: list[list[Episode]]) -> Path:
    """A trainer output directory with token exports of steps 1, 2, ... (``progress.step``)."""
    for step, episodes in enumerate(steps, start=1):
        export_step(out_dir, step, episodes)
    return out_dir

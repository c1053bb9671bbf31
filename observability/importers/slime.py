"""slime ``--dump-details DIR`` -> closedloop steps (format of THUDM/slime at commit
624b824a898ab0ec1fcb4d373004c7f3852bf515).

What slime writes, from its source at that commit:

- ``slime/utils/arguments.py``: ``--dump-details DIR`` sets ``save_debug_rollout_data`` to
  ``DIR/rollout_data/{rollout_id}.pt`` and ``save_debug_train_data`` to
  ``DIR/train_data/{rollout_id}.pt``.
- ``slime/observability/rollout_data_utils.py::save_debug_rollout_data`` (called by
  ``RolloutManager.generate`` before the samples become train data):
  ``torch.save({"rollout_id": id, "samples": [Sample.to_dict(), ...]})``; eval rollouts go to
  ``eval_{id}.pt``. ``Sample.to_dict`` (``slime/utils/types.py``) is the dataclass ``__dict__``
  with ``status`` as its string: ``tokens`` (prompt + response ids), ``response_length``,
  ``response``, ``reward``, ``status``, ``group_index``, ``index``, ``loss_mask`` (None: every
  response token), ``rollout_log_probs``, ...
- ``slime/observability/train_data_utils.py::_build_dump_payload`` (``save_debug_train_data``,
  after the actor's update): ``torch.save({"format_version": 2, "rollout_id", "rank",
  "samples", "dp_shards", "raw_reward"?})``; a sample holds ``data_parallel_rank``,
  ``rollout_position`` (its index in the rollout dump), ``sample_index`` and the per-sample
  train fields of ``RolloutManager._split_train_data_by_dp`` and the actor: ``tokens`` [L],
  ``total_lengths`` (L), ``response_lengths`` (R), ``loss_masks`` [R], ``rollout_log_probs``
  [R], ``log_probs`` [R] (the trainer's, before the update), ``advantages`` [R], ``entropy``
  [R] when computed, ``rewards``, ``truncated``, ``local_raw_reward``.

Mapping: step = rollout_id, policy_version = rollout_id + 1 (slime updates the weights once per
rollout). With the rollout dump, rows follow the rollout's token sequence: ``token_id`` is the
rollout's id and ``train_token_id`` the id the trainer held at the same position, and the train
arrays (response entry j = position L - R + j) are laid on those positions, as closedloop's own
trainer records a re-tokenized response; actions are the rollout's loss-mask tokens, the loss
mask is the trainer's. Without it, rows follow the trainer's tokens (``train_token_id``
unrecorded). Response tokens outside the loss mask are observations (tool output). Status:
``truncated`` as slime says, ``masked`` when the trainer's loss mask is all zero, else
``trained``; reward: the raw reward. Simplifications: eval rollouts, teacher log-probs (OPD),
routed experts and the engine's weight-version strings are not imported. Files are loaded with
``torch.load(weights_only=True)``: nothing in a dump is unpickled as code (a dump holding other
Python objects is refused). torch is imported here only, lazily.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from observability.importers.dump import (
    DumpError,
    DumpStep,
    check_trajectory,
    finite_or_none,
)
from observability.trajectory import Trajectory

SOURCE_REPO = "THUDM/slime"
SOURCE_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
FORMAT_VERSION = 2
_FILE = re.compile(r"^(\d+)\.pt$")
_FINISH = {"completed": "stop", "truncated": "length"}


def _load(path: Path) -> Any:
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DumpError(f"{path}: not a readable torch file (truncated?): {first}") from None


def _array(value: Any, where: str, name: str, dtype) -> np.ndarray:
    if value is None:
        raise DumpError(f"{where}: field {name!r} is missing")
    if hasattr(value, "detach"):  # a tensor
        value = value.detach().float().numpy() if value.is_floating_point() else value.numpy()
    try:
        return np.asarray(value, dtype=dtype).reshape(-1)
    except (TypeError, ValueError) as e:
        raise DumpError(f"{where}: field {name!r} is not numeric ({e})") from None


def _int(value: Any, where: str, name: str) -> int:
    a = _array(value, where, name, np.float64)
    if a.size != 1 or a[0] != np.round(a[0]):
        raise DumpError(f"{where}: field {name!r} is not one integer")
    return int(a[0])


def _lay(values: np.ndarray, start: int, length: int, fill: Any) -> np.ndarray:
    """``values`` placed at absolute positions ``start, start + 1, ...`` of an array of
    ``length`` filled with ``fill`` (entries falling outside are dropped)."""
    out = np.full(length, fill, dtype=values.dtype)
    end = min(length, start + len(values))
    if end > start:
        out[start:end] = values[: end - start]
    return out


def _train_side(s: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The trainer's view of one sample: tokens, prompt length and its [R] response arrays."""
    if not isinstance(s, Mapping):
        raise DumpError(f"{where}: a dict expected, got {type(s).__name__}")
    tokens = _array(s.get("tokens"), where, "tokens", np.int64)
    total = _int(s.get("total_lengths", len(tokens)), where, "total_lengths")
    r = _int(s.get("response_lengths"), where, "response_lengths")
    if total != len(tokens) or not 0 <= r <= total:
        raise DumpError(f"{where}: {len(tokens)} tokens, total_lengths={total}, response={r}")
    out: dict[str, Any] = {"tokens": tokens, "start": total - r}
    for name in ("loss_masks", "log_probs", "rollout_log_probs", "advantages", "entropy"):
        if s.get(name) is None:
            if name in ("loss_masks", "log_probs"):
                raise DumpError(f"{where}: field {name!r} is missing")
            out[name] = None
            continue
        out[name] = _array(s.get(name), where, name, np.float64)
        if len(out[name]) != r:
            raise DumpError(f"{where}: field {name!r} has {len(out[name])} values, response {r}")
    out["loss_masks"] = out["loss_masks"] != 0
    return out


def _sample(
    s: Mapping[str, Any],
    rollout: Mapping[str, Any] | None,
    *,
    sample_id: int,
    where: str,
    raw_reward: Any,
    vocab_size: int | None,
) -> Trajectory:
    t = _train_side(s, where)
    start, loss = t["start"], t["loss_masks"]
    truncated = bool(s.get("truncated", 0))
    reward = finite_or_none(s.get("local_raw_reward", raw_reward))
    sample: dict[str, Any] = {"finish_reason": "length" if truncated else None}
    if rollout is None:  # rows follow the trainer's sequence
        ids, n_prompt = t["tokens"], start
        action = _lay(loss, start, len(ids), False)
        rollout_lp, r_start, train_ids = t["rollout_log_probs"], start, None
    else:  # rows follow the rollout's sequence; the trainer's values sit on the same positions
        rwhere = f"{where} (rollout dump)"
        if not isinstance(rollout, Mapping):
            raise DumpError(f"{rwhere}: a dict expected, got {type(rollout).__name__}")
        ids = _array(rollout.get("tokens"), rwhere, "tokens", np.int64)
        n_resp = _int(rollout.get("response_length"), rwhere, "response_length")
        n_prompt = len(ids) - n_resp
        if not 0 <= n_prompt <= len(ids):
            raise DumpError(f"{rwhere}: response_length={n_resp} with {len(ids)} tokens")
        mask = rollout.get("loss_mask")
        gen = np.ones(n_resp, bool) if mask is None else _array(mask, rwhere, "loss_mask", np.int64)
        action = _lay(np.asarray(gen) != 0, n_prompt, len(ids), False)
        rollout_lp, r_start = t["rollout_log_probs"], start
        if rollout.get("rollout_log_probs") is not None:
            rollout_lp = _array(rollout["rollout_log_probs"], rwhere, "rollout_log_probs", float)
            r_start = n_prompt
        positions = np.arange(len(ids))
        train_ids = np.ma.masked_array(
            _lay(t["tokens"], 0, len(ids), 0), mask=positions >= len(t["tokens"])
        )
        slime_status = str(rollout.get("status") or "")
        truncated = truncated or slime_status == "truncated"
        if reward is None:
            reward = finite_or_none(rollout.get("reward"))
        sample = {
            "finish_reason": _FINISH.get(slime_status, slime_status or None),
            "group_id": rollout.get("group_index"),
            "response_text": rollout.get("response"),
        }
    n = len(ids)
    if truncated:
        status = "truncated"
    else:  # slime's remove_sample zeroes the loss mask of a sample it keeps in the batch
        status = "masked" if len(loss) and not loss.any() else "trained"

    def laid(name: str) -> np.ndarray | None:
        return None if t[name] is None else _lay(t[name], start, n, np.nan)

    tr = Trajectory(
        sample_id=sample_id,
        token_ids=ids,
        n_prompt=n_prompt,
        rollout_logp=None if rollout_lp is None else _lay(rollout_lp, r_start, n, np.nan),
        train_logp=laid("log_probs"),
        action=action,
        loss_mask=_lay(loss, start, n, False),
        train_token_ids=train_ids,
        advantage=laid("advantages"),
        entropy=laid("entropy"),
        reward=reward,
        status=status,
        sample=sample,
    )
    return check_trajectory(tr, where, vocab_size)


def _payload(path: Path, *, rollout_id: int, train: bool) -> Mapping[str, Any]:
    """The dict ``path`` holds, checked: a ``samples`` list, the format version, the id."""
    payload = _load(path)
    if not isinstance(payload, Mapping) or not isinstance(payload.get("samples"), list):
        raise DumpError(f"{path}: not a slime dump (a dict with a 'samples' list expected)")
    if train and payload.get("format_version") != FORMAT_VERSION:
        raise DumpError(
            f"{path}: train dump format_version {payload.get('format_version')!r}, this importer "
            f"reads {FORMAT_VERSION} (slime {SOURCE_COMMIT[:12]})"
        )
    if payload.get("rollout_id", rollout_id) != rollout_id:
        raise DumpError(f"{path}: rollout_id {payload.get('rollout_id')!r} != file name's")
    return payload


def _pair(s: Any, i: int, rollout: list, by_index: dict, where: str) -> Mapping | None:
    """The rollout-dump sample of train sample ``s``: by ``rollout_position``, else by
    ``sample_index``, else by order when both dumps hold as many samples."""
    if isinstance(s, Mapping) and s.get("rollout_position") is not None:
        pos = int(s["rollout_position"])
        if not 0 <= pos < len(rollout):
            raise DumpError(f"{where}: rollout_position {pos} outside the rollout dump's samples")
        return rollout[pos]
    if isinstance(s, Mapping) and s.get("sample_index") in by_index:
        return by_index[s["sample_index"]]
    if len(rollout) > i:
        return rollout[i]
    raise DumpError(f"{where}: no rollout-dump sample to pair with")


def read_steps(src: str | Path, *, vocab_size: int | None = None) -> Iterator[DumpStep]:
    """The steps of the slime dump directory ``src`` (holding ``train_data/``), in order."""
    src = Path(src)
    train_dir, rollout_dir = src / "train_data", src / "rollout_data"
    if not train_dir.is_dir():
        raise DumpError(f"{src}: no train_data/ directory (slime --dump-details DIR expected)")
    files = sorted((int(m[1]), p) for p in train_dir.iterdir() if (m := _FILE.match(p.name)))
    if not files:
        raise DumpError(f"{train_dir}: no <rollout_id>.pt files")
    next_id = 0
    for rollout_id, path in files:
        payload = _payload(path, rollout_id=rollout_id, train=True)
        raw = payload.get("raw_reward")  # whole-batch raw rewards, by rollout position
        rollout = None
        if rollout_dir.is_dir():
            rpath = rollout_dir / f"{rollout_id}.pt"
            if not rpath.is_file():
                raise DumpError(f"{rpath}: missing (the rollout dump of {path})")
            rollout = _payload(rpath, rollout_id=rollout_id, train=False)["samples"]
        by_index = {r.get("index"): r for r in rollout or () if isinstance(r, Mapping)}
        trajs = []
        for i, s in enumerate(payload["samples"]):
            where = f"{path}: sample {i}"
            pair = None if rollout is None else _pair(s, i, rollout, by_index, where)
            pos = s.get("rollout_position") if isinstance(s, Mapping) else None
            top = (
                raw[int(pos)]
                if raw is not None and pos is not None and int(pos) < len(raw)
                else None
            )
            trajs.append(
                _sample(
                    s, pair, sample_id=next_id, where=where, raw_reward=top, vocab_size=vocab_size
                )
            )
            next_id += 1
        yield DumpStep(rollout_id, rollout_id + 1, trajs, source=str(path))

"""``Trajectory``: one sample as any trainer holds it, and the ``samples`` / ``tokens`` rows it becomes.

A third-party training loop, or an importer of another framework's dump, describes a sample by
its token ids (prompt first) and per-token arrays aligned to them: entry t of a log-prob array is
the log-prob of token t given the tokens before it, and prompt entries are ignored.
``trajectory_columns`` turns a step's trajectories into schema columns without per-token Python.
Simplifications: roles are ``prompt`` (the first ``n_prompt`` positions), ``action`` (generated
by the policy) and ``observation`` (the other response tokens: tool or environment output);
log-probs, ratio, advantage and entropy are kept on action tokens only (null elsewhere, as
closedloop's own trainer records them); a non-finite log-prob is stored as null, which the gate's
``action.logp_finite`` reports; ``mask_reason`` and ``prefix_hash`` are left null (the rule behind
a foreign trust mask is not known here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from observability.enums import ROLES, SAMPLE_STATUSES

ROLE_PROMPT, ROLE_ACTION, ROLE_OBSERVATION = (
    ROLES.index(r) for r in ("prompt", "action", "observation")
)
TOKEN_FLOATS = ("rollout_logp", "train_logp", "old_logp", "advantage", "entropy", "is_weight")
"""Per-token float fields, stored on action tokens only."""
TOKEN_FLAGS = ("clip_low", "clip_high")
"""Per-token bool fields of the loss, stored on action tokens only."""


def _numpy(values: Any) -> Any:
    if type(values).__module__.startswith("torch"):  # CPU tensors, without importing torch
        values = values.detach()
        return values.float().numpy() if values.is_floating_point() else values.numpy()
    return values


def _floats(values: Any) -> np.ndarray:
    """[T] float64, NaN where the input is null (None, masked) or not finite."""
    values = _numpy(values)
    if isinstance(values, np.ma.MaskedArray):
        values = values.astype(np.float64).filled(np.nan)
    a = np.array(values, dtype=np.float64)  # None -> NaN
    a[~np.isfinite(a)] = np.nan
    return a


def _ints(values: Any) -> np.ma.MaskedArray:
    """[T] int64, masked where the input is masked."""
    values = _numpy(values)
    mask = np.ma.getmaskarray(values) if isinstance(values, np.ma.MaskedArray) else None
    data = np.ma.getdata(values) if mask is not None else values
    a = np.asarray(data)
    if a.dtype.kind not in "iub":
        raise TypeError(f"integer values expected, got dtype {a.dtype}")
    return np.ma.masked_array(a.astype(np.int64), mask=mask if mask is not None else False)


@dataclass(frozen=True)
class Trajectory:
    """One sample: its token sequence and what each side computed per token (arrays are [T])."""

    sample_id: int
    """Unique in the run."""
    token_ids: Any
    """[T] the rollout's token ids, prompt first (numpy array, CPU tensor or list)."""
    n_prompt: int
    """Prompt tokens at the start of ``token_ids``, in [0, T]."""
    rollout_logp: Any = None
    """[T] log-prob of each token under the rollout engine; None: not recorded."""
    train_logp: Any = None
    """[T] log-prob of each token recomputed by the trainer; None: not recorded."""
    action: Any = None
    """[T] bool, the policy generated the token; None: every response token."""
    loss_mask: Any = None
    """[T] bool, the token is in the loss; None: every action token."""
    train_token_ids: Any = None
    """[T] the ids the trainer scored, when it keeps its own copy (masked where it has none:
    a shorter re-tokenized sequence); None: not recorded."""
    old_logp: Any = None
    """[T] π_old of the ratio when it is not ``train_logp``; None: not recorded."""
    advantage: Any = None
    """[T] token advantage (or one number for the whole sample); None: not recorded."""
    entropy: Any = None
    """[T] token entropy under the trainer; None: not recorded."""
    trust_mask: Any = None
    """[T] bool, token kept by the trainer's trust / mismatch mask; None: not recorded."""
    clip_low: Any = None
    """[T] bool, the ratio was clipped below (negative advantage); None: not recorded."""
    clip_high: Any = None
    """[T] bool, the ratio was clipped above (positive advantage); None: not recorded."""
    is_weight: Any = None
    """[T] importance-sampling weight on the token's loss (0: masked); None: not recorded."""
    reward: float | None = None
    """Total reward of the sample."""
    status: str = "trained"
    """``samples.status``: one of ``observability.enums.SAMPLE_STATUSES``."""
    sample: Mapping[str, Any] = field(default_factory=dict)
    """Other ``samples`` columns of this sample, e.g. ``group_id``, ``finish_reason``."""

    def __post_init__(self) -> None:
        where = f"trajectory sample_id={self.sample_id}"
        try:
            ids = _ints(self.token_ids)
        except TypeError as e:
            raise ValueError(f"{where}: token_ids: {e}") from None
        if ids.ndim != 1 or np.ma.is_masked(ids):
            raise ValueError(f"{where}: token_ids must be one unmasked row of ids")
        t = len(ids)
        if not 0 <= self.n_prompt <= t:
            raise ValueError(f"{where}: n_prompt={self.n_prompt} outside [0, {t}]")
        if self.status not in SAMPLE_STATUSES:
            raise ValueError(f"{where}: status {self.status!r} not in {list(SAMPLE_STATUSES)}")
        values = {"token_ids": ids.data}
        flags = ("action", "loss_mask", "train_token_ids", "trust_mask", *TOKEN_FLAGS)
        for name in (*TOKEN_FLOATS, *flags):
            raw = getattr(self, name)
            if raw is None:
                continue
            if name == "advantage" and np.ndim(_numpy(raw)) == 0:
                raw = np.full(t, float(raw))
            try:
                if name in TOKEN_FLOATS:
                    arr = _floats(raw)
                elif name == "train_token_ids":
                    arr = _ints(raw)
                else:
                    arr = np.asarray(_numpy(raw)).astype(bool)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where}: {name}: {e}") from None
            if arr.shape != (t,):
                raise ValueError(f"{where}: {name} has shape {arr.shape}, token_ids ({t},)")
            values[name] = arr
        response = np.arange(t) >= self.n_prompt
        action = values.get("action", response) & response
        values["action"] = action
        values["loss_mask"] = values.get("loss_mask", action)
        for name, arr in values.items():  # frozen: the normalised arrays replace the inputs
            object.__setattr__(self, name, arr)

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


def _cat(parts: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _gather(trajs: Sequence[Trajectory], name: str, absent: Any) -> np.ndarray | None:
    """``name`` of every trajectory concatenated (``absent`` fills those without it), or None
    when no trajectory records it."""
    if all(getattr(tr, name) is None for tr in trajs):
        return None
    return _cat(
        [
            getattr(tr, name) if getattr(tr, name) is not None else np.full(tr.n_tokens, absent)
            for tr in trajs
        ]
    )


def _token_floats(trajs: Sequence[Trajectory], name: str, action: np.ndarray):
    """A nullable float32 column (null off actions and where not finite), or None."""
    a = _gather(trajs, name, np.nan)
    if a is None:
        return None
    return np.ma.masked_array(a.astype(np.float32), mask=~action | np.isnan(a))


def token_columns(step: int, trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """The ``tokens`` columns of ``trajs`` (one row per token) for step ``step``."""
    n = [tr.n_tokens for tr in trajs]
    pos = _cat([np.arange(k, dtype=np.int32) for k in n]).astype(np.int32)
    action = _cat([tr.action for tr in trajs]).astype(bool)
    response = _cat([np.arange(tr.n_tokens) >= tr.n_prompt for tr in trajs]).astype(bool)
    roles = np.where(action, ROLE_ACTION, np.where(response, ROLE_OBSERVATION, ROLE_PROMPT))
    cols: dict[str, Any] = {
        "step": np.full(len(pos), step, dtype=np.int64),
        "sample_id": np.repeat(np.array([tr.sample_id for tr in trajs], dtype=np.int64), n),
        "pos": pos,
        "token_id": _cat([tr.token_ids for tr in trajs]).astype(np.int64),
        "role": roles.astype(np.int8),
        "loss_mask": _cat([tr.loss_mask for tr in trajs]).astype(bool),
    }
    for name in TOKEN_FLOATS:
        col = _token_floats(trajs, name, action)
        if col is not None:
            cols[name] = col
    if "rollout_logp" in cols and "train_logp" in cols:
        r, t = cols["rollout_logp"], cols["train_logp"]
        cols["ratio"] = np.ma.exp(t.astype(np.float64) - r).astype(np.float32)
    kept = _gather(trajs, "trust_mask", -1)  # -1: this trajectory records no trust mask
    if kept is not None:
        cols["trust_mask"] = np.ma.masked_array((kept == 1) & action, mask=kept == -1)
    for name in TOKEN_FLAGS:  # on action tokens only, like the log-probs
        flag = _gather(trajs, name, -1)
        if flag is not None:
            cols[name] = np.ma.masked_array(flag == 1, mask=(flag == -1) | ~action)
    if any(tr.train_token_ids is not None for tr in trajs):
        parts = [
            tr.train_token_ids
            if tr.train_token_ids is not None
            else np.ma.masked_all(tr.n_tokens, dtype=np.int64)
            for tr in trajs
        ]
        cols["train_token_id"] = np.ma.concatenate(parts)
    return cols


def sample_columns(step: int, trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """The ``samples`` columns of ``trajs`` (one row per trajectory) for step ``step``."""
    cols: dict[str, Any] = {
        "sample_id": np.array([tr.sample_id for tr in trajs], dtype=np.int64),
        "step": np.full(len(trajs), step, dtype=np.int64),
        "status": [tr.status for tr in trajs],
        "n_prompt_tokens": np.array([tr.n_prompt for tr in trajs], dtype=np.int64),
        "n_response_tokens": np.array([tr.n_tokens - tr.n_prompt for tr in trajs], dtype=np.int64),
    }
    if any(tr.reward is not None for tr in trajs):
        cols["reward"] = [None if tr.reward is None else float(tr.reward) for tr in trajs]
    for key in sorted({k for tr in trajs for k in tr.sample}):
        if key in cols:
            raise ValueError(f"trajectory sample column {key!r} is set by the Trajectory itself")
        cols[key] = [tr.sample.get(key) for tr in trajs]
    return cols

"""Deterministic per-sample token sampling: which samples keep their per-token rows.

A sample is kept when a 64-bit mix (splitmix64 finaliser) of its ``sample_id``, mapped to [0, 1),
is below ``rate``: the same ids are kept in every process and run, and the kept set at a lower
rate is a subset of the kept set at a higher one. Vectorized numpy; no per-row Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def sample_hash_unit(sample_ids: Any) -> np.ndarray:
    """Map ``sample_ids`` [N] (ints) to uniform floats in [0, 1), deterministically.

    Returns float64 [N]. Uses the top 53 bits of splitmix64(sample_id), so every double is exact.
    """
    z = np.asarray(sample_ids).astype(np.int64, copy=False).view(np.uint64)
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def keep_tokens_for(sample_ids: Any, rate: float) -> np.ndarray:
    """Bool mask [N]: which of ``sample_ids`` [N] keep per-token telemetry at ``rate`` in [0, 1].

    Accepts numpy arrays, CPU torch tensors and lists of ints. ``rate`` 1.0 keeps all, 0.0 none.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"token_sample_rate must be in [0, 1], got {rate}")
    ids = sample_ids.numpy() if hasattr(sample_ids, "numpy") else np.asarray(sample_ids)
    if rate >= 1.0:
        return np.ones(ids.shape[0], dtype=bool)
    return sample_hash_unit(ids) < rate
